"""The ctypes layer: struct layouts, constants and declarations against the loaded library."""

import ctypes
import os
import subprocess
import sys

import numpy as np
import pytest

import libflash
from libflash import capi

PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize("which", sorted(capi.STRUCTS))
def test_struct_sizes_match_library(which):
    cls, _ = capi.STRUCTS[which]
    # The binding's layout is the library's (same minor), or a prefix of a newer library's: a struct may grow by
    # appending fields (flash.h's rules; 1.3 appended the varlen fields to flash_fwd_args and flash_bwd_args).
    minor = capi.flash_version_minor()
    if minor == capi.FLASH_VERSION_MINOR:
        assert ctypes.sizeof(cls) == capi.flash_struct_size(which), cls.__name__
    else:
        assert capi.struct_size_for_minor(which, minor) <= capi.flash_struct_size(which), cls.__name__
    assert capi.flash_struct_size(99) == 0


def test_struct_sizes_of_older_libraries():
    """A library older than 1.3 knows flash_fwd_args / flash_bwd_args without the varlen fields: the binding hands its
    init functions that prefix's size (and refuses varlen calls), so it still loads and runs."""
    if ctypes.sizeof(ctypes.c_void_p) != 8:
        pytest.skip("sizes written for LP64")
    F, B = capi.FLASH_STRUCT_FWD_ARGS, capi.FLASH_STRUCT_BWD_ARGS
    assert [capi.struct_size_for_minor(F, m) for m in (0, 1, 2, 3, 4)] == [512, 512, 512, 552, 552]
    assert [capi.struct_size_for_minor(B, m) for m in (1, 2, 3)] == [864, 864, 904]
    assert capi.struct_size_for_minor(capi.FLASH_STRUCT_KVCACHE_ARGS, 2) == 720
    # The prefix ends exactly where the 1.3 fields begin, and every field before it keeps its offset.
    assert capi.flash_fwd_args.cu_seqlens_q.offset == 512 and capi.flash_bwd_args.cu_seqlens_q.offset == 864


def test_struct_offsets_lp64():
    """Offsets by hand from flash.h's field order (LP64: 8-byte pointers/size_t)."""
    if ctypes.sizeof(ctypes.c_void_p) != 8:
        pytest.skip("offsets written for LP64")
    T = capi.flash_tensor
    assert (T.data.offset, T.dtype.offset, T.ndim.offset, T.shape.offset, T.strides.offset) == (0, 8, 20, 24, 56)
    assert ctypes.sizeof(T) == 88
    A = capi.flash_fwd_args
    assert A.q.offset == 8 and A.lse.offset == 8 + 4 * 88 and A.softmax_scale.offset == 8 + 5 * 88
    assert A.algorithm_used.offset == A.softmax_scale.offset + 28
    assert A.block_mask.offset == 480 and A.workspace_size.offset == 504
    assert (A.cu_seqlens_q.offset, A.cu_seqlens_k.offset, A.max_seqlen_q.offset) == (512, 520, 528)
    assert A.max_seqlen_k.offset == 532
    assert (A.seqused_k.offset, A.varlen_batch.offset, A.reserved_1_3.offset, ctypes.sizeof(A)) == (536, 544, 548, 552)
    M = capi.flash_block_mask
    assert (M.kv_num_blocks.offset, M.kv_indices_strides.offset, ctypes.sizeof(M)) == (24, 64, 96)
    B = capi.flash_bwd_args
    assert B.q.offset == 8 and B.d_o.offset == 8 + 4 * 88 and B.dv.offset == 8 + 8 * 88
    assert B.softmax_scale.offset == 8 + 9 * 88 and B.algorithm_used.offset == B.softmax_scale.offset + 28
    assert B.block_mask.offset == 832 and B.workspace_size.offset == 856
    assert (B.cu_seqlens_q.offset, B.max_seqlen_q.offset, B.seqused_k.offset, B.varlen_batch.offset) == (864, 880,
                                                                                                         888, 896)
    assert (B.reserved_1_3.offset, ctypes.sizeof(B)) == (900, 904)
    D = capi.flash_device_info
    assert D.name.offset == 16 and D.cc_major.offset == 272 and D.algorithms.offset == 328
    K = capi.flash_kvcache_args
    assert K.q.offset == 8 and K.v_new.offset == 8 + 4 * 88 and K.lse.offset == 8 + 6 * 88
    assert (K.cache_seqlens.offset, K.cache_batch_idx.offset, K.block_table.offset) == (624, 632, 640)
    assert (K.block_table_stride.offset, K.max_pages_per_seq.offset, K.softmax_scale.offset) == (648, 656, 660)
    assert (K.num_splits.offset, K.algorithm_used.offset, K.num_splits_used.offset) == (676, 688, 692)
    assert (K.stream.offset, K.workspace_size.offset, ctypes.sizeof(K)) == (696, 712, 720)
    C = capi.flash_combine_args
    assert (C.num_parts.offset, C.o_parts.offset, C.lse_parts.offset, C.o.offset) == (8, 16, 24, 32)
    assert (C.lse.offset, C.stream.offset, ctypes.sizeof(C)) == (120, 208, 216)


def test_init_functions_write_defaults():
    a = capi.flash_fwd_args()
    assert capi.flash_fwd_args_init(ctypes.byref(a)) == capi.FLASH_OK
    minor = capi.flash_version_minor()  # (a library older than 1.3 is handed its own, smaller, struct_size)
    assert a.struct_size == capi.struct_size_for_minor(capi.FLASH_STRUCT_FWD_ARGS, minor)
    assert (a.window_left, a.window_right, a.causal_alignment, a.algorithm) == (-1, -1, capi.FLASH_ALIGN_BOTTOM_RIGHT, 0)
    assert not a.cu_seqlens_q and not a.cu_seqlens_k and (a.max_seqlen_k, a.varlen_batch) == (0, 0)
    m = capi.flash_block_mask()
    assert capi.flash_block_mask_init(ctypes.byref(m)) == capi.FLASH_OK
    assert (m.struct_size, m.block_m, m.block_n) == (ctypes.sizeof(m), 128, 128)
    b = capi.flash_bwd_args()
    b.flags = 7
    assert capi.flash_bwd_args_init(ctypes.byref(b)) == capi.FLASH_OK
    assert b.struct_size == capi.struct_size_for_minor(capi.FLASH_STRUCT_BWD_ARGS, minor)
    assert (b.window_left, b.window_right, b.causal_alignment, b.algorithm, b.flags) == (-1, -1, 0, 0, 0)
    assert not b.block_mask and b.stream is None
    assert not b.cu_seqlens_q and not b.seqused_k and (b.max_seqlen_q, b.varlen_batch, b.reserved_1_3) == (0, 0, 0)
    info = capi.flash_device_info()
    assert capi.flash_device_info_init(ctypes.byref(info)) == capi.FLASH_OK
    assert info.struct_size == ctypes.sizeof(info)
    kv = capi.flash_kvcache_args()
    kv.num_splits, kv.flags = 9, 7
    assert capi.flash_kvcache_args_init(ctypes.byref(kv)) == capi.FLASH_OK
    assert kv.struct_size == ctypes.sizeof(kv)
    assert (kv.window_left, kv.window_right, kv.num_splits, kv.flags) == (-1, -1, 0, 0)
    assert kv.algorithm == capi.FLASH_ALGO_AUTO
    assert (kv.algorithm_used, kv.softmax_scale, kv.block_table_stride, kv.max_pages_per_seq) == (-1, 0.0, 0, 0)
    assert not kv.cache_seqlens and not kv.block_table and kv.workspace is None
    c = capi.flash_combine_args()
    c.num_parts = 5
    assert capi.flash_combine_args_init(ctypes.byref(c)) == capi.FLASH_OK
    assert c.struct_size == ctypes.sizeof(c) and c.num_parts == 0 and not c.o_parts


def test_tensor_contiguous_by_value():
    shape = (ctypes.c_int64 * 4)(2, 3, 4, 5)
    t = capi.flash_tensor_contiguous(ctypes.c_void_p(0x1000), capi.FLASH_DTYPE_FP16, capi.FLASH_DEVICE_CPU, 0, 4, shape)
    assert t.data == 0x1000 and t.dtype == capi.FLASH_DTYPE_FP16 and t.ndim == 4
    assert list(t.shape) == [2, 3, 4, 5] and list(t.strides) == [60, 20, 5, 1]


def test_status_and_algorithm_names_match_constants():
    for name in dir(capi):
        if name == "FLASH_OK" or name.startswith("FLASH_ERROR_"):
            assert capi.flash_status_string(getattr(capi, name)).decode() == name
    assert capi.flash_status_string(12345).decode() == "FLASH_ERROR_UNKNOWN_STATUS"
    for name in ("AUTO", "CPU", "NAIVE", "SM80", "SM90"):
        code = getattr(capi, "FLASH_ALGO_" + name)
        assert capi.flash_algorithm_name(code).decode() == name.lower()
        assert capi.flash_algorithm_from_name(name.lower().encode()) == code
    assert capi.flash_algorithm_name(capi.FLASH_ALGO_COUNT) is None
    assert capi.flash_algorithm_from_name(b"nope") == -1


def test_version():
    assert capi.flash_version_major() == capi.FLASH_VERSION_MAJOR
    n = capi.flash_version_number()
    assert n == capi.flash_version_major() * 10000 + capi.flash_version_minor() * 100 + capi.flash_version_patch()
    assert libflash.version() == "%d.%d.%d" % libflash.version_info()


def test_workspace_size_query():
    q = np.zeros((1, 16, 2, 32), np.float32)
    o = np.zeros_like(q)
    a = capi.flash_fwd_args()
    capi.flash_fwd_args_init(ctypes.byref(a))
    shape = (ctypes.c_int64 * 4)(*q.shape)
    for name, arr in (("q", q), ("k", q), ("v", q), ("o", o)):
        setattr(a, name, capi.flash_tensor_contiguous(arr.ctypes.data, capi.FLASH_DTYPE_FP32, capi.FLASH_DEVICE_CPU,
                                                      0, 4, shape))
    n = ctypes.c_size_t(12345)
    assert capi.flash_fwd_workspace_size(ctypes.byref(a), ctypes.byref(n)) == capi.FLASH_OK
    assert capi.flash_fwd(ctypes.byref(a)) == capi.FLASH_OK
    assert a.algorithm_used == capi.FLASH_ALGO_CPU


def test_bwd_workspace_size_query_and_call():
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, 16, 2, 32)).astype(np.float32)
    o, lse = libflash.attention(q, q, q, return_lse=True)
    do = np.ones_like(q)
    grads = [np.full_like(q, np.nan) for _ in range(3)]
    a = capi.flash_bwd_args()
    capi.flash_bwd_args_init(ctypes.byref(a))
    shape = (ctypes.c_int64 * 4)(*q.shape)
    for name, arr in (("q", q), ("k", q), ("v", q), ("o", o), ("d_o", do), ("dq", grads[0]), ("dk", grads[1]),
                      ("dv", grads[2])):
        setattr(a, name, capi.flash_tensor_contiguous(arr.ctypes.data, capi.FLASH_DTYPE_FP32, capi.FLASH_DEVICE_CPU,
                                                      0, 4, shape))
    lse_shape = (ctypes.c_int64 * 3)(*lse.shape)
    a.lse = capi.flash_tensor_contiguous(lse.ctypes.data, capi.FLASH_DTYPE_FP32, capi.FLASH_DEVICE_CPU, 0, 3, lse_shape)
    n = ctypes.c_size_t(12345)
    assert capi.flash_bwd_workspace_size(ctypes.byref(a), ctypes.byref(n)) == capi.FLASH_OK
    assert capi.flash_bwd(ctypes.byref(a)) == capi.FLASH_OK
    assert a.algorithm_used == capi.FLASH_ALGO_CPU
    assert all(np.all(np.isfinite(g)) for g in grads)
    assert capi.flash_bwd(None) == capi.FLASH_ERROR_NULL_POINTER
    # A struct_size smaller than the first flash_bwd_args is refused.
    a.struct_size = 8
    assert capi.flash_bwd(ctypes.byref(a)) == capi.FLASH_ERROR_STRUCT_SIZE


def test_kvcache_and_combine_through_the_raw_layer():
    """flash_fwd_kvcache and flash_combine called through ctypes alone: contiguous descriptors, an int32 array."""
    rng = np.random.default_rng(1)
    q = rng.standard_normal((1, 2, 2, 16)).astype(np.float32)
    kc = rng.standard_normal((1, 9, 1, 16)).astype(np.float32)
    vc = rng.standard_normal((1, 9, 1, 16)).astype(np.float32)
    o = np.full_like(q, np.nan)
    lse = np.full((1, 2, 2), np.nan, np.float32)
    seqlens = np.array([7], np.int32)
    a = capi.flash_kvcache_args()
    capi.flash_kvcache_args_init(ctypes.byref(a))

    def t(arr):
        shape = (ctypes.c_int64 * 4)(*arr.shape)
        return capi.flash_tensor_contiguous(arr.ctypes.data, capi.FLASH_DTYPE_FP32, capi.FLASH_DEVICE_CPU, 0,
                                            arr.ndim, shape)

    a.q, a.k_cache, a.v_cache, a.o, a.lse = t(q), t(kc), t(vc), t(o), t(lse)
    a.cache_seqlens = seqlens.ctypes.data
    a.num_splits = 2
    n = ctypes.c_size_t(12345)
    assert capi.flash_fwd_kvcache_workspace_size(ctypes.byref(a), ctypes.byref(n)) == capi.FLASH_OK
    assert n.value > 0
    assert capi.flash_fwd_kvcache(ctypes.byref(a)) == capi.FLASH_OK
    assert (a.algorithm_used, a.num_splits_used) == (capi.FLASH_ALGO_CPU, 2)
    want = libflash.attention(q, kc[:, :7], vc[:, :7])
    np.testing.assert_allclose(o, want, atol=2e-5, rtol=0)  # test_cpu.py's fp32 bound for flash_fwd's result
    assert capi.flash_fwd_kvcache(None) == capi.FLASH_ERROR_NULL_POINTER
    a.cache_seqlens = None
    assert capi.flash_fwd_kvcache(ctypes.byref(a)) == capi.FLASH_ERROR_NULL_POINTER
    assert capi.flash_last_error_message() == b"cache_seqlens is NULL"
    a.struct_size = 8
    assert capi.flash_fwd_kvcache(ctypes.byref(a)) == capi.FLASH_ERROR_STRUCT_SIZE

    c = capi.flash_combine_args()
    capi.flash_combine_args_init(ctypes.byref(c))
    parts = (capi.flash_tensor * 1)(t(o))
    lparts = (capi.flash_tensor * 1)(t(lse))
    out = np.full_like(o, np.nan)
    c.num_parts, c.o_parts, c.lse_parts, c.o = 1, parts, lparts, t(out)
    assert capi.flash_combine(ctypes.byref(c)) == capi.FLASH_OK
    np.testing.assert_array_equal(out, o)  # one part: O_p w / w, exact in double, rounded back
    assert capi.flash_combine(None) == capi.FLASH_ERROR_NULL_POINTER


def test_device_count_without_driver_is_not_an_error():
    assert libflash.device_count("cpu") == 1
    assert libflash.device_count("cuda") >= 0


def _import_in_subprocess(env_path):
    env = dict(os.environ)
    env["LIBFLASH_PATH"] = env_path
    env["PYTHONPATH"] = PKG_DIR
    return subprocess.run([sys.executable, "-c", "import libflash; print(libflash.library_path())"], env=env,
                          capture_output=True, text=True)


def test_library_search_errors_name_what_was_tried():
    r = _import_in_subprocess("/nonexistent/libflash.so")
    assert r.returncode != 0
    assert "ImportError" in r.stderr and "/nonexistent/libflash.so" in r.stderr and "no such file" in r.stderr


def test_library_path_may_be_a_directory():
    d = os.path.dirname(libflash.library_path())
    r = _import_in_subprocess(d)
    assert r.returncode == 0, r.stderr
    assert os.path.dirname(r.stdout.strip()) == d
