"""Gradients through PyTorch: libflash.torch.flash_attn_func (and the packed variants, and libflash.attention
on tensors that require grad) as a torch.autograd.Function, against autograd through a plain torch reference
in float64. CPU tensors (float32) need only torch; the GPU tests compare against torch SDPA in float64 and are
skipped without CUDA or with a CPU-only libflash. At the end, the same for packed variable-length batches
(flash_attn_varlen_func and its packed variants, libflash.attention with offsets). Skipped entirely when torch is
missing."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

import libflash  # noqa: E402
from libflash import FlashError, capi  # noqa: E402
from libflash.torch import (FlashAttnFunction, flash_attn_func, flash_attn_kvpacked_func,  # noqa: E402
                            flash_attn_qkvpacked_func, flash_attn_varlen_func, flash_attn_varlen_kvpacked_func,
                            flash_attn_varlen_qkvpacked_func)
from reference import visible  # noqa: E402


def _cuda_ok():
    try:
        return torch.cuda.is_available() and libflash.device_count("cuda") > 0
    except Exception:
        return False


HAS_GPU = _cuda_ok()
gpu = pytest.mark.skipif(not HAS_GPU, reason="no CUDA device for torch, or a CPU-only libflash")


def torch_ref(q, k, v, softmax_scale=None, **mask):
    """O in float64 by plain torch ops (differentiable), rows that see no key giving 0 (as libflash)."""
    b, sq, hq, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    qf = q.double().transpose(1, 2)
    kf = k.double().transpose(1, 2).repeat_interleave(hq // hkv, dim=1)
    vf = v.double().transpose(1, 2).repeat_interleave(hq // hkv, dim=1)
    scale = 1.0 / np.sqrt(d) if softmax_scale is None else softmax_scale
    ok = torch.from_numpy(np.ascontiguousarray(visible(sq, sk, **mask))).to(q.device)
    s = (qf @ kf.transpose(-1, -2)) * scale
    s = s.masked_fill(~ok, float("-inf"))
    p = torch.softmax(s, dim=-1)
    p = torch.where(ok.any(-1, keepdim=True), p, torch.zeros_like(p))  # all -inf rows: NaN -> 0
    return (p @ vf).transpose(1, 2)


def leaves(*shapes, dtype=torch.float32, device="cpu", seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=g, dtype=torch.float32).to(device=device, dtype=dtype).requires_grad_(True)
            for s in shapes]


def ref_grads(inputs, do, **kw):
    """Gradients of sum(O * dO) through torch_ref in float64, with respect to float64 copies of inputs."""
    xs = [x.detach().double().requires_grad_(True) for x in inputs]
    o = torch_ref(*xs, **kw)
    o.backward(do.double())
    return o.detach(), [x.grad for x in xs]


def assert_grads(got, want, tol):
    for name, g, w in zip(("dq", "dk", "dv"), got, want):
        assert g is not None, name
        assert torch.isfinite(g).all(), "NaN/inf in " + name
        bound = tol * max(1.0, w.abs().max().item())
        err = (g.double() - w).abs().max().item()
        assert err <= bound, "max |%s - ref| = %.3g > %.3g" % (name, err, bound)


# ---- CPU ---------------------------------------------------------------------------------------------------
CPU_TOL = 5e-5


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("window_size", [(-1, -1), (32, 0), (16, 16), (5, 40)])
@pytest.mark.parametrize("shape", [(2, 100, 150, 4, 2, 64), (1, 150, 60, 3, 1, 32), (1, 33, 33, 2, 2, 128)])
def test_flash_attn_func_grads_cpu(causal, window_size, shape):
    b, sq, sk, hq, hkv, d = shape
    q, k, v = leaves((b, sq, hq, d), (b, sk, hkv, d), (b, sk, hkv, d), seed=sq + sk)
    o = flash_attn_func(q, k, v, causal=causal, window_size=window_size)
    assert o.grad_fn is not None and o.dtype == torch.float32
    do = torch.randn(o.shape, generator=torch.Generator().manual_seed(1))
    o.backward(do)
    ro, rg = ref_grads((q, k, v), do, causal=causal, alignment="bottom_right", window=window_size)
    torch.testing.assert_close(o.detach().double(), ro, atol=2e-5, rtol=2e-5)
    assert_grads((q.grad, k.grad, v.grad), rg, CPU_TOL)
    assert q.grad.shape == q.shape and k.grad.shape == k.shape


def test_softmax_scale_and_loss_through_sum():
    """A scalar loss: autograd hands the backward an expanded (stride-0) dO, which is made contiguous."""
    q, k, v = leaves((1, 40, 2, 32), (1, 50, 2, 32), (1, 50, 2, 32), seed=3)
    (flash_attn_func(q, k, v, softmax_scale=0.2) ** 1).sum().backward()
    _, rg = ref_grads((q, k, v), torch.ones(1, 40, 2, 32), softmax_scale=0.2)
    assert_grads((q.grad, k.grad, v.grad), rg, CPU_TOL)


def test_only_some_inputs_require_grad():
    q, k, v = leaves((1, 30, 2, 32), (1, 30, 2, 32), (1, 30, 2, 32), seed=4)
    k = k.detach()
    flash_attn_func(q, k, v, causal=True).sum().backward()
    assert k.grad is None and q.grad is not None and v.grad is not None
    _, rg = ref_grads((q, k, v), torch.ones(1, 30, 2, 32), causal=True)
    assert_grads((q.grad, None, v.grad)[::2], rg[::2], CPU_TOL)


def test_packed_variants_get_gradients():
    g = torch.Generator().manual_seed(5)
    qkv = torch.randn(2, 64, 3, 4, 32, generator=g).requires_grad_(True)
    do = torch.randn(2, 64, 4, 32, generator=g)
    flash_attn_qkvpacked_func(qkv, causal=True, softmax_scale=0.1).backward(do)
    _, rg = ref_grads(qkv.detach().unbind(2), do, causal=True, softmax_scale=0.1)
    assert qkv.grad.shape == qkv.shape
    assert_grads(qkv.grad.unbind(2), rg, CPU_TOL)

    q = torch.randn(2, 50, 4, 32, generator=g).requires_grad_(True)
    kv = torch.randn(2, 64, 2, 2, 32, generator=g).requires_grad_(True)
    do = torch.randn(2, 50, 4, 32, generator=g)
    flash_attn_kvpacked_func(q, kv, window_size=(8, 8)).backward(do)
    _, rg = ref_grads((q, kv[:, :, 0], kv[:, :, 1]), do, window=(8, 8))
    assert kv.grad.shape == kv.shape
    assert_grads((q.grad, kv.grad[:, :, 0], kv.grad[:, :, 1]), rg, CPU_TOL)


def test_attention_with_requires_grad_goes_through_autograd():
    q, k, v = leaves((1, 70, 4, 32), (1, 90, 2, 32), (1, 90, 2, 32), seed=6)
    o, lse = libflash.attention(q, k, v, causal=True, causal_alignment="top_left", return_lse=True)
    assert o.grad_fn is not None and not lse.requires_grad
    do = torch.randn(o.shape, generator=torch.Generator().manual_seed(7))
    o.backward(do)
    _, rg = ref_grads((q, k, v), do, causal=True, alignment="top_left")
    assert_grads((q.grad, k.grad, v.grad), rg, CPU_TOL)
    with pytest.raises(RuntimeError, match="out="):
        libflash.attention(q, k, v, out=torch.empty(1, 70, 4, 32))
    with torch.no_grad():  # no autograd: out= is fine
        libflash.attention(q, k, v, out=torch.empty(1, 70, 4, 32))


def test_attention_block_mask_under_autograd():
    q, k, v = leaves((2, 200, 2, 32), (2, 260, 2, 32), (2, 260, 2, 32), seed=8)
    m = np.random.default_rng(8).random((2, 1, 4, 3)) < 0.5
    o = libflash.attention(q, k, v, block_mask=m, block_size=(64, 128))
    do = torch.randn(o.shape, generator=torch.Generator().manual_seed(9))
    o.backward(do)
    _, rg = ref_grads((q, k, v), do, block_map=m, block=(64, 128))
    assert_grads((q.grad, k.grad, v.grad), rg, CPU_TOL)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_cpu_grads(dtype):
    q, k, v = leaves((1, 60, 4, 64), (1, 80, 2, 64), (1, 80, 2, 64), dtype=dtype, seed=10)
    o = flash_attn_func(q, k, v, causal=True)
    do = torch.randn(o.shape, generator=torch.Generator().manual_seed(11)).to(dtype)
    o.backward(do)
    assert q.grad.dtype == dtype
    _, rg = ref_grads((q, k, v), do, causal=True)
    assert_grads((q.grad, k.grad, v.grad), rg, {torch.float16: 6e-3, torch.bfloat16: 5e-2}[dtype])


def test_deterministic_bitwise_equal_across_runs():
    runs = []
    for _ in range(3):
        q, k, v = leaves((2, 130, 8, 64), (2, 150, 2, 64), (2, 150, 2, 64), seed=12)
        flash_attn_func(q, k, v, causal=True, deterministic=True).sum().backward()
        runs.append((q.grad, k.grad, v.grad))
    for r in runs[1:]:
        assert all(torch.equal(a, b) for a, b in zip(runs[0], r))


def test_gradcheck_float64_reference_vs_float32_flash():
    """torch.autograd.gradcheck's own idea, run by hand: the analytical gradient of flash_attn_func (float32)
    against central finite differences of the float64 reference, on a few entries of each input."""
    q, k, v = leaves((1, 9, 2, 8), (1, 11, 1, 8), (1, 11, 1, 8), seed=13)
    w = torch.randn(1, 9, 2, 8, generator=torch.Generator().manual_seed(14))
    (flash_attn_func(q, k, v, causal=True) * w).sum().backward()
    base = [x.detach().double() for x in (q, k, v)]
    eps = 1e-6
    rng = np.random.default_rng(15)
    for which, grad in enumerate((q.grad, k.grad, v.grad)):
        for _ in range(6):
            idx = tuple(int(rng.integers(0, n)) for n in base[which].shape)
            plus = [x.clone() for x in base]
            minus = [x.clone() for x in base]
            plus[which][idx] += eps
            minus[which][idx] -= eps
            fd = ((torch_ref(*plus, causal=True) - torch_ref(*minus, causal=True)) * w.double()).sum() / (2 * eps)
            assert abs(grad[idx].item() - fd.item()) <= 1e-4 * max(1.0, abs(fd.item())), (which, idx)


def test_torch_gradcheck_float64_inputs_are_refused_cleanly():
    """float64 is not a libflash dtype: the autograd path raises FlashError, not a crash."""
    q = torch.randn(1, 8, 1, 8, dtype=torch.float64, requires_grad=True)
    with pytest.raises(FlashError) as e:
        flash_attn_func(q, q, q)
    assert e.value.status == capi.FLASH_ERROR_UNSUPPORTED_DTYPE


def test_autograd_function_is_public():
    q, k, v = leaves((1, 16, 1, 16), (1, 16, 1, 16), (1, 16, 1, 16), seed=16)
    o, lse = FlashAttnFunction.apply(q, k, v, dict(causal=True))
    assert o.grad_fn is not None and lse.shape == (1, 1, 16)


@pytest.mark.parametrize("kw", [dict(), dict(causal=True, window_size=(8, 0), deterministic=True),
                                dict(softmax_scale=0.3), dict(window_size=[4, 4])])
def test_flash_attn_func_autograd_is_flash_attn_function_bitwise(kw):
    """flash_attn_func's own (leaner) autograd Function gives bitwise the output and gradients of FlashAttnFunction,
    the general one libflash.attention uses, for the same options (and non-contiguous inputs)."""
    q, k, v = leaves((2, 24, 4, 32), (2, 40, 2, 32), (2, 40, 2, 32), seed=7)
    opts = dict(causal=kw.get("causal", False), causal_alignment="bottom_right",
                window=tuple(kw.get("window_size", (-1, -1))), softmax_scale=kw.get("softmax_scale"),
                deterministic=kw.get("deterministic", False))
    do = torch.randn(2, 24, 4, 32, generator=torch.Generator().manual_seed(3))
    results = []
    for run in (lambda a, b, c: flash_attn_func(a, b, c, **kw), lambda a, b, c: FlashAttnFunction.apply(a, b, c,
                                                                                                      opts)[0]):
        xs = [x.detach().transpose(1, 2).contiguous().transpose(1, 2).requires_grad_(True) for x in (q, k, v)]
        o = run(*xs)
        o.backward(do)
        results.append([o.detach()] + [x.grad for x in xs])
    for a, b in zip(*results):
        assert torch.equal(a, b)


def test_attention_backward_on_torch_cpu_tensors():
    q, k, v = (x.detach() for x in leaves((1, 40, 4, 32), (1, 50, 2, 32), (1, 50, 2, 32), seed=17))
    o, lse = libflash.attention(q, k, v, return_lse=True)
    do = torch.randn(o.shape, generator=torch.Generator().manual_seed(18))
    dq, dk, dv = libflash.attention_backward(q, k, v, o, do, lse)
    assert all(isinstance(t, torch.Tensor) and t.device.type == "cpu" for t in (dq, dk, dv))
    _, rg = ref_grads((q, k, v), do)
    assert_grads((dq, dk, dv), rg, CPU_TOL)


# ---- GPU ---------------------------------------------------------------------------------------------------
GPU_TOL = {torch.float16: 1e-2, torch.bfloat16: 6e-2}


def sdpa_grads(inputs, do, softmax_scale=None, **mask):
    """O and gradients in float64 from torch SDPA (math path) with an explicit boolean mask."""
    q, k, v = [x.detach().double().requires_grad_(True) for x in inputs]
    b, sq, hq, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    ok = torch.from_numpy(np.ascontiguousarray(visible(sq, sk, **mask))).to(q.device)
    kf = k.transpose(1, 2).repeat_interleave(hq // hkv, dim=1)
    vf = v.transpose(1, 2).repeat_interleave(hq // hkv, dim=1)
    qf = q.transpose(1, 2)
    if softmax_scale is not None:
        qf = qf * (softmax_scale * np.sqrt(d))
    # Rows that see no key: O = 0 and no gradient in libflash, NaN in SDPA (also in its backward). Give SDPA
    # every key on those rows and zero their output, which zeroes their gradient without any NaN.
    row_sees = ok.any(-1, keepdim=True)
    mask = ok | ~row_sees
    if hasattr(F, "scaled_dot_product_attention"):
        o = F.scaled_dot_product_attention(qf, kf, vf, attn_mask=mask) * row_sees
    else:  # torch < 2.0 (only to exercise this helper on a CPU machine): the same math by hand
        o = torch.softmax((qf @ kf.transpose(-1, -2) / np.sqrt(d)).masked_fill(~mask, float("-inf")), -1) @ vf
        o = o * row_sees
    o = o.transpose(1, 2)
    o.backward(do.double())
    return o.detach(), [x.grad for x in (q, k, v)]


@gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("seed", range(8))
def test_gpu_grads_vs_sdpa(dtype, seed):
    rng = np.random.default_rng(seed)
    b = int(rng.integers(1, 3))
    sq, sk = int(rng.integers(1, 600)), int(rng.integers(1, 600))
    hkv = int(rng.choice([1, 2]))
    hq = hkv * int(rng.choice([1, 2, 4]))
    d = int(rng.choice([32, 64, 96, 128, 256]))
    causal = bool(rng.integers(0, 2))
    window = [(-1, -1), (int(rng.integers(0, 300)), int(rng.integers(-1, 50)))][int(rng.integers(0, 2))]
    q, k, v = leaves((b, sq, hq, d), (b, sk, hkv, d), (b, sk, hkv, d), dtype=dtype, device="cuda", seed=seed)
    o = flash_attn_func(q, k, v, causal=causal, window_size=window)
    do = torch.randn(o.shape, generator=torch.Generator().manual_seed(seed + 100)).to("cuda", dtype)
    o.backward(do)
    torch.cuda.synchronize()
    _, rg = sdpa_grads((q, k, v), do, causal=causal, window=window)
    assert q.grad.device == q.device and q.grad.dtype == dtype
    assert_grads((q.grad, k.grad, v.grad), rg, GPU_TOL[dtype])


@gpu
@pytest.mark.parametrize("alignment", ["bottom_right", "top_left"])
def test_gpu_attention_backward_direct(alignment):
    q, k, v = (x.detach() for x in leaves((2, 300, 8, 128), (2, 257, 2, 128), (2, 257, 2, 128),
                                           dtype=torch.bfloat16, device="cuda", seed=20))
    o, lse = libflash.attention(q, k, v, causal=True, causal_alignment=alignment, softmax_scale=0.07,
                                return_lse=True)
    do = torch.randn(o.shape, generator=torch.Generator().manual_seed(21)).to("cuda", torch.bfloat16)
    dq, dk, dv = libflash.attention_backward(q, k, v, o, do, lse, causal=True, causal_alignment=alignment,
                                             softmax_scale=0.07)
    torch.cuda.synchronize()
    _, rg = sdpa_grads((q, k, v), do, softmax_scale=0.07, causal=True, alignment=alignment)
    assert_grads((dq, dk, dv), rg, GPU_TOL[torch.bfloat16])


@gpu
def test_gpu_block_mask_and_packed():
    g = torch.Generator().manual_seed(22)
    qkv = torch.randn(1, 384, 3, 4, 64, generator=g).to("cuda", torch.float16).requires_grad_(True)
    do = torch.randn(1, 384, 4, 64, generator=g).to("cuda", torch.float16)
    flash_attn_qkvpacked_func(qkv, causal=True).backward(do)
    torch.cuda.synchronize()
    _, rg = sdpa_grads(qkv.detach().unbind(2), do, causal=True)
    assert_grads(qkv.grad.unbind(2), rg, GPU_TOL[torch.float16])
    q, k, v = leaves((1, 300, 4, 64), (1, 400, 2, 64), (1, 400, 2, 64), dtype=torch.float16, device="cuda", seed=23)
    m = torch.rand((1, 4, 3, 4), generator=g) < 0.5
    o = libflash.attention(q, k, v, block_mask=m.cuda(), block_size=128)
    o.backward(do[:, :300])
    torch.cuda.synchronize()
    _, rg = sdpa_grads((q, k, v), do[:, :300], block_map=m.numpy(), block=(128, 128))
    assert_grads((q.grad, k.grad, v.grad), rg, GPU_TOL[torch.float16])


@gpu
def test_gpu_deterministic_bitwise_equal_across_runs():
    runs = []
    for _ in range(3):
        q, k, v = leaves((2, 1000, 8, 64), (2, 1000, 2, 64), (2, 1000, 2, 64), dtype=torch.bfloat16, device="cuda",
                         seed=24)
        flash_attn_func(q, k, v, causal=True, deterministic=True).float().sum().backward()
        runs.append((q.grad.clone(), k.grad.clone(), v.grad.clone()))
    torch.cuda.synchronize()
    for r in runs[1:]:
        assert all(torch.equal(a, b) for a, b in zip(runs[0], r))


@gpu
def test_gpu_backward_on_a_side_stream():
    """The backward runs on the stream autograd calls it on (the forward's): here a side stream."""
    s = torch.cuda.Stream()
    q, k, v = leaves((1, 512, 4, 64), (1, 512, 4, 64), (1, 512, 4, 64), dtype=torch.float16, device="cuda", seed=25)
    do = torch.randn(1, 512, 4, 64, generator=torch.Generator().manual_seed(26)).to("cuda", torch.float16)
    torch.cuda.synchronize()
    with torch.cuda.stream(s):
        o = flash_attn_func(q, k, v, causal=True)
        o.backward(do)
    s.synchronize()
    _, rg = sdpa_grads((q, k, v), do, causal=True)
    assert_grads((q.grad, k.grad, v.grad), rg, GPU_TOL[torch.float16])


# ---- Packed variable-length batches (flash_attn_varlen_func) ---------------------------------------------------
# Each sequence against a dense call of it (forward and gradients; bitwise on the CPU, where the library runs each
# sequence exactly as that call) and against the float64 reference; on a GPU against the reference within GPU_TOL.
def varlen_leaves(lens_q, lens_k, hq, hkv, d, dtype=torch.float32, device="cpu", seed=0):
    cu_q = torch.tensor([0] + list(np.cumsum(lens_q)), dtype=torch.int32, device=device)
    cu_k = torch.tensor([0] + list(np.cumsum(lens_k)), dtype=torch.int32, device=device)
    q, k, v = leaves((int(cu_q[-1]), hq, d), (int(cu_k[-1]), hkv, d), (int(cu_k[-1]), hkv, d), dtype=dtype,
                     device=device, seed=seed)
    return q, k, v, cu_q, cu_k


def per_sequence(q, k, v, cu_q, cu_k, o, do, grads, tol=None, bitwise=True, seqused_k=None, **kw):
    """Every sequence's rows of o and of the gradients against flash_attn_func on that sequence alone (bitwise) or,
    with tol, against the float64 reference."""
    cq, ck = cu_q.tolist(), cu_k.tolist()
    for i in range(len(cq) - 1):
        rows = slice(cq[i], cq[i + 1])
        sk = ck[i + 1] - ck[i] if seqused_k is None else int(seqused_k[i])
        keys = slice(ck[i], ck[i] + sk)
        if rows.start == rows.stop:
            assert not grads[1][keys].any() and not grads[2][keys].any(), i
            continue
        if sk == 0:
            assert not o[rows].any() and not grads[0][rows].any(), i
            continue
        xs = [x.detach()[sl][None].clone().requires_grad_(True) for x, sl in ((q, rows), (k, keys), (v, keys))]
        if bitwise:
            od = flash_attn_func(*xs, **kw)
            od.backward(do[rows][None])
            assert torch.equal(o[rows], od[0].detach()), i
            for name, g, x, sl in zip(("dq", "dk", "dv"), grads, xs, (rows, keys, keys)):
                assert torch.equal(g[sl], x.grad[0]), (name, i)
        if tol is not None:
            mask = dict(causal=kw.get("causal", False), window=kw.get("window_size", (-1, -1)))
            ro, rg = sdpa_grads(xs, do[rows][None], softmax_scale=kw.get("softmax_scale"), **mask)
            assert (o[rows].double() - ro[0]).abs().max().item() <= tol * max(1.0, ro.abs().max().item()), i
            assert_grads([g[sl][None] for g, sl in zip(grads, (rows, keys, keys))], rg, tol)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("window_size", [(-1, -1), (3, 1)])
def test_varlen_func_per_sequence_cpu(causal, window_size):
    lens_q, lens_k = [0, 1, 6, 1, 40, 0, 13], [4, 1, 0, 9, 33, 0, 13]
    q, k, v, cu_q, cu_k = varlen_leaves(lens_q, lens_k, hq=4, hkv=2, d=32, seed=72)
    o = flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(lens_q), max(lens_k), causal=causal, window_size=window_size)
    assert o.shape == q.shape and o.grad_fn is not None
    do = torch.randn(o.shape, generator=torch.Generator().manual_seed(1))
    o.backward(do)
    per_sequence(q, k, v, cu_q, cu_k, o.detach(), do, (q.grad, k.grad, v.grad), tol=CPU_TOL, causal=causal,
                 window_size=window_size)


@pytest.mark.parametrize("seed", range(3))
def test_varlen_func_random_mixes_gqa_cpu(seed):
    rng = np.random.default_rng(seed + 72)
    b = int(rng.integers(1, 6))
    lens_q, lens_k = [int(x) for x in rng.integers(0, 50, b)], [int(x) for x in rng.integers(0, 50, b)]
    hkv = int(rng.choice([1, 2]))
    hq = hkv * int(rng.choice([1, 3]))
    q, k, v, cu_q, cu_k = varlen_leaves(lens_q, lens_k, hq=hq, hkv=hkv, d=16, seed=seed)
    # max_seqlen None: computed from the offsets (once: the backward reuses it).
    o = flash_attn_varlen_func(q, k, v, cu_q, cu_k, None, None, causal=True, softmax_scale=0.2, deterministic=True)
    do = torch.randn(o.shape, generator=torch.Generator().manual_seed(seed))
    o.backward(do)
    per_sequence(q, k, v, cu_q, cu_k, o.detach(), do, (q.grad, k.grad, v.grad), causal=True, softmax_scale=0.2)


def test_varlen_packed_variants_cpu():
    g = torch.Generator().manual_seed(3)
    cu = torch.tensor([0, 5, 5, 17, 18], dtype=torch.int32)
    qkv = torch.randn(18, 3, 2, 16, generator=g).requires_grad_(True)
    do = torch.randn(18, 2, 16, generator=g)
    o = flash_attn_varlen_qkvpacked_func(qkv, cu, 12, causal=True)
    o.backward(do)
    q, k, v = (x.detach().clone().requires_grad_(True) for x in qkv.unbind(1))
    o2 = flash_attn_varlen_func(q, k, v, cu, cu, 12, 12, causal=True)
    o2.backward(do)
    assert torch.equal(o, o2) and qkv.grad.shape == qkv.shape
    assert torch.equal(qkv.grad, torch.stack((q.grad, k.grad, v.grad), dim=1))

    cu_k = torch.tensor([0, 7, 9, 9, 30], dtype=torch.int32)
    q = torch.randn(18, 4, 16, generator=g).requires_grad_(True)
    kv = torch.randn(30, 2, 2, 16, generator=g).requires_grad_(True)
    o = flash_attn_varlen_kvpacked_func(q, kv, cu, cu_k, 12, 21, window_size=(4, 4))
    o.backward(do.repeat(1, 2, 1))
    k, v = (x.detach().clone().requires_grad_(True) for x in kv.unbind(1))
    q2 = q.detach().clone().requires_grad_(True)
    o2 = flash_attn_varlen_func(q2, k, v, cu, cu_k, 12, 21, window_size=(4, 4))
    o2.backward(do.repeat(1, 2, 1))
    assert torch.equal(o, o2) and torch.equal(q.grad, q2.grad) and kv.grad.shape == kv.shape
    assert torch.equal(kv.grad, torch.stack((k.grad, v.grad), dim=1))


def test_varlen_attention_under_autograd_with_seqused_k():
    """libflash.attention() with offsets on tensors that require grad: the autograd Function carries the offsets,
    seqused_k and the lengths into the backward; the unused keys of a slot get no gradient."""
    q, k, v, cu_q, cu_k = varlen_leaves([3, 8, 0, 1], [6, 8, 5, 4], hq=2, hkv=1, d=16, seed=4)
    used = torch.tensor([2, 8, 5, 0], dtype=torch.int32)
    o, lse = libflash.attention(q, k, v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k.long(), seqused_k=used, causal=True,
                                return_lse=True)
    assert o.grad_fn is not None and not lse.requires_grad and lse.shape == (2, 12)
    do = torch.randn(o.shape, generator=torch.Generator().manual_seed(5))
    o.backward(do)
    per_sequence(q, k, v, cu_q, cu_k, o.detach(), do, (q.grad, k.grad, v.grad), tol=CPU_TOL, seqused_k=used,
                 causal=True)
    for i, u in enumerate(used.tolist()):
        unused = slice(int(cu_k[i]) + u, int(cu_k[i + 1]))
        assert not k.grad[unused].any() and not v.grad[unused].any()
    # The same through attention_backward directly, on torch CPU tensors.
    g = libflash.attention_backward(q.detach(), k.detach(), v.detach(), o.detach(), do, lse, cu_seqlens_q=cu_q,
                                    cu_seqlens_k=cu_k, seqused_k=used, causal=True)
    assert all(torch.equal(a, b) for a, b in zip(g, (q.grad, k.grad, v.grad)))


def test_varlen_half_precision_cpu():
    for dtype in (torch.float16, torch.bfloat16):
        q, k, v, cu_q, cu_k = varlen_leaves([9, 0, 20], [9, 3, 25], hq=2, hkv=2, d=32, dtype=dtype, seed=8)
        o = flash_attn_varlen_func(q, k, v, cu_q, cu_k, 20, 25, causal=True)
        do = torch.randn(o.shape, generator=torch.Generator().manual_seed(9)).to(dtype)
        o.backward(do)
        assert o.dtype == dtype and q.grad.dtype == dtype
        per_sequence(q, k, v, cu_q, cu_k, o.detach(), do, (q.grad, k.grad, v.grad), causal=True)


def test_varlen_signatures_are_flash_attn_2s():
    import inspect

    from libflash.torch import flash_attn_varlen_kvpacked_func as kvp
    from libflash.torch import flash_attn_varlen_qkvpacked_func as qkvp

    common = ["dropout_p", "softmax_scale", "causal", "window_size", "softcap", "alibi_slopes", "deterministic",
              "return_attn_probs"]
    assert list(inspect.signature(flash_attn_varlen_func).parameters) == [
        "q", "k", "v", "cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q", "max_seqlen_k"] + common + ["block_table"]
    assert list(inspect.signature(kvp).parameters) == [
        "q", "kv", "cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q", "max_seqlen_k"] + common
    assert list(inspect.signature(qkvp).parameters) == ["qkv", "cu_seqlens", "max_seqlen"] + common


def test_varlen_unsupported_and_refused():
    q, k, v, cu_q, cu_k = varlen_leaves([3, 4], [3, 4], hq=2, hkv=2, d=16)
    for kw, needle in ((dict(dropout_p=0.1), "dropout_p"), (dict(return_attn_probs=True), "return_attn_probs"),
                       (dict(block_table=torch.zeros(2, 1, dtype=torch.int32)), "block_table"),
                       (dict(softcap=5.0), "softcap")):
        with pytest.raises(NotImplementedError, match=needle):
            flash_attn_varlen_func(q, k, v, cu_q, cu_k, 4, 4, **kw)
    with pytest.raises(FlashError, match="cu_seqlens_q has dtype float32") as ei:
        flash_attn_varlen_func(q, k, v, cu_q.float(), cu_k, 4, 4)
    assert ei.value.status == capi.FLASH_ERROR_UNSUPPORTED_DTYPE
    with pytest.raises(FlashError, match="max_seqlen_q is 3 but a sequence has 4 queries") as ei:
        flash_attn_varlen_func(q, k, v, cu_q, cu_k, 3, 4)
    with pytest.raises(FlashError, match=r"cu_seqlens_k\[2\] is 9 but k has 7 rows") as ei:
        flash_attn_varlen_func(q, k, v, cu_q, torch.tensor([0, 3, 9], dtype=torch.int32), 4, 6)
    assert ei.value.status == capi.FLASH_ERROR_INVALID_ARGUMENT
    with pytest.raises(FlashError, match="q.ndim is 4 but must be 3"):
        flash_attn_varlen_func(q[None], k[None], v[None], cu_q, cu_k, 4, 4)


# -- GPU --
def gpu_varlen(fn, *a, **kw):
    """fn's result, or a skip while the library refuses varlen on the GPU (flash.h: the CUDA algorithms read the
    offsets once their kernels are built; issue 72)."""
    try:
        return fn(*a, **kw)
    except FlashError as e:
        if e.status == capi.FLASH_ERROR_UNSUPPORTED and "varlen" in e.message:
            pytest.skip("this libflash refuses varlen on the GPU: %s" % e.message)
        raise


@gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("causal", [False, True])
def test_gpu_varlen_func_vs_reference(dtype, causal):
    rng = np.random.default_rng(int(causal) + 2 * (dtype == torch.bfloat16))
    lens_q = [0, 1, 300, 17, 1000, 1, 64] + [int(x) for x in rng.integers(0, 700, 5)]
    lens_k = [5, 1, 300, 0, 900, 130, 64] + [int(x) for x in rng.integers(0, 700, 5)]
    q, k, v, cu_q, cu_k = varlen_leaves(lens_q, lens_k, hq=8, hkv=2, d=128, dtype=dtype, device="cuda", seed=3)
    o = gpu_varlen(flash_attn_varlen_func, q, k, v, cu_q, cu_k, max(lens_q), max(lens_k), causal=causal)
    do = torch.randn(o.shape, generator=torch.Generator().manual_seed(4)).to("cuda", dtype)
    o.backward(do)
    torch.cuda.synchronize()
    per_sequence(q, k, v, cu_q, cu_k, o.detach(), do, (q.grad, k.grad, v.grad), tol=GPU_TOL[dtype], bitwise=False,
                 causal=causal)


@gpu
def test_gpu_varlen_offsets_forms_and_packed():
    q, k, v, cu_q, cu_k = varlen_leaves([40, 0, 129], [64, 7, 129], hq=4, hkv=4, d=64, dtype=torch.float16,
                                        device="cuda", seed=5)
    want = gpu_varlen(libflash.attention, q.detach(), k.detach(), v.detach(), cu_seqlens_q=cu_q, cu_seqlens_k=cu_k,
                      max_seqlen_q=129, max_seqlen_k=129, causal=True)
    # Host offsets (a list, numpy) are checked and copied to q's device; max_seqlen from host data or one copy back.
    for kw in (dict(cu_seqlens_q=cu_q.tolist(), cu_seqlens_k=cu_k.cpu().numpy()), dict(cu_seqlens_q=cu_q,
                                                                                          cu_seqlens_k=cu_k)):
        assert torch.equal(libflash.attention(q.detach(), k.detach(), v.detach(), causal=True, **kw), want)
    with pytest.raises(FlashError, match="GPU varlen arrays must be int32") as ei:
        libflash.attention(q.detach(), k.detach(), v.detach(), cu_seqlens_q=cu_q.long(), cu_seqlens_k=cu_k)
    assert ei.value.status == capi.FLASH_ERROR_UNSUPPORTED_DTYPE
    with pytest.raises(FlashError, match="varlen arrays live on q's device") as ei:
        libflash.attention(q.detach(), k.detach(), v.detach(), cu_seqlens_q=cu_q.cpu(), cu_seqlens_k=cu_k)
    assert ei.value.status == capi.FLASH_ERROR_DEVICE_MISMATCH
    with pytest.raises(FlashError, match="cu_seqlens_q\\[2\\] is 30, less than") as ei:
        libflash.attention(q.detach(), k.detach(), v.detach(), cu_seqlens_q=[0, 40, 30, 169], cu_seqlens_k=cu_k)
    qkv = torch.stack((q, q, q), dim=1).detach().requires_grad_(True)
    o = flash_attn_varlen_qkvpacked_func(qkv, cu_q, 129, causal=True)
    o.sum().backward()
    assert qkv.grad.shape == qkv.shape and torch.isfinite(qkv.grad).all()
