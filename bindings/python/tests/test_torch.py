"""PyTorch inputs: GPU results against torch's scaled_dot_product_attention in float64, streams, strides,
the FlashAttention-2 shim, and CPU torch tensors. Skipped when torch is missing; GPU tests skipped when
there is no CUDA device or the library was built without CUDA."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

import libflash  # noqa: E402
from libflash import FlashError, capi  # noqa: E402
from reference import attention_ref, visible  # noqa: E402


def _cuda_ok():
    try:
        return torch.cuda.is_available() and libflash.device_count("cuda") > 0
    except Exception:
        return False


HAS_GPU = _cuda_ok()
gpu = pytest.mark.skipif(not HAS_GPU, reason="no CUDA device for torch, or a CPU-only libflash")
GPU_ALGOS = ["auto"] + ([a for a in libflash.device_info("cuda", 0).algorithms if a != "auto"] if HAS_GPU else [])
TOL = {torch.float16: (5e-3, 5e-3), torch.bfloat16: (3e-2, 2e-2), torch.float32: (2e-5, 2e-5)}
DEV = "cuda"


def sdpa_ref(q, k, v, softmax_scale=None, **mask):
    """(O, LSE) in float64 from torch's SDPA (math path) with an explicit boolean mask."""
    b, sq, hq, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    qf = q.double().transpose(1, 2)
    kf = k.double().transpose(1, 2).repeat_interleave(hq // hkv, dim=1)
    vf = v.double().transpose(1, 2).repeat_interleave(hq // hkv, dim=1)
    scale = 1.0 / np.sqrt(d) if softmax_scale is None else softmax_scale
    qf = qf * (scale * np.sqrt(d))  # SDPA's default scale is 1/sqrt(d)
    ok = torch.from_numpy(np.ascontiguousarray(visible(sq, sk, **mask))).to(q.device)
    if hasattr(F, "scaled_dot_product_attention"):
        o = F.scaled_dot_product_attention(qf, kf, vf, attn_mask=ok)
    else:  # torch < 2.0 (CPU-only runs of the shim tests): the same math by hand
        o = torch.softmax((qf @ kf.transpose(-1, -2) / np.sqrt(d)).masked_fill(~ok, float("-inf")), dim=-1) @ vf
    o = torch.nan_to_num(o, nan=0.0).transpose(1, 2)  # rows that see no key: NaN in SDPA, 0 in libflash
    s = (qf @ kf.transpose(-1, -2)) / np.sqrt(d)
    lse = torch.logsumexp(s.masked_fill(~ok, float("-inf")), dim=-1)
    return o, lse


def assert_close(o, lse, ro, rlse, dtype):
    atol, rtol = TOL[dtype]
    assert o.dtype == dtype
    assert torch.isfinite(o).all(), "NaN/inf in O"
    torch.testing.assert_close(o.double(), ro, atol=atol, rtol=rtol)
    if lse is not None:
        assert lse.dtype == torch.float32
        empty = torch.isneginf(rlse)
        assert torch.equal(torch.isneginf(lse), empty)
        torch.testing.assert_close(lse.double()[~empty], rlse[~empty], atol=2e-3, rtol=1e-4)


def run(algorithm, *a, **kw):
    """libflash.attention, skipping when an explicitly named kernel does not (yet) support the options."""
    try:
        return libflash.attention(*a, algorithm=algorithm, **kw)
    except FlashError as e:
        if algorithm != "auto" and e.status in (capi.FLASH_ERROR_UNSUPPORTED, capi.FLASH_ERROR_ALGORITHM_UNAVAILABLE):
            pytest.skip("%s: %s" % (algorithm, e))
        raise


def rand(shape, dtype, device=DEV, gen=None):
    return torch.randn(shape, generator=gen, dtype=torch.float32, device="cpu").to(device=device, dtype=dtype)


# ---- GPU vs SDPA ----------------------------------------------------------------------------------------
@gpu
@pytest.mark.parametrize("algorithm", GPU_ALGOS)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("seed", range(10))
def test_random_vs_sdpa(algorithm, dtype, seed):
    rng = np.random.default_rng(seed)
    g = torch.Generator().manual_seed(seed)
    b = int(rng.integers(1, 4))
    sq, sk = int(rng.integers(1, 700)), int(rng.integers(1, 700))
    hkv = int(rng.choice([1, 2, 3]))
    hq = hkv * int(rng.choice([1, 2, 4]))
    d = int(rng.choice([32, 64, 96, 128, 256, 8 * int(rng.integers(1, 33))]))
    causal = bool(rng.integers(0, 2))
    alignment = ["bottom_right", "top_left"][int(rng.integers(0, 2))]
    window = [(-1, -1), (int(rng.integers(0, 300)), int(rng.integers(-1, 50)))][int(rng.integers(0, 2))]
    q, k, v = rand((b, sq, hq, d), dtype, gen=g), rand((b, sk, hkv, d), dtype, gen=g), rand((b, sk, hkv, d), dtype, gen=g)
    o, lse = run(algorithm, q, k, v, causal=causal, causal_alignment=alignment, window=window, return_lse=True)
    assert isinstance(o, torch.Tensor) and o.device == q.device and o.shape == q.shape
    assert lse.shape == (b, hq, sq) and lse.device == q.device
    torch.cuda.synchronize()
    ro, rlse = sdpa_ref(q, k, v, causal=causal, alignment=alignment, window=window)
    assert_close(o, lse, ro, rlse, dtype)


@gpu
@pytest.mark.parametrize("sq,sk", [(128, 128), (100, 300), (300, 100), (1, 513), (1000, 1000)])
def test_top_left_causal_is_sdpa_is_causal(sq, sk):
    """Anchors the alignment naming to PyTorch itself: top_left causal == SDPA is_causal=True."""
    g = torch.Generator().manual_seed(sq + sk)
    q, k, v = (rand((2, s, 4, 64), torch.float16, gen=g) for s in (sq, sk, sk))
    o = libflash.attention(q, k, v, causal=True, causal_alignment="top_left")
    ro = F.scaled_dot_product_attention(q.double().transpose(1, 2), k.double().transpose(1, 2),
                                        v.double().transpose(1, 2), is_causal=True).transpose(1, 2)
    ro = torch.nan_to_num(ro, nan=0.0)
    assert_close(o, None, ro, None, torch.float16)


@gpu
@pytest.mark.parametrize("algorithm", GPU_ALGOS)
def test_softmax_scale_and_gqa(algorithm):
    g = torch.Generator().manual_seed(5)
    q, k, v = rand((2, 333, 8, 128), torch.bfloat16, gen=g), rand((2, 257, 1, 128), torch.bfloat16, gen=g), \
        rand((2, 257, 1, 128), torch.bfloat16, gen=g)
    o, lse = run(algorithm, q, k, v, softmax_scale=0.05, return_lse=True)
    ro, rlse = sdpa_ref(q, k, v, softmax_scale=0.05)
    assert_close(o, lse, ro, rlse, torch.bfloat16)


# ---- Block masks ------------------------------------------------------------------------------------------
@gpu
@pytest.mark.parametrize("algorithm", GPU_ALGOS)
@pytest.mark.parametrize("block", [64, 128])
@pytest.mark.parametrize("density", [0.0, 0.25, 0.6, 1.0])
def test_block_mask_dense_on_gpu(algorithm, block, density):
    g = torch.Generator().manual_seed(int(density * 100) + block)
    b, hq, sq, sk = 2, 4, 520, 700
    q, k, v = rand((b, sq, hq, 64), torch.float16, gen=g), rand((b, sk, 2, 64), torch.float16, gen=g), \
        rand((b, sk, 2, 64), torch.float16, gen=g)
    nq, nk = -(-sq // block), -(-sk // block)
    m = torch.rand((b, 1, nq, nk), generator=g) < density
    for causal in (False, True):
        o, lse = run(algorithm, q, k, v, block_mask=m.to(DEV), block_size=block, causal=causal, return_lse=True)
        ro, rlse = sdpa_ref(q, k, v, block_map=m.numpy(), block=(block, block), causal=causal)
        assert_close(o, lse, ro, rlse, torch.float16)


@gpu
def test_block_mask_compact_on_gpu():
    g = torch.Generator().manual_seed(77)
    b, h, sq, sk = 1, 2, 256, 384
    q, k, v = (rand((b, s, h, 64), torch.bfloat16, gen=g) for s in (sq, sk, sk))
    dense = torch.rand((b, h, 2, 3), generator=g) < 0.5
    counts = dense.sum(-1).to(torch.int32)
    idx = torch.argsort((~dense).to(torch.int8), dim=-1, stable=True).to(torch.int32)
    for bm in [(counts.to(DEV), idx.to(DEV)), libflash.BlockMask(counts.to(DEV), idx.to(DEV), block_size=128),
               (counts.numpy(), idx.numpy())]:
        o, lse = libflash.attention(q, k, v, block_mask=bm, return_lse=True)
        ro, rlse = sdpa_ref(q, k, v, block_map=dense.numpy(), block=(128, 128))
        assert_close(o, lse, ro, rlse, torch.bfloat16)


def _flex_attention_module():
    try:
        from torch.nn.attention import flex_attention
        return flex_attention if hasattr(flex_attention, "create_block_mask") else None
    except ImportError:
        return None


@gpu
@pytest.mark.skipif(_flex_attention_module() is None, reason="this torch has no FlexAttention")
@pytest.mark.parametrize("algorithm", GPU_ALGOS)
def test_block_mask_from_flex_attention(algorithm):
    """FlexAttention's own BlockMask as block_mask=: full blocks from create_block_mask, lists from from_kv_blocks
    (noop mask_mod), and a causal mask_mod's partial blocks (refused, then kept whole with causal=)."""
    fa = _flex_attention_module()
    g = torch.Generator().manual_seed(91)
    b, h, sq, sk = 2, 4, 384, 512
    q, k, v = (rand((b, s, h, 64), torch.bfloat16, gen=g) for s in (sq, sk, sk))
    nq, nk = 3, 4
    keep = torch.rand((1, h, nq, nk), generator=g) < 0.5
    keep[0, 0, 1] = False  # a query block that sees no key
    keep_dev = keep.to(DEV)

    def block_mod(b_, h_, i, j):  # constant over each 128 x 128 block: create_block_mask marks kept blocks full
        return keep_dev[0, h_, i // 128, j // 128]

    fm = fa.create_block_mask(block_mod, None, h, sq, sk, device=DEV, BLOCK_SIZE=128)
    assert not bool((fm.kv_num_blocks > 0).any())  # no partial block
    o, lse = run(algorithm, q, k, v, block_mask=fm, return_lse=True)
    ro, rlse = sdpa_ref(q, k, v, block_map=keep.numpy(), block=(128, 128))
    assert_close(o, lse, ro, rlse, torch.bfloat16)

    # from_kv_blocks with partial lists and no mask_mod (noop_mask: partial blocks are whole), per batch and head.
    keep2 = torch.rand((b, h, nq, nk), generator=g) < 0.4
    counts = keep2.sum(-1).to(torch.int32)
    idx = torch.argsort((~keep2).to(torch.int8), dim=-1, stable=True).to(torch.int32)
    fm2 = fa.BlockMask.from_kv_blocks(counts.to(DEV), idx.to(DEV), BLOCK_SIZE=128)
    o, lse = run(algorithm, q, k, v, block_mask=fm2, return_lse=True)
    ro, rlse = sdpa_ref(q, k, v, block_map=keep2.numpy(), block=(128, 128))
    assert_close(o, lse, ro, rlse, torch.bfloat16)

    # A causal mask_mod: the diagonal blocks are partial. Refused as it is; kept whole with causal= it is exact.
    fm3 = fa.create_block_mask(lambda b_, h_, i, j: j <= i, None, None, sq, sk, device=DEV, BLOCK_SIZE=128)
    with pytest.raises(FlashError) as e:
        libflash.attention(q, k, v, block_mask=fm3, algorithm=algorithm)
    assert e.value.status == capi.FLASH_ERROR_BAD_MASK
    o, lse = run(algorithm, q, k, v, block_mask=libflash.BlockMask.from_flex(fm3, partial="keep"), causal=True,
                 causal_alignment="top_left", return_lse=True)
    ro, rlse = sdpa_ref(q, k, v, causal=True, alignment="top_left")
    assert_close(o, lse, ro, rlse, torch.bfloat16)


# ---- Strides, out=, result kind --------------------------------------------------------------------------
@gpu
def test_strided_inputs_and_out():
    g = torch.Generator().manual_seed(8)
    qkv = rand((2, 300, 3, 4, 64), torch.float16, gen=g)
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    o = libflash.attention(q, k, v, causal=True)
    assert_close(o, None, *sdpa_ref(q, k, v, causal=True)[:1], None, torch.float16)
    # [b, h, s, d] storage viewed as [b, s, h, d]; every other query row.
    qh = rand((2, 4, 600, 64), torch.float16, gen=g)
    q2 = qh.transpose(1, 2)[:, ::2]
    out_store = torch.full((2, 4, 300, 64), float("nan"), dtype=torch.float16, device=DEV)
    out = out_store.transpose(1, 2)
    r = libflash.attention(q2, k, v, out=out)
    assert r is out
    assert_close(out, None, sdpa_ref(q2, k, v)[0], None, torch.float16)


@gpu
def test_dlpack_producer_on_gpu():
    """An unknown CUDA array type with only __dlpack__ goes through the DLPack capsule reader (out= needed)."""

    class Wrapped:
        def __init__(self, t):
            self.t = t

        def __dlpack__(self, stream=None):
            return self.t.__dlpack__(stream=stream)

        def __dlpack_device__(self):
            return self.t.__dlpack_device__()

    g = torch.Generator().manual_seed(9)
    q, k, v = (rand((1, 200, 2, 64), torch.float16, gen=g) for _ in range(3))
    out = torch.empty_like(q)
    r = libflash.attention(Wrapped(q[:, ::2]), Wrapped(k), Wrapped(v), out=Wrapped(out[:, ::2]))
    assert isinstance(r, Wrapped)
    torch.cuda.synchronize()
    assert_close(out[:, ::2], None, sdpa_ref(q[:, ::2], k, v)[0], None, torch.float16)
    with pytest.raises(TypeError, match="out="):
        libflash.attention(Wrapped(q), Wrapped(k), Wrapped(v))


# ---- Streams ----------------------------------------------------------------------------------------------
def _produced_late_on(stream, src):
    """A copy of src written on `stream` only after a ~0.1 s sleep; NaN until then. If libflash read it on any
    other (non-waiting) stream the result would contain NaN."""
    dst = torch.full_like(src, float("nan"))
    torch.cuda.synchronize()
    with torch.cuda.stream(stream):
        torch.cuda._sleep(200_000_000)
        dst.copy_(src)
    return dst


@gpu
@pytest.mark.parametrize("how", ["object", "int", "current"])
def test_non_default_stream(how):
    g = torch.Generator().manual_seed(10)
    q, k, v = rand((2, 512, 4, 64), torch.float16, gen=g), rand((2, 512, 4, 64), torch.float16, gen=g), \
        rand((2, 512, 4, 64), torch.float16, gen=g)
    s = torch.cuda.Stream()
    q_late = _produced_late_on(s, q)
    if how == "current":
        with torch.cuda.stream(s):
            o, lse = libflash.attention(q_late, k, v, causal=True, return_lse=True)
    else:
        o, lse = libflash.attention(q_late, k, v, causal=True, return_lse=True,
                                    stream=s if how == "object" else s.cuda_stream)
    s.synchronize()
    assert_close(o, lse, *sdpa_ref(q, k, v, causal=True), torch.float16)


@gpu
def test_many_streams_concurrently():
    g = torch.Generator().manual_seed(11)
    streams = [torch.cuda.Stream() for _ in range(4)]
    probs = [tuple(rand((1, 256 + 64 * i, 2, 64), torch.bfloat16, gen=g) for _ in range(3)) for i in range(4)]
    torch.cuda.synchronize()  # the inputs were made on the default stream
    outs = []
    for s, (q, k, v) in zip(streams, probs):
        with torch.cuda.stream(s):
            outs.append(libflash.attention(q, k, v, causal=True))
    torch.cuda.synchronize()
    for (q, k, v), o in zip(probs, outs):
        assert_close(o, None, sdpa_ref(q, k, v, causal=True)[0], None, torch.bfloat16)


# ---- GPU errors -------------------------------------------------------------------------------------------
@gpu
def test_gpu_errors():
    q = torch.randn(1, 64, 2, 64, device=DEV)
    with pytest.raises(FlashError) as e:
        libflash.attention(q, q.clone(), q.clone())
    assert e.value.status == capi.FLASH_ERROR_UNSUPPORTED_DTYPE
    qh = q.half()
    with pytest.raises(FlashError) as e:
        libflash.attention(qh, qh.cpu(), qh.clone())
    assert e.value.status == capi.FLASH_ERROR_DEVICE_MISMATCH
    with pytest.raises(FlashError) as e:
        libflash.attention(qh, qh.clone(), qh.clone().float().half()[..., :60])
    assert e.value.status in (capi.FLASH_ERROR_BAD_SHAPE,)
    wide = torch.randn(1, 64, 2, 128, device=DEV, dtype=torch.float16)
    with pytest.raises(FlashError) as e:
        libflash.attention(wide[..., ::2], qh.clone(), qh.clone())
    assert e.value.status == capi.FLASH_ERROR_BAD_STRIDE
    with pytest.raises(FlashError) as e:
        libflash.attention(qh[..., :12], qh[..., :12].clone(), qh[..., :12].clone())
    assert e.value.status == capi.FLASH_ERROR_UNSUPPORTED_HEAD_DIM


@gpu
def test_devices_lists_gpu():
    devs = libflash.devices()
    cuda = [d for d in devs if d.device_type == "cuda"]
    assert cuda and cuda[0].compute_capability >= (8, 0) and cuda[0].multiprocessors > 0
    assert cuda[0].name


# ---- FlashAttention-2 shim ----------------------------------------------------------------------------------
from libflash.torch import flash_attn_func, flash_attn_kvpacked_func, flash_attn_qkvpacked_func  # noqa: E402

SHIM_DEV = DEV if HAS_GPU else "cpu"
SHIM_DTYPE = torch.float16 if HAS_GPU else torch.float32


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("window_size", [(-1, -1), (32, 0), (16, 16)])
def test_flash_attn_func(causal, window_size):
    g = torch.Generator().manual_seed(12)
    q, k, v = rand((2, 200, 4, 64), SHIM_DTYPE, SHIM_DEV, g), rand((2, 300, 2, 64), SHIM_DTYPE, SHIM_DEV, g), \
        rand((2, 300, 2, 64), SHIM_DTYPE, SHIM_DEV, g)
    o = flash_attn_func(q, k, v, causal=causal, window_size=window_size)
    assert isinstance(o, torch.Tensor) and o.device == q.device and o.dtype == q.dtype
    ro, _ = sdpa_ref(q, k, v, causal=causal, alignment="bottom_right", window=window_size)
    assert_close(o, None, ro, None, SHIM_DTYPE)


def test_flash_attn_packed():
    g = torch.Generator().manual_seed(13)
    qkv = rand((2, 128, 3, 4, 64), SHIM_DTYPE, SHIM_DEV, g)
    o = flash_attn_qkvpacked_func(qkv, causal=True, softmax_scale=0.1)
    q, k, v = qkv.unbind(2)
    assert_close(o, None, sdpa_ref(q, k, v, softmax_scale=0.1, causal=True)[0], None, SHIM_DTYPE)
    o2 = flash_attn_kvpacked_func(q, qkv[:, :, 1:], causal=True, softmax_scale=0.1)
    assert_close(o2, None, sdpa_ref(q, k, v, softmax_scale=0.1, causal=True)[0], None, SHIM_DTYPE)


@pytest.mark.parametrize("kw", [dict(dropout_p=0.1), dict(softcap=30.0), dict(alibi_slopes="x"),
                                dict(return_attn_probs=True)])
def test_flash_attn_func_unsupported(kw):
    q = torch.zeros(1, 8, 1, 64, dtype=SHIM_DTYPE, device=SHIM_DEV)
    if "alibi_slopes" in kw:
        kw = dict(alibi_slopes=torch.zeros(1, device=SHIM_DEV))
    with pytest.raises(NotImplementedError):
        flash_attn_func(q, q, q, **kw)


def test_requires_grad_goes_through_autograd():
    """Inputs that require grad get a grad_fn (the backward is flash_bwd; see test_torch_backward.py)."""
    q = torch.randn(1, 8, 1, 64, dtype=SHIM_DTYPE, device=SHIM_DEV, requires_grad=True)
    k = torch.randn(1, 8, 1, 64, dtype=SHIM_DTYPE, device=SHIM_DEV)
    o = flash_attn_func(q, k, k)
    assert o.grad_fn is not None
    o2 = libflash.attention(q, k, k)
    assert o2.grad_fn is not None
    o.float().sum().backward()
    assert q.grad is not None and q.grad.shape == q.shape
    with torch.no_grad():
        assert flash_attn_func(q, k, k).grad_fn is None
        assert libflash.attention(q, k, k).grad_fn is None


# ---- CPU torch tensors (no GPU needed) -----------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_torch_cpu_tensors(dtype):
    g = torch.Generator().manual_seed(14)
    q, k, v = rand((2, 70, 4, 32), dtype, "cpu", g), rand((2, 90, 2, 32), dtype, "cpu", g), \
        rand((2, 90, 2, 32), dtype, "cpu", g)
    q = q.transpose(1, 2).contiguous().transpose(1, 2)  # strided
    o, lse = libflash.attention(q, k, v, causal=True, return_lse=True)
    assert isinstance(o, torch.Tensor) and o.device.type == "cpu" and o.dtype == dtype
    assert lse.dtype == torch.float32 and lse.shape == (2, 4, 70)
    ro, rlse = attention_ref(q.float().numpy(), k.float().numpy(), v.float().numpy(), causal=True)
    tol = {torch.float32: 2e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}[dtype]
    np.testing.assert_allclose(o.float().numpy(), ro, atol=tol, rtol=tol)
    np.testing.assert_allclose(lse.numpy(), rlse, atol=1e-4, rtol=1e-5)
