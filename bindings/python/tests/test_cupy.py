"""CuPy (and Numba) inputs through __cuda_array_interface__: results against the numpy float64 reference,
the result kind, strides, block masks and non-default streams. Skipped without CuPy or a CUDA device."""

import numpy as np
import pytest

cupy = pytest.importorskip("cupy")

import libflash  # noqa: E402
from libflash import FlashError, capi  # noqa: E402
from reference import attention_ref  # noqa: E402


def _cuda_ok():
    try:
        return cupy.cuda.runtime.getDeviceCount() > 0 and libflash.device_count("cuda") > 0
    except Exception:
        return False


pytestmark = pytest.mark.skipif(not _cuda_ok(), reason="no CUDA device for CuPy, or a CPU-only libflash")
ATOL = 5e-3


def rand(rng, shape):
    return cupy.asarray(rng.standard_normal(shape).astype(np.float16))


def check(o, lse, q, k, v, **mask):
    assert isinstance(o, cupy.ndarray) and o.dtype == q.dtype and o.shape == q.shape
    assert o.device.id == q.device.id
    ro, rlse = attention_ref(cupy.asnumpy(q), cupy.asnumpy(k), cupy.asnumpy(v), **mask)
    oh = cupy.asnumpy(o).astype(np.float64)
    assert np.isfinite(oh).all()
    np.testing.assert_allclose(oh, ro, atol=ATOL, rtol=ATOL)
    if lse is not None:
        lh = cupy.asnumpy(lse)
        assert lh.dtype == np.float32
        empty = np.isneginf(rlse)
        assert np.array_equal(np.isneginf(lh), empty)
        np.testing.assert_allclose(lh[~empty], rlse[~empty], atol=2e-3, rtol=1e-4)


@pytest.mark.parametrize("seed", range(6))
def test_random(seed):
    rng = np.random.default_rng(seed)
    b, sq, sk = int(rng.integers(1, 3)), int(rng.integers(1, 400)), int(rng.integers(1, 400))
    hkv = int(rng.choice([1, 2]))
    hq = hkv * int(rng.choice([1, 3]))
    d = int(rng.choice([64, 128, 40]))
    q, k, v = rand(rng, (b, sq, hq, d)), rand(rng, (b, sk, hkv, d)), rand(rng, (b, sk, hkv, d))
    causal = bool(seed % 2)
    alignment = "top_left" if seed % 3 == 0 else "bottom_right"
    o, lse = libflash.attention(q, k, v, causal=causal, causal_alignment=alignment, return_lse=True)
    cupy.cuda.get_current_stream().synchronize()
    check(o, lse, q, k, v, causal=causal, alignment=alignment)


def test_strided_views_and_out():
    rng = np.random.default_rng(20)
    qkv = rand(rng, (2, 200, 3, 4, 64))
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    out = cupy.full((2, 4, 200, 64), cupy.nan, dtype=cupy.float16).transpose(0, 2, 1, 3)
    r = libflash.attention(q, k, v, window=(50, 10), out=out)
    assert r is out
    check(out, None, q, k, v, window=(50, 10))


def test_block_masks():
    rng = np.random.default_rng(21)
    q, k, v = rand(rng, (1, 300, 2, 64)), rand(rng, (1, 260, 2, 64)), rand(rng, (1, 260, 2, 64))
    dense = rng.random((1, 2, 5, 5)) < 0.5  # block 64
    o = libflash.attention(q, k, v, block_mask=cupy.asarray(dense))
    check(o, None, q, k, v, block_map=dense, block=(64, 64))
    counts = dense.sum(-1).astype(np.int32)
    idx = np.argsort(~dense, axis=-1, kind="stable").astype(np.int32)
    o = libflash.attention(q, k, v, block_mask=(cupy.asarray(counts), cupy.asarray(idx), 64), causal=True)
    check(o, None, q, k, v, block_map=dense, block=(64, 64), causal=True)


_spin = None


def _sleep_on(stream, cycles=200_000_000):
    global _spin
    if _spin is None:
        _spin = cupy.RawKernel(r'''
        extern "C" __global__ void spin(long long cycles) {
          long long start = clock64();
          while (clock64() - start < cycles) {}
        }''', "spin")
    with stream:
        _spin((1,), (1,), (np.int64(cycles),))


@pytest.mark.parametrize("how", ["object", "int", "current"])
def test_non_default_stream(how):
    rng = np.random.default_rng(22)
    q, k, v = rand(rng, (2, 512, 4, 64)), rand(rng, (2, 512, 4, 64)), rand(rng, (2, 512, 4, 64))
    s = cupy.cuda.Stream(non_blocking=True)
    q_late = cupy.full_like(q, cupy.nan)
    cupy.cuda.Device().synchronize()
    _sleep_on(s)
    with s:
        q_late[...] = q  # written only after the spin; NaN until then
    if how == "current":
        with s:
            o, lse = libflash.attention(q_late, k, v, causal=True, return_lse=True)
    else:
        o, lse = libflash.attention(q_late, k, v, causal=True, return_lse=True, stream=s if how == "object" else s.ptr)
    s.synchronize()
    check(o, lse, q, k, v, causal=True)


def test_errors():
    q = cupy.zeros((1, 64, 2, 64), cupy.float32)
    with pytest.raises(FlashError) as e:
        libflash.attention(q, q.copy(), q.copy())
    assert e.value.status == capi.FLASH_ERROR_UNSUPPORTED_DTYPE
    h = q.astype(cupy.float16)
    with pytest.raises(FlashError) as e:
        libflash.attention(h, cupy.asnumpy(h), h.copy())
    assert e.value.status == capi.FLASH_ERROR_DEVICE_MISMATCH
    with pytest.raises(FlashError) as e:
        libflash.attention(cupy.zeros((1, 64, 2, 128), cupy.float16)[..., ::2], h.copy(), h.copy())
    assert e.value.status == capi.FLASH_ERROR_BAD_STRIDE


def test_numba_arrays():
    numba_cuda = pytest.importorskip("numba.cuda")
    rng = np.random.default_rng(23)
    qh, kh, vh = (rng.standard_normal((1, 100, 2, 64)).astype(np.float16) for _ in range(3))
    q, k, v = numba_cuda.to_device(qh), numba_cuda.to_device(kh), numba_cuda.to_device(vh)
    o = libflash.attention(q, k, v, causal=True)
    assert type(o).__module__.startswith("numba")
    numba_cuda.synchronize()
    ro, _ = attention_ref(qh, kh, vh, causal=True)
    np.testing.assert_allclose(o.copy_to_host().astype(np.float64), ro, atol=ATOL, rtol=ATOL)


# ---- attention_with_kvcache / combine (ABI 1.2). Until the GPU kernels exist the library refuses CUDA arrays with
# FLASH_ERROR_ALGORITHM_UNAVAILABLE after validating them; these tests accept that refusal in place of a result.
def _kv_call(fn, *a, **kw):
    try:
        return fn(*a, **kw)
    except FlashError as e:
        if e.status == capi.FLASH_ERROR_ALGORITHM_UNAVAILABLE:
            return None
        raise


@pytest.mark.parametrize("paged", [False, True])
def test_kvcache(paged):
    from test_kvcache import float32_scale, kvcache_ref, make_case, max_err, rd

    rng = np.random.default_rng(30 + paged)
    case = make_case(rng, b=2, sn=3, hq=4, hkv=2, d=64, dtype="float16", lengths=[100, 7], append=True,
                     page_size=16 if paged else None)
    g = {n: (None if case[n] is None else cupy.asarray(case[n])) for n in
         ("q", "k_cache", "v_cache", "k", "v", "cache_seqlens", "block_table")}
    k0, v0 = g["k_cache"].copy(), g["v_cache"].copy()
    r = _kv_call(libflash.attention_with_kvcache, g["q"], g["k_cache"], g["v_cache"], k=g["k"], v=g["v"],
                 cache_seqlens=g["cache_seqlens"], block_table=g["block_table"], causal=True, return_lse=True)
    if r is None:  # refused before anything was written
        assert (k0.view(cupy.uint16) == g["k_cache"].view(cupy.uint16)).all()
        assert (v0.view(cupy.uint16) == g["v_cache"].view(cupy.uint16)).all()
        return
    o, lse = r
    assert isinstance(o, cupy.ndarray) and o.dtype == cupy.float16
    cupy.cuda.get_current_stream().synchronize()
    kc, vc = cupy.asnumpy(g["k_cache"]), cupy.asnumpy(g["v_cache"])
    lengths = case["cache_seqlens"] + 3
    args = (case["q"], kc, vc, lengths, case["page_size"], case["block_table"], None, True, (-1, -1),
            float32_scale(64))
    ro, rlse = kvcache_ref(*args)
    no, _ = kvcache_ref(*args, naive_dtype="float16")
    assert max_err(cupy.asnumpy(o), ro) <= 2 * max_err(rd(no, "float16"), ro)


def test_kvcache_index_arrays():
    q = cupy.zeros((2, 1, 2, 64), cupy.float16)
    kc = cupy.zeros((2, 8, 2, 64), cupy.float16)
    with pytest.raises(FlashError) as e:
        libflash.attention_with_kvcache(q, kc, kc, cache_seqlens=cupy.asarray([1, 2], cupy.int64))
    assert e.value.status == capi.FLASH_ERROR_UNSUPPORTED_DTYPE and "must be int32" in e.value.message
    with pytest.raises(FlashError) as e:
        libflash.attention_with_kvcache(q, kc, kc, cache_seqlens=cupy.asarray([1, 2, 3], cupy.int32))
    assert e.value.status == capi.FLASH_ERROR_BAD_SHAPE
    with pytest.raises(FlashError) as e:
        libflash.attention_with_kvcache(q, kc, kc, cache_seqlens=cupy.asarray([1, 0, 2, 0], cupy.int32)[::2])
    assert e.value.status == capi.FLASH_ERROR_BAD_STRIDE
    _kv_call(libflash.attention_with_kvcache, q, kc, kc, cache_seqlens=[1, 2])  # host data: copied to q's device


def test_combine():
    rng = np.random.default_rng(31)
    o_parts = rand(rng, (3, 1, 5, 2, 64))
    lse_parts = cupy.asarray(rng.standard_normal((3, 1, 2, 5)).astype(np.float32))
    r = _kv_call(libflash.combine, o_parts, lse_parts)
    if r is None:
        return
    from test_kvcache import combine_ref, within_ulp

    cupy.cuda.get_current_stream().synchronize()
    ro, _ = combine_ref(cupy.asnumpy(o_parts), cupy.asnumpy(lse_parts))
    assert within_ulp(cupy.asnumpy(r), ro, "float16", 1.0)  # fp32 or better, rounded once


# ---- Packed variable-length batches -----------------------------------------------------------------------------
def _varlen_call(fn, *a, **kw):
    """fn's result, or a skip while the library refuses varlen on the GPU (issue 72: until the CUDA kernels read the
    offsets)."""
    try:
        return fn(*a, **kw)
    except FlashError as e:
        if e.status == capi.FLASH_ERROR_UNSUPPORTED and "varlen" in e.message:
            pytest.skip("this libflash refuses varlen on the GPU: %s" % e.message)
        raise


@pytest.mark.parametrize("causal", [False, True])
def test_varlen_forward_and_backward(causal):
    """Each sequence against the float64 reference of that sequence alone; offsets as CuPy int32 arrays and as host
    lists (copied to the device); gradients finite and zero for keys no query sees."""
    rng = np.random.default_rng(72 + causal)
    lens_q, lens_k = [0, 1, 129, 40, 1], [7, 1, 200, 0, 64]
    cu_q = np.concatenate([[0], np.cumsum(lens_q)]).astype(np.int32)
    cu_k = np.concatenate([[0], np.cumsum(lens_k)]).astype(np.int32)
    q, k, v = rand(rng, (int(cu_q[-1]), 4, 64)), rand(rng, (int(cu_k[-1]), 2, 64)), rand(rng, (int(cu_k[-1]), 2, 64))
    dcu_q, dcu_k = cupy.asarray(cu_q), cupy.asarray(cu_k)
    o, lse = _varlen_call(libflash.attention, q, k, v, cu_seqlens_q=dcu_q, cu_seqlens_k=dcu_k, max_seqlen_q=129,
                          max_seqlen_k=200, causal=causal, return_lse=True)
    assert isinstance(o, cupy.ndarray) and o.shape == q.shape and lse.shape == (4, int(cu_q[-1]))
    o2 = libflash.attention(q, k, v, cu_seqlens_q=list(cu_q), cu_seqlens_k=cu_k, causal=causal)
    cupy.cuda.get_current_stream().synchronize()
    assert cupy.array_equal(o, o2)
    for i in range(len(lens_q)):
        if lens_q[i] == 0:
            continue
        rows, keys = slice(cu_q[i], cu_q[i + 1]), slice(cu_k[i], cu_k[i + 1])
        if lens_k[i] == 0:
            assert not cupy.asnumpy(o[rows]).any()
            continue
        check(o[rows][None], lse[:, rows][None], q[rows][None], k[keys][None], v[keys][None], causal=causal)
    dq, dk, dv = libflash.attention_backward(q, k, v, o, cupy.ones_like(o), lse, cu_seqlens_q=dcu_q,
                                             cu_seqlens_k=dcu_k, causal=causal)
    cupy.cuda.get_current_stream().synchronize()
    assert all(isinstance(g, cupy.ndarray) and bool(cupy.isfinite(g).all()) for g in (dq, dk, dv))
    assert not cupy.asnumpy(dk[cu_k[0]:cu_k[1]]).any()  # sequence 0 has no queries


def test_varlen_refusals():
    rng = np.random.default_rng(5)
    q, k = rand(rng, (10, 2, 64)), rand(rng, (10, 2, 64))
    cu = cupy.asarray(np.array([0, 4, 10], np.int32))
    with pytest.raises(FlashError, match="GPU varlen arrays must be int32") as ei:
        libflash.attention(q, k, k, cu_seqlens_q=cu.astype(cupy.int64), cu_seqlens_k=cu)
    assert ei.value.status == capi.FLASH_ERROR_UNSUPPORTED_DTYPE
    with pytest.raises(FlashError, match="must be contiguous") as ei:
        libflash.attention(q, k, k, cu_seqlens_q=cupy.repeat(cu, 2)[::2], cu_seqlens_k=cu)
    assert ei.value.status == capi.FLASH_ERROR_BAD_STRIDE
    with pytest.raises(FlashError, match=r"cu_seqlens_k\[2\] is 11 but k has 10 rows"):
        libflash.attention(q, k, k, cu_seqlens_q=cu, cu_seqlens_k=[0, 4, 11])
