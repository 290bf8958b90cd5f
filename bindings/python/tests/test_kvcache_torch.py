"""attention_with_kvcache(), combine() and the FlashAttention-2 shim flash_attn_with_kvcache on torch tensors.

CPU tensors (float32, float16, bfloat16) run everywhere torch is installed, against the float64 reference and the
bounds of test_kvcache.py (float32: 1 ulp; 16-bit: twice a naive same-dtype implementation's error). The CUDA tests
need a GPU and a CUDA build; until libflash's GPU kernels for these calls exist the library refuses CUDA tensors
with FLASH_ERROR_ALGORITHM_UNAVAILABLE, which they accept in place of a result."""

import inspect
import zlib

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import libflash  # noqa: E402
from libflash import FlashError, capi  # noqa: E402
from libflash.torch import flash_attn_with_kvcache  # noqa: E402
from test_kvcache import (combine_ref, float32_scale, kvcache_ref, make_case, max_err, rd, slot,  # noqa: E402
                          within_rounding, within_ulp)

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def _cuda_ok():
    try:
        return torch.cuda.is_available() and libflash.device_count("cuda") > 0
    except Exception:
        return False


gpu = pytest.mark.skipif(not _cuda_ok(), reason="no CUDA device for torch, or a CPU-only libflash")


def to_torch(case, dtype, device="cpu", index_dtype=torch.int32):
    """The numpy case (float32) as torch tensors of `dtype` on `device` (values rounded to it; NaN stays NaN)."""
    t = {}
    for name in ("q", "k_cache", "v_cache", "k", "v"):
        x = case[name]
        t[name] = None if x is None else torch.from_numpy(x).to(device=device, dtype=dtype)
    for name in ("cache_seqlens", "block_table", "cache_batch_idx"):
        x = case[name]
        t[name] = None if x is None else torch.from_numpy(x.astype(np.int64)).to(device=device, dtype=index_dtype)
    t["page_size"] = case["page_size"]
    return t


def expected_caches(t):
    """The caches after the append, made by torch element copies (the same bits the library must write)."""
    want_k, want_v = t["k_cache"].clone(), t["v_cache"].clone()
    if t["k"] is not None:
        seqlens = t["cache_seqlens"].cpu().numpy()
        table = None if t["block_table"] is None else t["block_table"].cpu().numpy()
        bidx = None if t["cache_batch_idx"] is None else t["cache_batch_idx"].cpu().numpy()
        for i in range(t["k"].shape[0]):
            for r in range(t["k"].shape[1]):
                at = slot(i, int(seqlens[i]) + r, t["page_size"], table, bidx)
                want_k[at] = t["k"][i, r]
                want_v[at] = t["v"][i, r]
    return want_k, want_v


def same_bits(a, b):
    bits = torch.int16 if a.element_size() == 2 else torch.int32
    return torch.equal(a.view(bits), b.view(bits))


def f64(x):
    return x.detach().cpu().double().numpy()


def check_result(t, o, lse, dtype, causal=False, window=(-1, -1), softmax_scale=None):
    """O and LSE against the reference from the expected caches (the bounds of test_kvcache.py)."""
    want_k, want_v = expected_caches(t)
    q = f64(t["q"])
    b, sn, hq, d = q.shape
    seqlens = t["cache_seqlens"].cpu().numpy().astype(np.int64)
    lengths = seqlens + (sn if t["k"] is not None else 0)
    table = None if t["block_table"] is None else t["block_table"].cpu().numpy()
    bidx = None if t["cache_batch_idx"] is None else t["cache_batch_idx"].cpu().numpy()
    args = (q, f64(want_k), f64(want_v), lengths, t["page_size"], table, bidx, causal, window,
            float32_scale(d, softmax_scale))
    ro, rlse = kvcache_ref(*args)
    assert o.dtype == t["q"].dtype and tuple(o.shape) == (b, sn, hq, d) and o.device == t["q"].device
    err_o = max_err(f64(o), ro)
    err_lse = max_err(f64(lse), rlse) if lse is not None else None
    if lse is not None:
        assert lse.dtype == torch.float32 and tuple(lse.shape) == (b, hq, sn)
    if dtype == "float32":
        assert within_ulp(f64(o), ro), err_o
        assert lse is None or within_ulp(f64(lse), rlse), err_lse
    else:
        no, nlse = kvcache_ref(*args, naive_dtype=dtype)
        naive_o = max_err(rd(no, dtype), ro)
        assert err_o <= 2 * naive_o, (err_o, naive_o)
        if lse is not None:
            naive_lse = max_err(rd(nlse, "float32"), rlse)
            assert err_lse <= 2 * naive_lse, (err_lse, naive_lse)


# ---- CPU tensors ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("layout", ["contiguous", "batch_idx", 1, 16, 64])
def test_shim_cpu(dtype, layout):
    rng = np.random.default_rng(zlib.crc32(("%s %s" % (dtype, layout)).encode()))  # stable across runs
    case = make_case(rng, b=3, sn=int(rng.integers(1, 17)), hq=8, hkv=2, d=72, dtype="float32",
                     lengths=[57, 0, 121], append=True, page_size=layout if isinstance(layout, int) else None,
                     batch_idx=layout == "batch_idx")
    t = to_torch(case, DTYPES[dtype])
    want_k, want_v = expected_caches(t)
    causal = layout != 16
    o, lse = flash_attn_with_kvcache(t["q"], t["k_cache"], t["v_cache"], t["k"], t["v"],
                                     cache_seqlens=t["cache_seqlens"], cache_batch_idx=t["cache_batch_idx"],
                                     block_table=t["block_table"], causal=causal, window_size=(90, -1), num_splits=3,
                                     return_softmax_lse=True)
    assert libflash.last_num_splits_used() == 3
    assert same_bits(t["k_cache"], want_k) and same_bits(t["v_cache"], want_v)
    check_result(t, o, lse, dtype, causal=causal, window=(90, -1))


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_core_api_cpu_tensors(dtype):
    """libflash.attention_with_kvcache on torch CPU tensors: the result is a torch tensor; int64 index tensors are
    range-checked and converted."""
    rng = np.random.default_rng(len(dtype))
    case = make_case(rng, b=2, sn=4, hq=4, hkv=4, d=40, dtype="float32", lengths=[13, 70], append=True, page_size=16)
    t = to_torch(case, DTYPES[dtype], index_dtype=torch.int64)
    out = torch.full(t["q"].shape, float("nan"), dtype=DTYPES[dtype])
    o, lse = libflash.attention_with_kvcache(t["q"], t["k_cache"], t["v_cache"], k=t["k"], v=t["v"],
                                             cache_seqlens=t["cache_seqlens"], block_table=t["block_table"],
                                             causal=True, return_lse=True, out=out)
    assert o is out and isinstance(lse, torch.Tensor)
    check_result(t, o, lse, dtype, causal=True)


def test_int_cache_seqlens_is_broadcast_and_none_means_full():
    rng = np.random.default_rng(2)
    q = torch.randn(3, 2, 4, 16)
    kc, vc = torch.randn(3, 33, 2, 16), torch.randn(3, 33, 2, 16)
    a = flash_attn_with_kvcache(q, kc, vc, cache_seqlens=20, causal=True)
    b = flash_attn_with_kvcache(q, kc, vc, cache_seqlens=torch.full((3,), 20, dtype=torch.int32), causal=True)
    assert torch.equal(a, b)
    # None: every sequence attends to the whole cache (flash-attn's meaning), paged or not.
    full = flash_attn_with_kvcache(q, kc, vc)
    assert torch.equal(full, flash_attn_with_kvcache(q, kc, vc, cache_seqlens=33))
    pages = torch.randn(7, 5, 2, 16), torch.randn(7, 5, 2, 16)
    table = torch.from_numpy(rng.permutation(7)[:6].reshape(3, 2).astype(np.int32))
    paged = flash_attn_with_kvcache(q, *pages, block_table=table)
    assert torch.equal(paged, flash_attn_with_kvcache(q, *pages, block_table=table, cache_seqlens=10))
    with pytest.raises(ValueError, match="cache_seqlens is required when k and v are given"):
        flash_attn_with_kvcache(q, kc, vc, torch.randn(3, 2, 2, 16), torch.randn(3, 2, 2, 16))
    with pytest.raises(FlashError, match="cache_seqlens holds 4294967296, which does not fit int32"):
        flash_attn_with_kvcache(q, kc, vc, cache_seqlens=2 ** 32)


def test_shim_signature_is_flash_attn_2s():
    names = list(inspect.signature(flash_attn_with_kvcache).parameters)
    assert names == ["q", "k_cache", "v_cache", "k", "v", "rotary_cos", "rotary_sin", "cache_seqlens",
                     "cache_batch_idx", "cache_leftpad", "block_table", "softmax_scale", "causal", "window_size",
                     "softcap", "rotary_interleaved", "alibi_slopes", "num_splits", "return_softmax_lse"]
    defaults = {k: p.default for k, p in inspect.signature(flash_attn_with_kvcache).parameters.items()}
    assert defaults["window_size"] == (-1, -1) and defaults["softcap"] == 0.0 and defaults["num_splits"] == 0
    assert defaults["rotary_interleaved"] is True and defaults["return_softmax_lse"] is False


@pytest.mark.parametrize("arg,value,needle", [
    ("rotary_cos", torch.zeros(8, 8), "rotary_cos"), ("rotary_sin", torch.zeros(8, 8), "rotary_sin"),
    ("cache_leftpad", torch.zeros(1, dtype=torch.int32), "cache_leftpad"), ("softcap", 30.0, "softcap=30.0"),
    ("alibi_slopes", torch.zeros(2), "alibi_slopes")])
def test_shim_unsupported_arguments(arg, value, needle):
    q, kc = torch.randn(1, 1, 2, 16), torch.randn(1, 8, 2, 16)
    with pytest.raises(NotImplementedError, match=needle):
        flash_attn_with_kvcache(q, kc, kc, cache_seqlens=3, **{arg: value})


def test_shim_k_without_v():
    q, kc = torch.randn(1, 1, 2, 16), torch.randn(1, 8, 2, 16)
    with pytest.raises(ValueError, match="k and v must be given together"):
        flash_attn_with_kvcache(q, kc, kc.clone(), k=torch.randn(1, 1, 2, 16), cache_seqlens=3)


def test_requires_grad_is_refused_and_no_grad_runs():
    q, kc, vc = torch.randn(1, 2, 2, 16, requires_grad=True), torch.randn(1, 8, 2, 16), torch.randn(1, 8, 2, 16)
    with pytest.raises(RuntimeError, match="has no backward"):
        flash_attn_with_kvcache(q, kc, vc, cache_seqlens=5)
    with torch.no_grad():
        o = flash_attn_with_kvcache(q, kc, vc, cache_seqlens=5)
    assert not o.requires_grad
    with torch.inference_mode():
        flash_attn_with_kvcache(q.detach(), kc, vc, cache_seqlens=5)
    parts = torch.randn(2, 1, 2, 2, 16, requires_grad=True)
    with pytest.raises(RuntimeError, match="combine has no backward"):
        libflash.combine(parts, torch.zeros(2, 1, 2, 2))


def test_index_tensor_refusals():
    q, kc = torch.randn(2, 1, 2, 16), torch.randn(2, 8, 2, 16)
    with pytest.raises(FlashError, match="cache_seqlens has dtype float32") as ei:
        flash_attn_with_kvcache(q, kc, kc.clone(), cache_seqlens=torch.tensor([1.0, 2.0]))
    assert ei.value.status == capi.FLASH_ERROR_UNSUPPORTED_DTYPE
    for bad in (torch.tensor([1, 2], dtype=torch.bfloat16), torch.tensor([True, False])):
        with pytest.raises(FlashError, match="cache_seqlens has dtype") as ei:
            flash_attn_with_kvcache(q, kc, kc.clone(), cache_seqlens=bad)
        assert ei.value.status == capi.FLASH_ERROR_UNSUPPORTED_DTYPE
    with pytest.raises(FlashError, match="cache_seqlens holds -4294967296") as ei:
        flash_attn_with_kvcache(q, kc, kc.clone(), cache_seqlens=torch.tensor([1, -2 ** 32]))
    assert ei.value.status == capi.FLASH_ERROR_INVALID_ARGUMENT
    with pytest.raises(FlashError, match=r"cache_seqlens has shape \(3,\) but must be \(2,\)") as ei:
        flash_attn_with_kvcache(q, kc, kc.clone(), cache_seqlens=torch.tensor([1, 2, 3], dtype=torch.int32))
    assert ei.value.status == capi.FLASH_ERROR_BAD_SHAPE
    with pytest.raises(FlashError) as ei:
        flash_attn_with_kvcache(q, kc, kc.clone(), cache_seqlens=torch.tensor([1, 9], dtype=torch.int32))
    assert ei.value.status == capi.FLASH_ERROR_INVALID_ARGUMENT
    assert ei.value.message == "cache_seqlens[1] is 9 but k_cache.shape[1] (max_len) is 8"
    # Strided (non-contiguous) CPU index tensors are copied; a broadcast block table works too.
    seq = torch.tensor([[3, 0], [5, 0]], dtype=torch.int32)[:, 0]
    assert not seq.is_contiguous()
    a = flash_attn_with_kvcache(q, kc, kc, cache_seqlens=seq)
    assert torch.equal(a, flash_attn_with_kvcache(q, kc, kc, cache_seqlens=torch.tensor([3, 5], dtype=torch.int32)))
    pages = torch.randn(4, 4, 2, 16)
    table = torch.tensor([[2, 0]], dtype=torch.int32).expand(2, 2)
    assert table.stride(0) == 0
    a = flash_attn_with_kvcache(q, pages, pages, cache_seqlens=6, block_table=table)
    assert torch.equal(a, flash_attn_with_kvcache(q, pages, pages, cache_seqlens=6, block_table=table.contiguous()))


def test_combine_torch_cpu():
    rng = np.random.default_rng(3)
    o_parts = torch.randn(3, 2, 5, 3, 24, dtype=torch.float32)
    lse_parts = torch.from_numpy((rng.standard_normal((3, 2, 3, 5)) * 2).astype(np.float32))
    lse_parts[1, 0, 1] = float("-inf")
    out, lse = libflash.combine(o_parts, lse_parts, return_lse=True)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32
    ro, rlse = combine_ref(o_parts.numpy(), lse_parts.numpy())
    assert within_ulp(out.numpy(), ro) and within_ulp(lse.numpy(), rlse)
    out16 = libflash.combine(list(o_parts.to(torch.bfloat16)), list(lse_parts))
    assert out16.dtype == torch.bfloat16
    ro, _ = combine_ref(o_parts.to(torch.bfloat16).double().numpy(), lse_parts.numpy())
    assert within_rounding(out16.double().numpy(), ro, "bfloat16")


# ---- CUDA tensors ---------------------------------------------------------------------------------------------------
def _gpu_call(fn, *a, **kw):
    """The call's result, or None when the library has no GPU kernel for it yet (its documented refusal)."""
    try:
        return fn(*a, **kw)
    except FlashError as e:
        if e.status == capi.FLASH_ERROR_ALGORITHM_UNAVAILABLE:
            return None
        raise


@gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("layout", ["contiguous", "batch_idx", 16, 64])
def test_shim_cuda(dtype, layout):
    rng = np.random.default_rng(zlib.crc32(("%s %s cuda" % (dtype, layout)).encode()))
    case = make_case(rng, b=3, sn=5, hq=8, hkv=2, d=128, dtype="float32", lengths=[300, 1, 77], append=True,
                     page_size=layout if isinstance(layout, int) else None, batch_idx=layout == "batch_idx")
    t = to_torch(case, DTYPES[dtype], device="cuda")
    k0, v0 = t["k_cache"].clone(), t["v_cache"].clone()
    want_k, want_v = expected_caches(t)
    r = _gpu_call(flash_attn_with_kvcache, t["q"], t["k_cache"], t["v_cache"], t["k"], t["v"],
                  cache_seqlens=t["cache_seqlens"], cache_batch_idx=t["cache_batch_idx"], block_table=t["block_table"],
                  causal=True, return_softmax_lse=True)
    if r is None:  # refused before anything was written
        assert same_bits(t["k_cache"], k0) and same_bits(t["v_cache"], v0)
        return
    torch.cuda.synchronize()
    assert same_bits(t["k_cache"], want_k) and same_bits(t["v_cache"], want_v)
    check_result(t, r[0], r[1], dtype, causal=True)


@gpu
def test_cuda_index_arrays_must_be_int32_on_qs_device():
    q, kc = torch.randn(2, 1, 2, 64, device="cuda", dtype=torch.float16), torch.randn(2, 8, 2, 64, device="cuda",
                                                                                      dtype=torch.float16)
    with pytest.raises(FlashError, match="GPU index arrays must be int32") as ei:
        libflash.attention_with_kvcache(q, kc, kc, cache_seqlens=torch.tensor([1, 2], device="cuda"))
    assert ei.value.status == capi.FLASH_ERROR_UNSUPPORTED_DTYPE
    with pytest.raises(FlashError, match="index arrays live on q's device") as ei:
        libflash.attention_with_kvcache(q, kc, kc, cache_seqlens=torch.tensor([1, 2], dtype=torch.int32))
    assert ei.value.status == capi.FLASH_ERROR_DEVICE_MISMATCH
    # Host data (an int, numpy) is copied to q's device.
    _gpu_call(libflash.attention_with_kvcache, q, kc, kc, cache_seqlens=np.array([1, 2]))
    _gpu_call(flash_attn_with_kvcache, q, kc, kc, cache_seqlens=3)


@gpu
def test_combine_cuda():
    o_parts = torch.randn(3, 2, 5, 3, 64, device="cuda", dtype=torch.float16)
    lse_parts = torch.randn(3, 2, 3, 5, device="cuda")
    r = _gpu_call(libflash.combine, o_parts, lse_parts, return_lse=True)
    if r is None:
        return
    torch.cuda.synchronize()
    ro, rlse = combine_ref(o_parts.double().cpu().numpy(), lse_parts.cpu().numpy())
    # Accumulated in fp32 or better and rounded once: within 1 ulp (the CPU combine, in double, is within 1/2). The
    # LSE, M + log(sum of <= 3 weights) in fp32: a few fp32 roundings of values of size max(1, |LSE|).
    assert within_ulp(r[0].double().cpu().numpy(), ro, "float16", 1.0)
    lse_err = np.abs(r[1].double().cpu().numpy() - rlse)
    assert np.all(lse_err <= 8 * 2.0 ** -24 * np.maximum(1.0, np.abs(rlse)))
