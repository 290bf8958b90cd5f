"""Low-level ctypes declarations of flash.h (the libflash C ABI, major version 1).

Everything here mirrors flash.h one to one: constants, the seven public structs and every function,
each declared once with its argtypes/restype next to its C prototype. Nothing here knows about
numpy or any framework; see _attention.py for the high-level API.

The shared library is looked up, in order:
  1. the LIBFLASH_PATH environment variable (a file, or a directory holding libflash.so[.1]);
     when it is set and cannot be loaded, import fails (no silent fall-back to another copy);
  2. a copy bundled inside this package (libflash/lib/libflash.so*);
  3. the system loader: ctypes.util.find_library("flash"), then "libflash.so.1" / "libflash.so".
At import the major version and the size of every struct are checked against the loaded library.
"""

import ctypes
import ctypes.util
import os
import sys

# ---- Version of the header this module mirrors --------------------------------------------------------
FLASH_VERSION_MAJOR = 1
FLASH_VERSION_MINOR = 3
FLASH_VERSION_PATCH = 0

# ---- Status codes -------------------------------------------------------------------------------------
FLASH_OK = 0
FLASH_ERROR_INVALID_ARGUMENT = 100
FLASH_ERROR_NULL_POINTER = 101
FLASH_ERROR_STRUCT_SIZE = 102
FLASH_ERROR_BAD_SHAPE = 110
FLASH_ERROR_BAD_STRIDE = 111
FLASH_ERROR_DTYPE_MISMATCH = 120
FLASH_ERROR_UNSUPPORTED_DTYPE = 121
FLASH_ERROR_DEVICE_MISMATCH = 130
FLASH_ERROR_UNSUPPORTED_HEAD_DIM = 140
FLASH_ERROR_BAD_MASK = 150
FLASH_ERROR_NO_CUDA_DEVICE = 200
FLASH_ERROR_ALGORITHM_UNAVAILABLE = 210
FLASH_ERROR_UNSUPPORTED = 220
FLASH_ERROR_OUT_OF_MEMORY = 300
FLASH_ERROR_WORKSPACE_TOO_SMALL = 310
FLASH_ERROR_CUDA = 400
FLASH_ERROR_CUBLAS = 410
FLASH_ERROR_INTERNAL = 900

# ---- Data types and devices ---------------------------------------------------------------------------
FLASH_DTYPE_FP32 = 1
FLASH_DTYPE_FP16 = 2
FLASH_DTYPE_BF16 = 3

FLASH_DEVICE_CPU = 1
FLASH_DEVICE_CUDA = 2

# ---- Algorithms ---------------------------------------------------------------------------------------
FLASH_ALGO_AUTO = 0
FLASH_ALGO_CPU = 1
FLASH_ALGO_NAIVE = 2
FLASH_ALGO_SM80 = 3
FLASH_ALGO_SM90 = 4
FLASH_ALGO_COUNT = 5

# ---- Masks --------------------------------------------------------------------------------------------
FLASH_ALIGN_BOTTOM_RIGHT = 0
FLASH_ALIGN_TOP_LEFT = 1

# ---- Flags --------------------------------------------------------------------------------------------
FLASH_FLAG_DETERMINISTIC = 1

# ---- Struct ids for flash_struct_size -----------------------------------------------------------------
FLASH_STRUCT_TENSOR = 1
FLASH_STRUCT_FWD_ARGS = 2
FLASH_STRUCT_BLOCK_MASK = 3
FLASH_STRUCT_DEVICE_INFO = 4
FLASH_STRUCT_BWD_ARGS = 5  # since 1.1
FLASH_STRUCT_KVCACHE_ARGS = 6  # since 1.2
FLASH_STRUCT_COMBINE_ARGS = 7  # since 1.2


# ---- Structs ------------------------------------------------------------------------------------------
class flash_tensor(ctypes.Structure):
    """typedef struct flash_tensor { void* data; int32_t dtype, device_type, device_id, ndim;
    int64_t shape[4]; int64_t strides[4]; } flash_tensor;   (strides in elements)"""

    _fields_ = [
        ("data", ctypes.c_void_p),
        ("dtype", ctypes.c_int32),
        ("device_type", ctypes.c_int32),
        ("device_id", ctypes.c_int32),
        ("ndim", ctypes.c_int32),
        ("shape", ctypes.c_int64 * 4),
        ("strides", ctypes.c_int64 * 4),
    ]


class flash_block_mask(ctypes.Structure):
    """typedef struct flash_block_mask { size_t struct_size; int32_t block_m, block_n, num_q_blocks,
    max_kv_blocks; const int32_t* kv_num_blocks; const int32_t* kv_indices;
    int64_t kv_num_blocks_strides[3]; int64_t kv_indices_strides[4]; } flash_block_mask;"""

    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("block_m", ctypes.c_int32),
        ("block_n", ctypes.c_int32),
        ("num_q_blocks", ctypes.c_int32),
        ("max_kv_blocks", ctypes.c_int32),
        ("kv_num_blocks", ctypes.c_void_p),  # const int32_t*
        ("kv_indices", ctypes.c_void_p),  # const int32_t*
        ("kv_num_blocks_strides", ctypes.c_int64 * 3),
        ("kv_indices_strides", ctypes.c_int64 * 4),
    ]


class flash_fwd_args(ctypes.Structure):
    """typedef struct flash_fwd_args { size_t struct_size; flash_tensor q, k, v, o, lse;
    float softmax_scale; int32_t causal, causal_alignment, window_left, window_right, algorithm;
    uint32_t flags; int32_t algorithm_used; const flash_block_mask* block_mask; void* stream;
    void* workspace; size_t workspace_size; const int32_t* cu_seqlens_q; const int32_t* cu_seqlens_k;
    int32_t max_seqlen_q, max_seqlen_k; const int32_t* seqused_k; int32_t varlen_batch, reserved_1_3; } flash_fwd_args;
    (the last seven fields since 1.3)"""

    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("q", flash_tensor),
        ("k", flash_tensor),
        ("v", flash_tensor),
        ("o", flash_tensor),
        ("lse", flash_tensor),
        ("softmax_scale", ctypes.c_float),
        ("causal", ctypes.c_int32),
        ("causal_alignment", ctypes.c_int32),
        ("window_left", ctypes.c_int32),
        ("window_right", ctypes.c_int32),
        ("algorithm", ctypes.c_int32),
        ("flags", ctypes.c_uint32),
        ("algorithm_used", ctypes.c_int32),
        ("block_mask", ctypes.POINTER(flash_block_mask)),
        ("stream", ctypes.c_void_p),
        ("workspace", ctypes.c_void_p),
        ("workspace_size", ctypes.c_size_t),
        # since 1.3: a packed variable-length batch (all 0/NULL: dense)
        ("cu_seqlens_q", ctypes.c_void_p),  # const int32_t*
        ("cu_seqlens_k", ctypes.c_void_p),  # const int32_t*
        ("max_seqlen_q", ctypes.c_int32),
        ("max_seqlen_k", ctypes.c_int32),
        ("seqused_k", ctypes.c_void_p),  # const int32_t*
        ("varlen_batch", ctypes.c_int32),
        ("reserved_1_3", ctypes.c_int32),
    ]


class flash_device_info(ctypes.Structure):
    """typedef struct flash_device_info { size_t struct_size; int32_t device_type, device_id;
    char name[256]; int32_t cc_major, cc_minor, multiprocessors, clock_khz, memory_clock_khz,
    memory_bus_width_bits; int64_t shared_mem_per_sm, shared_mem_per_block_optin, l2_cache_bytes,
    total_memory_bytes; uint32_t algorithms; } flash_device_info;"""

    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("device_type", ctypes.c_int32),
        ("device_id", ctypes.c_int32),
        ("name", ctypes.c_char * 256),
        ("cc_major", ctypes.c_int32),
        ("cc_minor", ctypes.c_int32),
        ("multiprocessors", ctypes.c_int32),
        ("clock_khz", ctypes.c_int32),
        ("memory_clock_khz", ctypes.c_int32),
        ("memory_bus_width_bits", ctypes.c_int32),
        ("shared_mem_per_sm", ctypes.c_int64),
        ("shared_mem_per_block_optin", ctypes.c_int64),
        ("l2_cache_bytes", ctypes.c_int64),
        ("total_memory_bytes", ctypes.c_int64),
        ("algorithms", ctypes.c_uint32),
    ]


class flash_bwd_args(ctypes.Structure):
    """typedef struct flash_bwd_args { size_t struct_size; flash_tensor q, k, v, o, d_o, lse, dq, dk, dv;
    float softmax_scale; int32_t causal, causal_alignment, window_left, window_right, algorithm;
    uint32_t flags; int32_t algorithm_used; const flash_block_mask* block_mask; void* stream;
    void* workspace; size_t workspace_size; const int32_t* cu_seqlens_q; const int32_t* cu_seqlens_k;
    int32_t max_seqlen_q, max_seqlen_k; const int32_t* seqused_k; int32_t varlen_batch, reserved_1_3; } flash_bwd_args;
    (since 1.1; the last seven fields since 1.3)"""

    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("q", flash_tensor),
        ("k", flash_tensor),
        ("v", flash_tensor),
        ("o", flash_tensor),
        ("d_o", flash_tensor),
        ("lse", flash_tensor),
        ("dq", flash_tensor),
        ("dk", flash_tensor),
        ("dv", flash_tensor),
        ("softmax_scale", ctypes.c_float),
        ("causal", ctypes.c_int32),
        ("causal_alignment", ctypes.c_int32),
        ("window_left", ctypes.c_int32),
        ("window_right", ctypes.c_int32),
        ("algorithm", ctypes.c_int32),
        ("flags", ctypes.c_uint32),
        ("algorithm_used", ctypes.c_int32),
        ("block_mask", ctypes.POINTER(flash_block_mask)),
        ("stream", ctypes.c_void_p),
        ("workspace", ctypes.c_void_p),
        ("workspace_size", ctypes.c_size_t),
        # since 1.3: a packed variable-length batch (all 0/NULL: dense)
        ("cu_seqlens_q", ctypes.c_void_p),  # const int32_t*
        ("cu_seqlens_k", ctypes.c_void_p),  # const int32_t*
        ("max_seqlen_q", ctypes.c_int32),
        ("max_seqlen_k", ctypes.c_int32),
        ("seqused_k", ctypes.c_void_p),  # const int32_t*
        ("varlen_batch", ctypes.c_int32),
        ("reserved_1_3", ctypes.c_int32),
    ]


class flash_kvcache_args(ctypes.Structure):
    """typedef struct flash_kvcache_args { size_t struct_size; flash_tensor q, k_cache, v_cache, k_new, v_new, o,
    lse; const int32_t* cache_seqlens; const int32_t* cache_batch_idx; const int32_t* block_table;
    int64_t block_table_stride; int32_t max_pages_per_seq; float softmax_scale; int32_t causal, window_left,
    window_right, num_splits, algorithm; uint32_t flags; int32_t algorithm_used, num_splits_used; void* stream;
    void* workspace; size_t workspace_size; } flash_kvcache_args;   (since 1.2)"""

    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("q", flash_tensor),
        ("k_cache", flash_tensor),
        ("v_cache", flash_tensor),
        ("k_new", flash_tensor),
        ("v_new", flash_tensor),
        ("o", flash_tensor),
        ("lse", flash_tensor),
        ("cache_seqlens", ctypes.c_void_p),  # const int32_t*
        ("cache_batch_idx", ctypes.c_void_p),  # const int32_t*
        ("block_table", ctypes.c_void_p),  # const int32_t*
        ("block_table_stride", ctypes.c_int64),
        ("max_pages_per_seq", ctypes.c_int32),
        ("softmax_scale", ctypes.c_float),
        ("causal", ctypes.c_int32),
        ("window_left", ctypes.c_int32),
        ("window_right", ctypes.c_int32),
        ("num_splits", ctypes.c_int32),
        ("algorithm", ctypes.c_int32),
        ("flags", ctypes.c_uint32),
        ("algorithm_used", ctypes.c_int32),
        ("num_splits_used", ctypes.c_int32),
        ("stream", ctypes.c_void_p),
        ("workspace", ctypes.c_void_p),
        ("workspace_size", ctypes.c_size_t),
    ]


class flash_combine_args(ctypes.Structure):
    """typedef struct flash_combine_args { size_t struct_size; int32_t num_parts; const flash_tensor* o_parts;
    const flash_tensor* lse_parts; flash_tensor o, lse; void* stream; } flash_combine_args;   (since 1.2)"""

    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("num_parts", ctypes.c_int32),
        ("o_parts", ctypes.POINTER(flash_tensor)),
        ("lse_parts", ctypes.POINTER(flash_tensor)),
        ("o", flash_tensor),
        ("lse", flash_tensor),
        ("stream", ctypes.c_void_p),
    ]


# Struct id -> (ctypes class, may the library's struct be larger, i.e. is it extensible by appending).
STRUCTS = {
    FLASH_STRUCT_TENSOR: (flash_tensor, False),  # never extended (a new layout would be a new type)
    FLASH_STRUCT_FWD_ARGS: (flash_fwd_args, True),
    FLASH_STRUCT_BLOCK_MASK: (flash_block_mask, True),
    FLASH_STRUCT_DEVICE_INFO: (flash_device_info, True),
    FLASH_STRUCT_BWD_ARGS: (flash_bwd_args, True),
    FLASH_STRUCT_KVCACHE_ARGS: (flash_kvcache_args, True),
    FLASH_STRUCT_COMBINE_ARGS: (flash_combine_args, True),
}
# Struct id -> the minor version that added it (an older library knows nothing of it: flash_struct_size says 0).
STRUCTS_SINCE_MINOR = {FLASH_STRUCT_BWD_ARGS: 1, FLASH_STRUCT_KVCACHE_ARGS: 2, FLASH_STRUCT_COMBINE_ARGS: 2}
# Struct id -> (minor version, first field it appended): the struct as a library older than that minor knows it ends
# where that field begins (flash.h's rules: fields are only ever appended).
STRUCTS_GREW = {FLASH_STRUCT_FWD_ARGS: (3, "cu_seqlens_q"), FLASH_STRUCT_BWD_ARGS: (3, "cu_seqlens_q")}


def struct_size_for_minor(which, minor):
    """sizeof() of struct `which` as a library of this minor version lays it out (this binding's sizeof for the current
    minor and newer ones): the struct_size to hand that library's init functions."""
    cls, _ = STRUCTS[which]
    grew = STRUCTS_GREW.get(which)
    if grew is not None and minor < grew[0]:
        return getattr(cls, grew[1]).offset
    return ctypes.sizeof(cls)


# ---- Locating and loading the library -----------------------------------------------------------------
if sys.platform == "darwin":
    _LIB_NAMES = ("libflash.1.dylib", "libflash.dylib")
elif sys.platform == "win32":
    _LIB_NAMES = ("flash.dll", "libflash.dll")
else:
    _LIB_NAMES = ("libflash.so.%d" % FLASH_VERSION_MAJOR, "libflash.so")

_PACKAGE_LIB_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib")


def _load_library():
    """Returns (CDLL, path). Raises ImportError naming every place tried."""
    tried = []

    env = os.environ.get("LIBFLASH_PATH")
    if env:
        path = os.path.abspath(os.path.expanduser(env))
        candidates = [os.path.join(path, n) for n in _LIB_NAMES] if os.path.isdir(path) else [path]
        for c in candidates:
            if not os.path.exists(c):
                tried.append("LIBFLASH_PATH: %s (no such file)" % c)
                continue
            try:
                return ctypes.CDLL(c), c
            except OSError as e:
                tried.append("LIBFLASH_PATH: %s (%s)" % (c, e))
        # An explicit path that does not load is an error, not a reason to pick up another copy.
        raise ImportError("libflash: LIBFLASH_PATH=%r could not be loaded; tried:\n  %s" % (env, "\n  ".join(tried)))
    tried.append("LIBFLASH_PATH (not set)")

    for n in _LIB_NAMES:
        c = os.path.join(_PACKAGE_LIB_DIR, n)
        if not os.path.exists(c):
            tried.append("package copy: %s (no such file)" % c)
            continue
        try:
            return ctypes.CDLL(c), c
        except OSError as e:
            tried.append("package copy: %s (%s)" % (c, e))

    names = []
    found = ctypes.util.find_library("flash")
    if found:
        names.append(found)
    else:
        tried.append('ctypes.util.find_library("flash") (not found)')
    names.extend(n for n in _LIB_NAMES if n not in names)
    for n in names:
        try:
            return ctypes.CDLL(n), n
        except OSError as e:
            tried.append("system loader: %s (%s)" % (n, e))

    raise ImportError(
        "libflash: cannot find the libflash shared library. Set LIBFLASH_PATH to the built libflash.so "
        "(e.g. build/libflash.so), copy it into %s, or install it where the system loader looks "
        "(ldconfig / LD_LIBRARY_PATH). Tried:\n  %s" % (_PACKAGE_LIB_DIR, "\n  ".join(tried))
    )


lib, library_path = _load_library()


def _declare(name, restype, argtypes, optional=False):
    """The library's function `name` with its prototype. optional: a function added in a later minor
    version than 1.0; None when the loaded library (an older minor) does not export it."""
    if optional and not hasattr(lib, name):
        return None
    fn = getattr(lib, name)
    fn.restype = restype
    fn.argtypes = argtypes
    return fn


_i32 = ctypes.c_int32
_u32 = ctypes.c_uint32
_p_i32 = ctypes.POINTER(ctypes.c_int32)
_p_i64 = ctypes.POINTER(ctypes.c_int64)

# ---- Functions (one declaration each, with its C prototype) -------------------------------------------
# uint32_t flash_version_number(void);
flash_version_number = _declare("flash_version_number", _u32, [])
# uint32_t flash_version_major(void);
flash_version_major = _declare("flash_version_major", _u32, [])
# uint32_t flash_version_minor(void);
flash_version_minor = _declare("flash_version_minor", _u32, [])
# struct_size handed to flash_fwd_args_init_sized / flash_bwd_args_init_sized: this binding's, or an older library's.
_FWD_ARGS_SIZE = struct_size_for_minor(FLASH_STRUCT_FWD_ARGS, flash_version_minor())
_BWD_ARGS_SIZE = struct_size_for_minor(FLASH_STRUCT_BWD_ARGS, flash_version_minor())
# uint32_t flash_version_patch(void);
flash_version_patch = _declare("flash_version_patch", _u32, [])
# const char* flash_version_string(void);
flash_version_string = _declare("flash_version_string", ctypes.c_char_p, [])
# const char* flash_build_info(void);
flash_build_info = _declare("flash_build_info", ctypes.c_char_p, [])
# const char* flash_status_string(int32_t status);
flash_status_string = _declare("flash_status_string", ctypes.c_char_p, [_i32])
# const char* flash_last_error_message(void);
flash_last_error_message = _declare("flash_last_error_message", ctypes.c_char_p, [])
# const char* flash_algorithm_name(int32_t algorithm);
flash_algorithm_name = _declare("flash_algorithm_name", ctypes.c_char_p, [_i32])
# int32_t flash_algorithm_from_name(const char* name);
flash_algorithm_from_name = _declare("flash_algorithm_from_name", _i32, [ctypes.c_char_p])
# flash_tensor flash_tensor_contiguous(void* data, int32_t dtype, int32_t device_type, int32_t device_id,
#                                      int32_t ndim, const int64_t* shape);
flash_tensor_contiguous = _declare("flash_tensor_contiguous", flash_tensor,
                                   [ctypes.c_void_p, _i32, _i32, _i32, _i32, _p_i64])
# int32_t flash_block_mask_init_sized(flash_block_mask* mask, size_t struct_size);
flash_block_mask_init_sized = _declare("flash_block_mask_init_sized", _i32, [ctypes.POINTER(flash_block_mask), ctypes.c_size_t])


def flash_block_mask_init(ref):
    """The C macro flash_block_mask_init(p): defaults for a struct of this binding's size (an older or newer
    library reads what it knows and defaults the rest)."""
    return flash_block_mask_init_sized(ref, ctypes.sizeof(flash_block_mask))

# int32_t flash_fwd_args_init_sized(flash_fwd_args* args, size_t struct_size);
flash_fwd_args_init_sized = _declare("flash_fwd_args_init_sized", _i32, [ctypes.POINTER(flash_fwd_args), ctypes.c_size_t])


def flash_fwd_args_init(ref):
    """The C macro flash_fwd_args_init(p): defaults for a struct of this binding's size (a newer library reads what
    it knows and defaults the rest; with a library older than 1.3 the struct_size is that library's, so the varlen
    fields stay 0 and unread)."""
    return flash_fwd_args_init_sized(ref, _FWD_ARGS_SIZE)

# int32_t flash_fwd_workspace_size(const flash_fwd_args* args, size_t* bytes);
flash_fwd_workspace_size = _declare("flash_fwd_workspace_size", _i32,
                                    [ctypes.POINTER(flash_fwd_args), ctypes.POINTER(ctypes.c_size_t)])
# int32_t flash_fwd(flash_fwd_args* args);
flash_fwd = _declare("flash_fwd", _i32, [ctypes.POINTER(flash_fwd_args)])
# int32_t flash_device_info_init_sized(flash_device_info* info, size_t struct_size);
flash_device_info_init_sized = _declare("flash_device_info_init_sized", _i32, [ctypes.POINTER(flash_device_info), ctypes.c_size_t])


def flash_device_info_init(ref):
    """The C macro flash_device_info_init(p): defaults for a struct of this binding's size (an older or newer
    library reads what it knows and defaults the rest)."""
    return flash_device_info_init_sized(ref, ctypes.sizeof(flash_device_info))

# int32_t flash_device_count(int32_t device_type, int32_t* count);
flash_device_count = _declare("flash_device_count", _i32, [_i32, _p_i32])
# int32_t flash_get_device_info(int32_t device_type, int32_t device_id, flash_device_info* info);
flash_get_device_info = _declare("flash_get_device_info", _i32, [_i32, _i32, ctypes.POINTER(flash_device_info)])
# uint32_t flash_compiled_algorithms(void);
flash_compiled_algorithms = _declare("flash_compiled_algorithms", _u32, [])
# size_t flash_struct_size(int32_t which);
flash_struct_size = _declare("flash_struct_size", ctypes.c_size_t, [_i32])

# ---- Backward (since 1.1; None with a 1.0 library) ----
# int32_t flash_bwd_args_init_sized(flash_bwd_args* args, size_t struct_size);
flash_bwd_args_init_sized = _declare("flash_bwd_args_init_sized", _i32, [ctypes.POINTER(flash_bwd_args), ctypes.c_size_t],
                                     optional=True)


def flash_bwd_args_init(ref):
    """The C macro flash_bwd_args_init(p): as flash_fwd_args_init."""
    return flash_bwd_args_init_sized(ref, _BWD_ARGS_SIZE)

# int32_t flash_bwd_workspace_size(const flash_bwd_args* args, size_t* bytes);
flash_bwd_workspace_size = _declare("flash_bwd_workspace_size", _i32,
                                    [ctypes.POINTER(flash_bwd_args), ctypes.POINTER(ctypes.c_size_t)], optional=True)
# int32_t flash_bwd(flash_bwd_args* args);
flash_bwd = _declare("flash_bwd", _i32, [ctypes.POINTER(flash_bwd_args)], optional=True)


# ---- KV-cache attention and combine (since 1.2; None with an older library) ----
# int32_t flash_kvcache_args_init_sized(flash_kvcache_args* args, size_t struct_size);
flash_kvcache_args_init_sized = _declare("flash_kvcache_args_init_sized", _i32,
                                         [ctypes.POINTER(flash_kvcache_args), ctypes.c_size_t], optional=True)


def flash_kvcache_args_init(ref):
    """The C macro flash_kvcache_args_init(p): defaults for a struct of this binding's size (an older or newer
    library reads what it knows and defaults the rest)."""
    return flash_kvcache_args_init_sized(ref, ctypes.sizeof(flash_kvcache_args))

# int32_t flash_fwd_kvcache_workspace_size(const flash_kvcache_args* args, size_t* bytes);
flash_fwd_kvcache_workspace_size = _declare("flash_fwd_kvcache_workspace_size", _i32,
                                            [ctypes.POINTER(flash_kvcache_args), ctypes.POINTER(ctypes.c_size_t)],
                                            optional=True)
# int32_t flash_fwd_kvcache(flash_kvcache_args* args);
flash_fwd_kvcache = _declare("flash_fwd_kvcache", _i32, [ctypes.POINTER(flash_kvcache_args)], optional=True)
# int32_t flash_combine_args_init_sized(flash_combine_args* args, size_t struct_size);
flash_combine_args_init_sized = _declare("flash_combine_args_init_sized", _i32,
                                         [ctypes.POINTER(flash_combine_args), ctypes.c_size_t], optional=True)


def flash_combine_args_init(ref):
    """The C macro flash_combine_args_init(p): defaults for a struct of this binding's size (an older or newer
    library reads what it knows and defaults the rest)."""
    return flash_combine_args_init_sized(ref, ctypes.sizeof(flash_combine_args))

# int32_t flash_combine(flash_combine_args* args);
flash_combine = _declare("flash_combine", _i32, [ctypes.POINTER(flash_combine_args)], optional=True)


# ---- Import-time checks -------------------------------------------------------------------------------
def _check_library():
    major = flash_version_major()
    if major != FLASH_VERSION_MAJOR:
        raise ImportError(
            "libflash: %s is version %s (major %d) but this binding speaks major version %d"
            % (library_path, flash_version_string().decode(), major, FLASH_VERSION_MAJOR)
        )
    minor = flash_version_minor()
    problems = []
    for which, (cls, extensible) in STRUCTS.items():
        if minor < STRUCTS_SINCE_MINOR.get(which, 0):
            continue  # an older library without this struct (nor the functions that take it)
        ours = struct_size_for_minor(which, minor)
        theirs = flash_struct_size(which)
        # Same minor: identical layout (an older minor: the prefix it knew). A newer library may only have appended
        # fields to extensible structs (it reads our smaller struct_size and defaults the rest); anything else is a
        # mismatch.
        ok = ours == theirs or (extensible and minor > FLASH_VERSION_MINOR and theirs > ours)
        if not ok:
            problems.append("%s: ctypes.sizeof is %d but the library's sizeof is %d" % (cls.__name__, ours, theirs))
    if problems:
        raise ImportError(
            "libflash: struct layout mismatch with %s (version %s): %s"
            % (library_path, flash_version_string().decode(), "; ".join(problems))
        )


_check_library()


def has_varlen():
    """Whether the loaded library takes packed variable-length batches (flash.h 1.3)."""
    return flash_version_minor() >= 3
