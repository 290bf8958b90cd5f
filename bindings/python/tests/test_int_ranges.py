"""Every integer (and the float scale) that crosses into a C field is range-checked: a value the field cannot hold
is refused with a FlashError naming it, never truncated by ctypes to its low bits (issue 70: window=(2**40, 0) ran
as (0, 0), the diagonal only; (2**32 + 3, 0) as 3; an int64 block index 2**32 + 1 as block 1)."""

import numpy as np
import pytest

import libflash
from libflash import FlashError, capi


def arrays(sq=70, sk=70, hq=2, hkv=1, d=16):
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
    q, k, v = arrays()
    refused(capi.FLASH_ERROR_BAD_MASK, "%s is %d, which does not fit the C field's int32_t" % (field, value),
            libflash.attention, q, k, v, window=window)
    refused(capi.FLASH_ERROR_BAD_MASK, field, libflash.attention_backward, q, k, v, q, q,
            np.zeros((1, 2, 70), np.float32), window=window)


def test_window_non_integer_refused_integral_float_taken():
    q, k, v = arrays()
    refused(capi.FLASH_ERROR_BAD_MASK, "window_left is 1.5, not an integer", libflash.attention, q, k, v,
            window=(1.5, 0))
    np.testing.assert_array_equal(libflash.attention(q, k, v, window=(8.0, 0)), libflash.attention(q, k, v, window=(8, 0)))
    # The largest int32 is a valid (unbounded in effect) window.
    np.testing.assert_array_equal(libflash.attention(q, k, v, window=(2 ** 31 - 1, 0)),
                                  libflash.attention(q, k, v, causal=True))


def test_block_indices_out_of_int32_refused():
    q, k, v = arrays()
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
    q, k, v = arrays()
    dense = np.ones((1, 1, 2, 2), bool)
    refused(capi.FLASH_ERROR_BAD_MASK, "block_size is 4294967360", libflash.attention, q, k, v, block_mask=dense,
            block_size=2 ** 32 + 64)
    refused(capi.FLASH_ERROR_BAD_MASK, "block_size[1] (block_n) is 4294967360", libflash.attention, q, k, v,
            block_mask=dense, block_size=(64, 2 ** 32 + 64))


def test_algorithm_and_alignment_out_of_int32_refused():
    q, k, v = arrays()
    refused(capi.FLASH_ERROR_INVALID_ARGUMENT, "algorithm is 4294967297", libflash.attention, q, k, v,
            algorithm=2 ** 32 + capi.FLASH_ALGO_CPU)
    refused(capi.FLASH_ERROR_INVALID_ARGUMENT, "causal_alignment is 4294967296", libflash.attention, q, k, v,
            causal_alignment=2 ** 32)


def test_device_ids_out_of_int32_refused():
    refused(capi.FLASH_ERROR_INVALID_ARGUMENT, "device_id is 4294967296", libflash.device_info, "cpu", 2 ** 32)
    refused(capi.FLASH_ERROR_INVALID_ARGUMENT, "device_type is 4294967297", libflash.device_count, 2 ** 32 + 1)


def test_softmax_scale_that_float32_cannot_hold_refused():
    q, k, v = arrays()
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
