"""The fast path: flash_tensor fields read straight off numpy arrays and torch tensors, packed into the argument
struct with one struct.pack_into each, and option templates built once (see _attention.py, _kvcache.py).

A call takes the fast path only when every array is one this module can describe with certainty (an exact
numpy.ndarray or torch.Tensor/Parameter, a dtype libflash takes, the expected number of dimensions, no empty
dimension, strides that are whole elements, a cpu or cuda device, the strided layout) and it allocates every
result itself. Anything else returns None to the caller, which then takes the general path (_arrays.describe)
that names each problem; the fast path therefore refuses nothing the general path would have taken, and raises
nothing of its own: the library's validation (every dtype, shape, stride, device, overlap) is the same for both.

What is cached is what cannot change between calls: the struct layout, the numpy and torch dtype and device
look-ups, the option part of the argument structs (per distinct option tuple, _attention.py) and, for CUDA
tensors, the workspace size per problem shape (a stale size is caught by the library's
FLASH_ERROR_WORKSPACE_TOO_SMALL and re-queried, never trusted).

Results are allocated the cheapest way torch offers for the layout wanted (empty_like of a contiguous input, else
empty_strided with the strides spelled out): in torch 2.11 torch.empty with dtype= and device= keywords costs about
3 us of host time, more than everything else a call does in Python but the library call itself.
"""

import ctypes
import struct
import sys

import numpy as np

from . import _capi

CPU = _capi.FLASH_DEVICE_CPU
CUDA = _capi.FLASH_DEVICE_CUDA
FP32 = _capi.FLASH_DTYPE_FP32
FP16 = _capi.FLASH_DTYPE_FP16
BF16 = _capi.FLASH_DTYPE_BF16

# flash_tensor: void* data; int32 dtype, device_type, device_id, ndim; int64 shape[4]; int64 strides[4].
TENSOR = struct.Struct("@P4i4q4q")
# void* workspace; size_t workspace_size (adjacent in flash_fwd_args, flash_bwd_args and flash_kvcache_args).
WORKSPACE = struct.Struct("@PN")
POINTER = struct.Struct("@P")


def _layout_ok():
    """Whether TENSOR packs a flash_tensor exactly as ctypes lays it out (else the fast path is off)."""
    t = _capi.flash_tensor()
    if TENSOR.size != ctypes.sizeof(t):
        return False
    TENSOR.pack_into(t, 0, 0x1230, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12)
    if (t.data, t.dtype, t.device_type, t.device_id, t.ndim) != (0x1230, 1, 2, 3, 4):
        return False
    if list(t.shape) != [5, 6, 7, 8] or list(t.strides) != [9, 10, 11, 12]:
        return False
    for cls in (_capi.flash_fwd_args, _capi.flash_bwd_args, _capi.flash_kvcache_args):
        if cls.workspace_size.offset != cls.workspace.offset + ctypes.sizeof(ctypes.c_void_p):
            return False
    return True


ENABLED = _layout_ok()


# ---- numpy ----------------------------------------------------------------------------------------------------
def _numpy_data_reader():
    """A function giving a numpy array's data pointer: PyArrayObject's `data` field (right after the object header,
    numpy's layout since 1.7) read through ctypes, about 10x cheaper than x.ctypes.data. Checked at import against
    x.ctypes.data on arrays, views and offset views; x.ctypes.data is used where the check fails (not CPython)."""
    slow = lambda x: x.ctypes.data  # noqa: E731
    if sys.implementation.name != "cpython":
        return slow
    offset = object.__basicsize__
    from_address = ctypes.c_void_p.from_address
    base = np.arange(96, dtype=np.float32)
    probes = (base, base[5:], base.reshape(8, 12)[3:, 2:], base[::3], np.empty((2, 3, 4, 5), np.float16),
              np.zeros(7, np.int32)[1:])
    for a in probes:
        if from_address(id(a) + offset).value != a.ctypes.data:
            return slow
    return lambda x: from_address(id(x) + offset).value


np_ptr = _numpy_data_reader()

# numpy dtype -> (flash dtype, itemsize); ml_dtypes' bfloat16 is added the first time it is seen (native order only:
# a byte-swapped dtype is another key, never found, so the general path refuses it with its message).
_NP_CODES = {np.dtype(np.float32): (FP32, 4), np.dtype(np.float16): (FP16, 2)}


def _np_code(dt):
    c = _NP_CODES.get(dt)
    if c is None and dt.name == "bfloat16" and dt.isnative and dt.itemsize == 2:
        c = _NP_CODES[dt] = (BF16, 2)
    return c


def np_fields(x, ndim):
    """The 13 flash_tensor fields of numpy array x of `ndim` (3 or 4) dimensions, or None (general path)."""
    c = _NP_CODES.get(x.dtype) or _np_code(x.dtype)
    shape = x.shape
    if c is None or len(shape) != ndim or 0 in shape:
        return None
    code, it = c
    if ndim == 4:
        a, b, cc, d = x.strides
        if (a | b | cc | d) % it:
            return None
        return (np_ptr(x), code, CPU, 0, 4, shape[0], shape[1], shape[2], shape[3], a // it, b // it, cc // it, d // it)
    if ndim == 3:
        a, b, cc = x.strides
        if (a | b | cc) % it:
            return None
        return (np_ptr(x), code, CPU, 0, 3, shape[0], shape[1], shape[2], 0, a // it, b // it, cc // it, 0)
    return None


class NumpyKind:
    """numpy arrays: the CPU backend, results allocated with numpy."""

    name = "numpy"
    fields = staticmethod(np_fields)
    ptr = staticmethod(np_ptr)

    @staticmethod
    def needs_grad(*xs):
        return False

    @staticmethod
    def empty(like, shape):
        return np.empty(shape, like.dtype)

    @staticmethod
    def empty_as(x, f):
        """A new C-contiguous array shaped and typed like x (f: x's fields)."""
        return np.empty(x.shape, x.dtype)

    @staticmethod
    def empty_f32(like, shape):
        return np.empty(shape, np.float32)

    @staticmethod
    def int32_ptr(x, shape, like):
        """Data pointer of an int32 numpy index array of exactly `shape`, contiguous rows, else None."""
        if type(x) is not np.ndarray or x.dtype != _I32 or x.shape != shape:
            return None
        st = x.strides
        if len(shape) == 1:
            return np_ptr(x) if (st[0] == 4 or shape[0] == 1) else None
        if (st[1] == 4 or shape[1] == 1) and (shape[0] == 1 or (st[0] % 4 == 0 and st[0] >= 4 * shape[1])):
            return np_ptr(x)
        return None


_I32 = np.dtype(np.int32)

# type -> kind for the fast path; torch registers itself the first time a torch tensor reaches the general path.
KINDS = {np.ndarray: NumpyKind} if ENABLED else {}


# ---- torch ----------------------------------------------------------------------------------------------------
class TorchKind:
    """torch tensors on the CPU or a CUDA device: results with torch, on the current stream of the input's device."""

    name = "torch"
    torch = None
    codes = {}
    devices = {}
    strided = None
    raw_stream = None

    @classmethod
    def setup(cls, torch):
        cls.torch = torch
        cls.codes = {torch.float32: FP32, torch.float16: FP16, torch.bfloat16: BF16}
        cls.strided = torch.strided
        cls.empty_ = torch.empty
        cls.empty_like_ = torch.empty_like
        cls.empty_strided_ = torch.empty_strided
        cls.f32 = torch.float32
        cls.u8 = torch.uint8
        cls.i32 = torch.int32
        cls.is_grad_enabled = torch.is_grad_enabled
        getter = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        if getter is None:
            def getter(index):
                return torch.cuda.current_stream(index).cuda_stream
        cls.raw_stream = staticmethod(getter)

    @classmethod
    def _device(cls, dev):
        if dev.type == "cpu":
            r = (CPU, 0)
        elif dev.type == "cuda" and dev.index is not None and 0 <= dev.index < 2 ** 31:
            r = (CUDA, dev.index)
        else:
            return None  # another device (meta, mps, ...): the general path names it
        cls.devices[dev] = r
        return r

    @classmethod
    def fields(cls, x, ndim):
        code = cls.codes.get(x.dtype)
        dev = x.device
        d = cls.devices.get(dev) or cls._device(dev)
        if code is None or d is None or x.layout is not cls.strided:
            return None
        shape = x.shape
        if len(shape) != ndim or 0 in shape:
            return None
        st = x.stride()
        if ndim == 4:
            return (x.data_ptr(), code, d[0], d[1], 4, shape[0], shape[1], shape[2], shape[3], st[0], st[1], st[2], st[3])
        if ndim == 3:
            return (x.data_ptr(), code, d[0], d[1], 3, shape[0], shape[1], shape[2], 0, st[0], st[1], st[2], 0)
        return None

    @classmethod
    def fields_t12(cls, x):
        """The fields of the 4-d x.transpose(1, 2), read off x without making the view (a view costs about 1.4 us in
        torch 2.11): SDPA's [batch, heads, seqlen, d] tensors as libflash's [batch, seqlen, heads, d]. Or None."""
        f = cls.fields(x, 4)
        return None if f is None else f[:5] + (f[5], f[7], f[6], f[8], f[9], f[11], f[10], f[12])

    @staticmethod
    def ptr(x):
        return x.data_ptr()

    @classmethod
    def needs_grad(cls, *xs):
        if not cls.is_grad_enabled():
            return False
        for x in xs:
            if x is not None and x.requires_grad:
                return True
        return False

    @classmethod
    def empty(cls, like, shape):
        """A contiguous tensor of `shape` with like's dtype and device (empty_strided: see empty_f32)."""
        if len(shape) == 4:
            _, s, h, d = shape
            return cls.empty_strided_(shape, (s * h * d, h * d, d, 1), dtype=like.dtype, device=like.device)
        return cls.empty_(shape, dtype=like.dtype, device=like.device)

    @classmethod
    def empty_as(cls, x, f):
        """A new contiguous tensor shaped, typed and placed like the 4-d x (f: x's fields). When x is itself
        contiguous, empty_like(x) (which then keeps x's strides) is used: about half the host cost of torch.empty with
        dtype= and device= keywords (1.7 vs 3.4 us in torch 2.11, its argument parser); otherwise empty_strided (1.9)."""
        s, h, d = f[6], f[7], f[8]
        if f[12] == 1 and f[11] == d and f[10] == h * d and f[9] == s * h * d:
            return cls.empty_like_(x)
        return cls.empty_strided_((f[5], s, h, d), (s * h * d, h * d, d, 1), dtype=x.dtype, device=x.device)

    @classmethod
    def empty_like_t12(cls, x, ft):
        """torch.empty_like(x.transpose(1, 2)).transpose(1, 2), the layout of the built-in SDPA kernels' outputs (and of
        their meta functions, which torch.compile trusts), for the 4-d x whose transposed fields are ft. When x is
        contiguous either way round it is dense, and empty_like keeps the strides of a dense tensor, so empty_like(x)
        is the same layout without the two views; any other x takes the views."""
        s, h, d = ft[6], ft[7], ft[8]
        st = (ft[9], ft[11], ft[10], ft[12])  # x's own strides, [b, h, s, d]
        if st == (s * h * d, d, h * d, 1) or st == (h * s * d, s * d, d, 1):
            return cls.empty_like_(x)
        return cls.empty_like_(x.transpose(1, 2)).transpose(1, 2)

    @classmethod
    def empty_f32(cls, like, shape):
        """A contiguous fp32 tensor on like's device (the log-sum-exp). empty_strided with the strides spelled out
        costs about 1.9 us in torch 2.11, torch.empty with the same keywords about 3 (its argument parser)."""
        if len(shape) == 3:
            return cls.empty_strided_(shape, (shape[1] * shape[2], shape[2], 1), dtype=cls.f32, device=like.device)
        return cls.empty_(shape, dtype=cls.f32, device=like.device)

    @classmethod
    def empty_bytes(cls, like, n):
        return cls.empty_((n,), dtype=cls.u8, device=like.device)

    @classmethod
    def int32_ptr(cls, x, shape, like):
        """Data pointer of an int32 index tensor of exactly `shape` on like's device, contiguous rows, else None."""
        if KINDS.get(type(x)) is not cls:
            return None
        if x.dtype != cls.i32 or x.device != like.device or tuple(x.shape) != shape or x.layout is not cls.strided:
            return None
        st = x.stride()
        if len(shape) == 1:
            return x.data_ptr() if (st[0] == 1 or shape[0] == 1) else None
        if (st[1] == 1 or shape[1] == 1) and (shape[0] == 1 or st[0] >= shape[1]):
            return x.data_ptr()
        return None


def register_torch(torch):
    """Called by the general path the first time it sees a torch tensor (torch is then imported)."""
    if not ENABLED or TorchKind.torch is not None:
        return
    TorchKind.setup(torch)
    KINDS[torch.Tensor] = TorchKind
    KINDS[torch.nn.Parameter] = TorchKind


# ---- CUDA workspace from the caller's allocator ------------------------------------------------------------------
_WS_SIZES = {}
WORKSPACE_TOO_SMALL = _capi.FLASH_ERROR_WORKSPACE_TOO_SMALL


def run_with_workspace(run, size_query, args, ws_offset, key, kind, like, sentinel):
    """Runs `run(args)` on a CUDA device with its workspace allocated by the input's framework (torch's caching
    allocator, on the current stream, so CUDA-graph capture records it in the graph's pool) instead of by the library.

    The size is cached per `key` (the problem's shapes and options). With a cached size of 0 the struct holds a
    non-NULL pointer (`sentinel`, an output of the call) and workspace_size 0, so that should the library need a
    workspace after all it answers FLASH_ERROR_WORKSPACE_TOO_SMALL (before launching anything) rather than allocating
    one itself; the size is then queried and the call made again. Returns (status, workspace keepalive)."""
    need = _WS_SIZES.get(key)
    if need is None:
        need = _query(size_query, args, ws_offset)
        if need is None:
            return run(args), None  # the query failed: the call reports why
        _store(key, need)
    for _ in range(2):
        ws = None
        if need:
            ws = kind.empty_bytes(like, need)
            WORKSPACE.pack_into(args, ws_offset, kind.ptr(ws), need)
        else:
            WORKSPACE.pack_into(args, ws_offset, sentinel, 0)
        status = run(args)
        if status != WORKSPACE_TOO_SMALL:
            return status, ws
        fresh = _query(size_query, args, ws_offset)
        if fresh is None or fresh <= need:
            return status, ws
        need = fresh
        _store(key, need)
    return status, ws


def _query(size_query, args, ws_offset):
    WORKSPACE.pack_into(args, ws_offset, 0, 0)
    n = ctypes.c_size_t(0)
    if size_query(ctypes.byref(args), ctypes.byref(n)) != _capi.FLASH_OK:
        return None
    return n.value


def _store(key, need):
    if len(_WS_SIZES) >= 4096:
        _WS_SIZES.clear()
    _WS_SIZES[key] = need
