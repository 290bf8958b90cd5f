"""Error paths: every invalid call raises FlashError with the right FLASH_ERROR_* code, and every integer (and the
float scale) that crosses into a C field is range-checked first (the second half of this file)."""

import pickle

import numpy as np
import pytest

import libflash
from libflash import FlashError, capi


def arrays(b=1, sq=16, sk=16, hq=2, hkv=2, d=32, dtype=np.float32):
    rng = np.random.default_rng(0)
    return (rng.standard_normal((b, sq, hq, d)).astype(dtype), rng.standard_normal((b, sk, hkv, d)).astype(dtype),
            rng.standard_normal((b, sk, hkv, d)).astype(dtype))


def raises(code, fn, *a, **kw):
    with pytest.raises(FlashError) as ei:
        fn(*a, **kw)
    e = ei.value
    assert e.status == code, str(e)
    assert e.status_name == capi.flash_status_string(code).decode()
    assert e.message and e.status_name in str(e)
    return e


def test_dtype_mismatch():
    q, k, v = arrays()
    e = raises(capi.FLASH_ERROR_DTYPE_MISMATCH, libflash.attention, q, k.astype(np.float16), v)
    assert "k.dtype" in e.message
    raises(capi.FLASH_ERROR_DTYPE_MISMATCH, libflash.attention, q, k, v.astype(np.float16))
    raises(capi.FLASH_ERROR_DTYPE_MISMATCH, libflash.attention, q, k, v, out=np.empty(q.shape, np.float16))


def test_unsupported_dtype():
    q, k, v = arrays(dtype=np.float64)
    e = raises(capi.FLASH_ERROR_UNSUPPORTED_DTYPE, libflash.attention, q, k, v)
    assert "float64" in e.message
    q, k, v = arrays()
    raises(capi.FLASH_ERROR_UNSUPPORTED_DTYPE, libflash.attention, q.astype(np.int32), k, v)


@pytest.mark.parametrize("d", [4, 12, 100, 264, 512])
def test_bad_head_dim(d):
    q, k, v = arrays(d=d)
    e = raises(capi.FLASH_ERROR_UNSUPPORTED_HEAD_DIM, libflash.attention, q, k, v)
    assert str(d) in e.message


def test_non_contiguous_last_dim():
    q, k, v = arrays(d=64)
    big = np.repeat(q, 2, axis=-1)
    e = raises(capi.FLASH_ERROR_BAD_STRIDE, libflash.attention, big[..., ::2], k, v)
    assert "contiguous" in e.message
    big_k = np.repeat(k, 2, axis=-1)
    raises(capi.FLASH_ERROR_BAD_STRIDE, libflash.attention, q, big_k[..., ::2], v)
    out = np.empty(q.shape[:-1] + (128,), np.float32)[..., ::2]
    raises(capi.FLASH_ERROR_BAD_STRIDE, libflash.attention, q, k, v, out=out)


def test_byte_order_and_read_only_out():
    q, k, v = arrays()
    raises(capi.FLASH_ERROR_UNSUPPORTED_DTYPE, libflash.attention, q.astype(">f4"), k, v)
    out = np.empty_like(q)
    out.flags.writeable = False
    raises(capi.FLASH_ERROR_INVALID_ARGUMENT, libflash.attention, q, k, v, out=out)


def test_negative_strides():
    q, k, v = arrays()
    raises(capi.FLASH_ERROR_BAD_STRIDE, libflash.attention, q[:, ::-1], k, v)


def test_output_self_overlap():
    q, k, v = arrays()
    base = np.empty((1, 1, 2, 32), np.float32)
    out = np.lib.stride_tricks.as_strided(base, q.shape, (0, 0, 128, 4), writeable=True)  # stride 0 on seqlen
    raises(capi.FLASH_ERROR_BAD_STRIDE, libflash.attention, q, k, v, out=out)


def test_output_overlaps_input():
    q, k, v = arrays()
    raises(capi.FLASH_ERROR_INVALID_ARGUMENT, libflash.attention, q, k, v, out=q)


@pytest.mark.parametrize("case", ["batch", "head_dim", "heads_ratio", "v_seqlen", "v_heads", "out_shape",
                                  "ndim3", "ndim5", "k_ndim3", "empty"])
def test_bad_shapes(case):
    q, k, v = arrays(b=2, hq=4, hkv=2)
    kw = {}
    if case == "batch":
        k = k[:1]
    elif case == "head_dim":
        k = np.ascontiguousarray(np.concatenate([k, k], axis=-1))
    elif case == "heads_ratio":
        q = np.ascontiguousarray(np.concatenate([q, q[:, :, :1]], axis=2))  # 5 heads vs 2
    elif case == "v_seqlen":
        v = v[:, :10]
    elif case == "v_heads":
        v = v[:, :, :1]
    elif case == "out_shape":
        kw["out"] = np.empty((2, 15, 4, 32), np.float32)
    elif case == "ndim3":
        q = q[0]
    elif case == "ndim5":
        q = q[None]
    elif case == "k_ndim3":
        k = k[0]
    elif case == "empty":
        q = q[:, :0]
    raises(capi.FLASH_ERROR_BAD_SHAPE, libflash.attention, q, k, v, **kw)


def test_bad_window_and_alignment():
    q, k, v = arrays()
    raises(capi.FLASH_ERROR_BAD_MASK, libflash.attention, q, k, v, window=(-2, -1))
    raises(capi.FLASH_ERROR_BAD_MASK, libflash.attention, q, k, v, window=(0, -5))
    raises(capi.FLASH_ERROR_INVALID_ARGUMENT, libflash.attention, q, k, v, causal_alignment="middle")
    raises(capi.FLASH_ERROR_INVALID_ARGUMENT, libflash.attention, q, k, v, causal_alignment=7)
    raises(capi.FLASH_ERROR_INVALID_ARGUMENT, libflash.attention, q, k, v, softmax_scale=float("nan"))
    raises(capi.FLASH_ERROR_INVALID_ARGUMENT, libflash.attention, q, k, v, softmax_scale=0.0)


def test_algorithms():
    q, k, v = arrays()
    e = raises(capi.FLASH_ERROR_INVALID_ARGUMENT, libflash.attention, q, k, v, algorithm="fastest")
    assert "fastest" in e.message
    raises(capi.FLASH_ERROR_ALGORITHM_UNAVAILABLE, libflash.attention, q, k, v, algorithm="sm80")
    raises(capi.FLASH_ERROR_INVALID_ARGUMENT, libflash.attention, q, k, v, algorithm=99)


def test_block_mask_errors():
    q, k, v = arrays(sq=200, sk=300)  # 2 query blocks, 3 key blocks of 128
    ok = np.ones((1, 1, 2, 3), bool)
    libflash.attention(q, k, v, block_mask=ok)
    # Wrong number of blocks for the sequence lengths.
    raises(capi.FLASH_ERROR_BAD_MASK, libflash.attention, q, k, v, block_mask=np.ones((1, 1, 3, 3), bool))
    raises(capi.FLASH_ERROR_BAD_MASK, libflash.attention, q, k, v, block_mask=np.ones((1, 1, 2, 4), bool))
    raises(capi.FLASH_ERROR_BAD_MASK, libflash.attention, q, k, v, block_mask=ok, block_size=64)
    raises(capi.FLASH_ERROR_BAD_MASK, libflash.attention, q, k, v, block_mask=np.ones((2, 3), bool), block_size=96)
    # Batch/head extents that neither match nor broadcast.
    raises(capi.FLASH_ERROR_BAD_MASK, libflash.attention, q, k, v, block_mask=np.ones((1, 3, 2, 3), bool))
    # Compact form: an index out of range, a repeated index, a count too large, a wrong dtype.
    counts = np.full((1, 1, 2), 2, np.int32)
    idx = np.array([[[[0, 3, 0], [1, 2, 0]]]], np.int32)
    raises(capi.FLASH_ERROR_BAD_MASK, libflash.attention, q, k, v, block_mask=(counts, idx))
    idx = np.array([[[[0, 0, 0], [1, 2, 0]]]], np.int32)
    raises(capi.FLASH_ERROR_BAD_MASK, libflash.attention, q, k, v, block_mask=(counts, idx))
    idx = np.array([[[[0, 1, 2], [1, 2, 0]]]], np.int32)
    raises(capi.FLASH_ERROR_BAD_MASK, libflash.attention, q, k, v, block_mask=(np.full((1, 1, 2), 4, np.int32), idx))
    raises(capi.FLASH_ERROR_BAD_MASK, libflash.attention, q, k, v, block_mask=(counts.astype(np.float32), idx))
    libflash.attention(q, k, v, block_mask=(counts, idx))


def test_type_errors():
    q, k, v = arrays()
    with pytest.raises(TypeError):
        libflash.attention(q.tolist(), k, v)
    with pytest.raises(TypeError):
        libflash.attention(q, k, v, stream="default")


def test_flash_error_is_picklable():
    e = FlashError(110, "FLASH_ERROR_BAD_SHAPE", "q.shape[1] is 0")
    e2 = pickle.loads(pickle.dumps(e))
    assert (e2.status, e2.status_name, e2.message) == (110, "FLASH_ERROR_BAD_SHAPE", "q.shape[1] is 0")
    assert isinstance(e2, RuntimeError)


def test_error_message_is_per_call():
    q, k, v = arrays()
    with pytest.raises(FlashError):
        libflash.attention(q, k[..., :16], v)
    libflash.attention(q, k, v)  # a later success is unaffected
    e = raises(capi.FLASH_ERROR_UNSUPPORTED_HEAD_DIM, libflash.attention, q[..., :12], k[..., :12], v[..., :12])
    assert "head_dim" in e.message


# ---- Integer ranges (was test_int_ranges.py) ----------------------------------------------------------------------
# Every integer (and the float scale) that crosses into a C field is range-checked: a value the field cannot hold
# is refused with a FlashError naming it, never truncated by ctypes to its low bits (issue 70: window=(2**40, 0) ran
# as (0, 0), the diagonal only; (2**32 + 3, 0) as 3; an int64 block index 2**32 + 1 as block 1).


def int_arrays(sq=70, sk=70, hq=2, hkv=1, d=16):
    rng = np.random.default_rng(7)
    return (rng.standard_normal((1, sq, hq, d)).astype(np.float32),
            rng.standard_normal((1, sk, hkv, d)).astype(np.float32),
            rng.standard_normal((1, sk, hkv, d)).astype(np.float32))


def refused(code, needle, fn, *a, **kw):
    with pytest.raises(FlashError) as ei:
        fn(*a, **kw)
    assert ei.value.status == code, str(ei.value)
    assert needle in ei.value.message, ei.value.message
    return ei.value


@pytest.mark.parametrize("window,field,value", [
    ((2 ** 40, 0), "window_left", 2 ** 40),
    ((2 ** 32 + 3, 0), "window_left", 2 ** 32 + 3),
    ((0, 2 ** 31), "window_right", 2 ** 31),
    ((-2 ** 31 - 2, 0), "window_left", -2 ** 31 - 2),
    ((np.int64(2 ** 33), 0), "window_left", 2 ** 33),
])
def test_window_out_of_int32_refused(window, field, value):
    q, k, v = int_arrays()
    refused(capi.FLASH_ERROR_BAD_MASK, "%s is %d, which does not fit the C field's int32_t" % (field, value),
            libflash.attention, q, k, v, window=window)
    refused(capi.FLASH_ERROR_BAD_MASK, field, libflash.attention_backward, q, k, v, q, q,
            np.zeros((1, 2, 70), np.float32), window=window)


def test_window_non_integer_refused_integral_float_taken():
    q, k, v = int_arrays()
    refused(capi.FLASH_ERROR_BAD_MASK, "window_left is 1.5, not an integer", libflash.attention, q, k, v,
            window=(1.5, 0))
    np.testing.assert_array_equal(libflash.attention(q, k, v, window=(8.0, 0)), libflash.attention(q, k, v, window=(8, 0)))
    # The largest int32 is a valid (unbounded in effect) window.
    np.testing.assert_array_equal(libflash.attention(q, k, v, window=(2 ** 31 - 1, 0)),
                                  libflash.attention(q, k, v, causal=True))


def test_block_indices_out_of_int32_refused():
    q, k, v = int_arrays()
    num = np.array([[[1, 1]]], np.int64)
    idx = np.array([[[[2 ** 32 + 1], [0]]]], np.int64)
    refused(capi.FLASH_ERROR_BAD_MASK, "block_mask kv_indices holds 4294967297", libflash.attention, q, k, v,
            block_mask=(num, idx), block_size=64)
    refused(capi.FLASH_ERROR_BAD_MASK, "block_mask kv_num_blocks holds -4294967295", libflash.attention, q, k, v,
            block_mask=(num - 2 ** 32, idx - 2 ** 32), block_size=64)
    # In range, int64 arrays are taken (converted to int32).
    good = np.array([[[[1], [0]]]], np.int64)
    ok = libflash.attention(q, k, v, block_mask=(num, good), block_size=64)
    ref = libflash.attention(q, k, v, block_mask=(num.astype(np.int32), good.astype(np.int32)), block_size=64)
    np.testing.assert_array_equal(ok, ref)


def test_block_size_out_of_int32_refused():
    q, k, v = int_arrays()
    dense = np.ones((1, 1, 2, 2), bool)
    refused(capi.FLASH_ERROR_BAD_MASK, "block_size is 4294967360", libflash.attention, q, k, v, block_mask=dense,
            block_size=2 ** 32 + 64)
    refused(capi.FLASH_ERROR_BAD_MASK, "block_size[1] (block_n) is 4294967360", libflash.attention, q, k, v,
            block_mask=dense, block_size=(64, 2 ** 32 + 64))


def test_algorithm_and_alignment_out_of_int32_refused():
    q, k, v = int_arrays()
    refused(capi.FLASH_ERROR_INVALID_ARGUMENT, "algorithm is 4294967297", libflash.attention, q, k, v,
            algorithm=2 ** 32 + capi.FLASH_ALGO_CPU)
    refused(capi.FLASH_ERROR_INVALID_ARGUMENT, "causal_alignment is 4294967296", libflash.attention, q, k, v,
            causal_alignment=2 ** 32)


def test_device_ids_out_of_int32_refused():
    refused(capi.FLASH_ERROR_INVALID_ARGUMENT, "device_id is 4294967296", libflash.device_info, "cpu", 2 ** 32)
    refused(capi.FLASH_ERROR_INVALID_ARGUMENT, "device_type is 4294967297", libflash.device_count, 2 ** 32 + 1)


def test_softmax_scale_that_float32_cannot_hold_refused():
    q, k, v = int_arrays()
    # ctypes would store inf (then "not finite") and 0.0 (then the default 1/sqrt(d), silently).
    refused(capi.FLASH_ERROR_INVALID_ARGUMENT, "softmax_scale is 1e+300, beyond float32's range", libflash.attention,
            q, k, v, softmax_scale=1e300)
    refused(capi.FLASH_ERROR_INVALID_ARGUMENT, "softmax_scale is 1e-50, which rounds to 0 in float32",
            libflash.attention, q, k, v, softmax_scale=1e-50)
    # Inside float32 but past the library's documented range: the library's own message.
    refused(capi.FLASH_ERROR_INVALID_ARGUMENT, "|softmax_scale| must be at most 65536", libflash.attention, q, k, v,
            softmax_scale=3e38)
    o = libflash.attention(q, k, v, softmax_scale=-65536.0)
    assert np.isfinite(o).all()


# ---- Packed variable-length batches: refusals --------------------------------------------------------------------
def varlen_arrays(lens_q=(3, 0, 5), lens_k=(4, 2, 6), hq=2, hkv=1, d=16):
    rng = np.random.default_rng(72)
    cu_q = np.concatenate([[0], np.cumsum(lens_q)]).astype(np.int32)
    cu_k = np.concatenate([[0], np.cumsum(lens_k)]).astype(np.int32)
    return (rng.standard_normal((int(cu_q[-1]), hq, d)).astype(np.float32),
            rng.standard_normal((int(cu_k[-1]), hkv, d)).astype(np.float32),
            rng.standard_normal((int(cu_k[-1]), hkv, d)).astype(np.float32), cu_q, cu_k)


def both_directions(code, needle, q, k, v, **kw):
    """The forward and the backward refuse the same keywords alike; returns the forward's error."""
    e = refused(code, needle, libflash.attention, q, k, v, **kw)
    o = np.zeros_like(q)
    lse = np.zeros((q.shape[1], q.shape[0]) if q.ndim == 3 else (q.shape[0], q.shape[2], q.shape[1]), np.float32)
    refused(code, needle, libflash.attention_backward, q, k, v, o, o, lse, **kw)
    return e


@pytest.mark.parametrize("bad_q,bad_k,used,max_q,max_k,needle", [
    ([1, 3, 3, 8], None, None, None, None, "cu_seqlens_q[0] is 1 but must be 0"),
    ([0, 3, 2, 8], None, None, None, None, "cu_seqlens_q[2] is 2, less than cu_seqlens_q[1] = 3: the offsets must not "
                                           "decrease"),
    ([0, 3, 3, 9], None, None, None, None, "cu_seqlens_q[3] is 9 but q has 8 rows (q.shape[0])"),
    (None, [0, 4, 6, 13], None, None, None, "cu_seqlens_k[3] is 13 but k has 12 rows (k.shape[0])"),
    (None, [0, 4, 7, 6], None, None, None, "cu_seqlens_k[3] is 6, less than cu_seqlens_k[2] = 7"),
    (None, None, [4, 3, 1], None, None, "seqused_k[1] is 3 but sequence 1's slot holds 2 keys (cu_seqlens_k[2] - "
                                        "cu_seqlens_k[1]): must be in [0, 2]"),
    (None, None, [-1, 0, 0], None, None, "seqused_k[0] is -1 but sequence 0's slot holds 4 keys"),
    (None, None, None, 4, None, "max_seqlen_q is 4 but a sequence has 5 queries (cu_seqlens_q)"),
    (None, None, None, None, 5, "max_seqlen_k is 5 but a sequence has 6 keys (cu_seqlens_k)"),
    (None, None, [4, 2, 1], None, 3, "max_seqlen_k is 3 but a sequence has 4 keys (seqused_k)"),
])
def test_varlen_bad_offsets_refused_with_the_librarys_message(bad_q, bad_k, used, max_q, max_k, needle):
    """Host offsets are checked by the library before anything is written (a CPU call). For a GPU call the binding
    checks host data itself before copying it to the device, with the same rules and messages: both are checked."""
    from libflash import _attention

    q, k, v, cu_q, cu_k = varlen_arrays()
    kw = dict(cu_seqlens_q=cu_q if bad_q is None else np.array(bad_q, np.int32),
              cu_seqlens_k=cu_k if bad_k is None else np.array(bad_k, np.int32),
              seqused_k=None if used is None else np.array(used, np.int32), max_seqlen_q=max_q, max_seqlen_k=max_k)
    out = np.full_like(q, 7.0)
    e = refused(capi.FLASH_ERROR_INVALID_ARGUMENT, needle, libflash.attention, q, k, v, out=out, **kw)
    assert np.all(out == 7.0), "a refused call wrote its output"
    o = np.zeros_like(q)
    refused(capi.FLASH_ERROR_INVALID_ARGUMENT, needle, libflash.attention_backward, q, k, v, o, o,
            np.zeros((2, 8), np.float32), **kw)
    # The binding's own check (what a GPU call with host offsets runs) says exactly what the library says.
    desc = _attention.describe(q, "q")
    r = _attention._varlen_prepare(_attention._varlen_opts(**kw), desc, None)
    with pytest.raises(FlashError) as ei:
        _attention._check_varlen_host(r, q.shape[0], k.shape[0])
    assert (ei.value.status, ei.value.message) == (e.status, e.message)


def test_varlen_offsets_arrays_refused_by_the_binding():
    q, k, v, cu_q, cu_k = varlen_arrays()
    for code, needle, kw in [
        (capi.FLASH_ERROR_NULL_POINTER, "cu_seqlens_q is given but cu_seqlens_k is None: a packed variable-length "
         "batch needs both", dict(cu_seqlens_q=cu_q)),
        (capi.FLASH_ERROR_NULL_POINTER, "cu_seqlens_k is given but cu_seqlens_q is None", dict(cu_seqlens_k=cu_k)),
        (capi.FLASH_ERROR_INVALID_ARGUMENT, "max_seqlen_q and seqused_k given without cu_seqlens_q and cu_seqlens_k",
         dict(max_seqlen_q=3, seqused_k=[1, 2, 3])),
        (capi.FLASH_ERROR_BAD_SHAPE, "cu_seqlens_k has 3 entries but cu_seqlens_q has 4 (each holds batch + 1 "
         "offsets)", dict(cu_seqlens_q=cu_q, cu_seqlens_k=cu_k[:3])),
        (capi.FLASH_ERROR_BAD_SHAPE, "cu_seqlens_q has 1 entries but must hold batch + 1 >= 2 offsets",
         dict(cu_seqlens_q=[0], cu_seqlens_k=[0])),
        (capi.FLASH_ERROR_BAD_SHAPE, "cu_seqlens_q has shape (2, 2) but must be 1-d",
         dict(cu_seqlens_q=[[0, 3], [3, 8]], cu_seqlens_k=cu_k)),
        (capi.FLASH_ERROR_BAD_SHAPE, "seqused_k has 2 entries but must have one per sequence, 3",
         dict(cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, seqused_k=[1, 1])),
        (capi.FLASH_ERROR_UNSUPPORTED_DTYPE, "cu_seqlens_q has dtype float64",
         dict(cu_seqlens_q=cu_q.astype(np.float64), cu_seqlens_k=cu_k)),
        (capi.FLASH_ERROR_UNSUPPORTED_DTYPE, "seqused_k has dtype bool",
         dict(cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, seqused_k=np.ones(3, bool))),
        (capi.FLASH_ERROR_UNSUPPORTED, "block_mask is given with cu_seqlens_q: block-sparse masks are not supported",
         dict(cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, block_mask=np.ones((1, 1, 1, 1), bool))),
    ]:
        both_directions(code, needle, q, k, v, **kw)


def test_varlen_integers_out_of_int32_refused():
    """Every integer is range-checked before it reaches a C field (issue 70's rule): offsets, seqused_k, max_seqlen."""
    q, k, v, cu_q, cu_k = varlen_arrays()
    big = cu_q.astype(np.int64)
    big[1] += 2 ** 32  # 2**32 + 3 would wrap to 3, a valid offset
    both_directions(capi.FLASH_ERROR_INVALID_ARGUMENT, "cu_seqlens_q holds 4294967299, which does not fit int32", q, k,
                    v, cu_seqlens_q=big, cu_seqlens_k=cu_k)
    both_directions(capi.FLASH_ERROR_INVALID_ARGUMENT, "seqused_k holds -4294967295, which does not fit int32", q, k, v,
                    cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, seqused_k=[1 - 2 ** 32, 0, 0])
    both_directions(capi.FLASH_ERROR_INVALID_ARGUMENT, "max_seqlen_q is 4294967301, which does not fit the C field's "
                    "int32_t", q, k, v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=2 ** 32 + 5)
    both_directions(capi.FLASH_ERROR_INVALID_ARGUMENT, "max_seqlen_k is 1.5, not an integer", q, k, v,
                    cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_k=1.5)
    both_directions(capi.FLASH_ERROR_INVALID_ARGUMENT, "max_seqlen_q is -1 but must be >= 0", q, k, v,
                    cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=-1)
    # In range, any integer dtype is taken.
    o = libflash.attention(q, k, v, cu_seqlens_q=cu_q.astype(np.int64), cu_seqlens_k=cu_k.astype(np.uint8),
                           max_seqlen_q=np.int16(5), max_seqlen_k=6.0)
    np.testing.assert_array_equal(o, libflash.attention(q, k, v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k))


def test_varlen_shapes_refused():
    q, k, v, cu_q, cu_k = varlen_arrays()
    vk = dict(cu_seqlens_q=cu_q, cu_seqlens_k=cu_k)
    # Dense 4-d arrays with offsets: the library names the tensor.
    both_directions(capi.FLASH_ERROR_BAD_SHAPE, "q", q[None], k[None], v[None], **vk)
    e = refused(capi.FLASH_ERROR_BAD_SHAPE, "", libflash.attention, q, k[:, :, :8], v, **vk)
    assert "k.shape[2]" in e.message
    o, lse = libflash.attention(q, k, v, return_lse=True, **vk)
    refused(capi.FLASH_ERROR_BAD_SHAPE, "lse", libflash.attention_backward, q, k, v, o, o, lse.T.copy(), **vk)
    refused(capi.FLASH_ERROR_BAD_SHAPE, "lse", libflash.attention_backward, q, k, v, o, o, lse[None], **vk)
