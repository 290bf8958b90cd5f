"""libflash.torch as torch.library custom ops (PyTorch >= 2.4): torch.ops.libflash.fwd / bwd / fwd_kvcache with fake
implementations and autograd, so that torch.compile(fullgraph=True) traces flash_attn_func (and the packed and KV-cache
functions) without a graph break, and CUDA-graph capture records them.

  - everywhere: the module imports and falls back (custom_op_available() False, the direct path) on an older torch;
  - torch >= 2.4 (CPU is enough): torch.library.opcheck of each op; the custom-op path bitwise equal to the direct
    path (forward and gradients); torch.compile(fullgraph=True) equal to eager (aot_eager on the CPU);
  - torch >= 2.4 with a CUDA GPU and a CUDA libflash: the same on the GPU with Inductor, gradients against float64 SDPA
    within the usual bound, CUDA-graph capture (direct and custom-op paths, forward + backward through
    make_graphed_callables, a KV-cache decode step) replayed bitwise equal to eager, and compile mode="reduce-overhead".
Skipped cleanly where the torch or the GPU is missing (this CI: torch 1.13 on a CPU)."""

import os

import pytest

torch = pytest.importorskip("torch")

import libflash  # noqa: E402
import libflash.torch as lt  # noqa: E402

HAS_OPS = lt.custom_op_available()
needs_ops = pytest.mark.skipif(not HAS_OPS, reason="no libflash custom ops: %s" % lt.custom_op_error)


def _cuda_ok():
    try:
        return torch.cuda.is_available() and libflash.device_count("cuda") > 0
    except Exception:
        return False


HAS_GPU = _cuda_ok()
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not HAS_GPU, reason="no CUDA device for torch, or a "
                                                                   "CPU-only libflash"))]


def dtype_for(device):
    return torch.float32 if device == "cpu" else torch.bfloat16


def qkv(device, b=2, sq=64, sk=64, hq=4, hkv=2, d=64, seed=0, requires_grad=False):
    g = torch.Generator().manual_seed(seed)
    mk = lambda *s: torch.randn(*s, generator=g).to(device=device, dtype=dtype_for(device))  # noqa: E731
    ts = (mk(b, sq, hq, d), mk(b, sk, hkv, d), mk(b, sk, hkv, d))
    return tuple(t.requires_grad_(requires_grad) for t in ts)


class mode:
    """with mode("always"): libflash.torch.custom_op_mode for the block."""

    def __init__(self, m):
        self.m = m

    def __enter__(self):
        self.saved, lt.custom_op_mode = lt.custom_op_mode, self.m

    def __exit__(self, *exc):
        lt.custom_op_mode = self.saved


def bitwise(a, b):
    assert a.dtype == b.dtype and a.shape == b.shape, (a.dtype, b.dtype, a.shape, b.shape)
    assert torch.equal(a, b), "max diff %g" % (a.float() - b.float()).abs().max().item()


# ---- Everywhere ---------------------------------------------------------------------------------------------------
def test_import_and_fallback_on_any_torch():
    assert lt.custom_op_available() == (hasattr(torch.library, "custom_op") and lt.custom_op_error is None)
    if not HAS_OPS:
        assert lt.custom_op_error
        assert not lt._use_custom_op(torch.zeros(1))
    q, k, v = qkv("cpu", b=1, sq=8, sk=8, hq=2, hkv=2, d=16, requires_grad=True)
    o = lt.flash_attn_func(q, k, v, causal=True)
    o.sum().backward()
    assert q.grad is not None and torch.isfinite(q.grad).all()
    assert lt.custom_op_mode in lt.CUSTOM_OP_MODES


# ---- torch >= 2.4, CPU or GPU -----------------------------------------------------------------------------------------
@needs_ops
@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device):
    q, k, v = qkv(device, sq=32, sk=48, requires_grad=True)
    torch.library.opcheck(torch.ops.libflash.fwd.default, (q, k, v, None, True, -1, -1, False))
    torch.library.opcheck(torch.ops.libflash.fwd.default, (q, k, v, 0.2, False, 8, 0, True))
    with torch.no_grad():
        o, lse = torch.ops.libflash.fwd(q, k, v, None, True, -1, -1, False)
    do = torch.randn_like(o)
    torch.library.opcheck(torch.ops.libflash.bwd.default, (do, q.detach(), k.detach(), v.detach(), o, lse, None, True,
                                                           -1, -1, True))
    b, hkv, d = 2, 2, 64
    kc = torch.zeros(b, 80, hkv, d, device=device, dtype=q.dtype)
    vc = torch.zeros_like(kc)
    lens = torch.tensor([3, 40], dtype=torch.int32, device=device)
    qn, kn, vn = (t.detach()[:, :1].contiguous() for t in (q, k, v))
    torch.library.opcheck(torch.ops.libflash.fwd_kvcache.default,
                          (qn, kc, vc, kn, vn, lens, None, None, None, True, -1, -1, 0),
                          test_utils=("test_schema", "test_faketensor"))


@needs_ops
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("packed", [None, "kv", "qkv"])
def test_custom_op_path_bitwise_equals_direct_path(device, packed):
    def run(m):
        q, k, v = qkv(device, requires_grad=True, hkv=4)
        with mode(m):
            if packed == "qkv":
                qkv_ = torch.stack((q, k, v), dim=2).detach().requires_grad_(True)
                o = lt.flash_attn_qkvpacked_func(qkv_, causal=True, deterministic=True)
                leaves = (qkv_,)
            elif packed == "kv":
                kv = torch.stack((k, v), dim=2).detach().requires_grad_(True)
                o = lt.flash_attn_kvpacked_func(q, kv, causal=True, deterministic=True)
                leaves = (q, kv)
            else:
                o = lt.flash_attn_func(q, k, v, causal=True, window_size=(16, 0), deterministic=True)
                leaves = (q, k, v)
        o.backward(torch.ones_like(o))
        return [o.detach()] + [x.grad for x in leaves]

    for a, b in zip(run("never"), run("always")):
        bitwise(a, b)


def _compile(fn, device):
    backend = "aot_eager" if device == "cpu" else "inductor"  # (Inductor on the CPU would need a C++ toolchain)
    torch._dynamo.reset()
    return torch.compile(fn, fullgraph=True, backend=backend)


@needs_ops
@pytest.mark.parametrize("device", DEVICES)
def test_compile_fullgraph_equals_eager(device):
    def f(q, k, v):
        o = lt.flash_attn_func(q * 2, k, v, causal=True, deterministic=True)
        return o * 3  # exact in any dtype: compiled and eager may be compared bit for bit

    cf = _compile(f, device)
    q, k, v = qkv(device, requires_grad=True)
    q2, k2, v2 = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    want = f(q, k, v)
    got = cf(q2, k2, v2)
    bitwise(got, want)
    g = torch.randn_like(want)
    want.backward(g)
    got.backward(g)
    for a, b in zip((q2, k2, v2), (q, k, v)):
        bitwise(a.grad, b.grad)
    explain = torch._dynamo.explain(f)(q, k, v)
    assert explain.graph_break_count == 0 and explain.graph_count == 1


@needs_ops
@pytest.mark.parametrize("device", DEVICES)
def test_compile_kvcache_decode_equals_eager(device):
    def step(q, kc, vc, k, v, lens):
        return lt.flash_attn_with_kvcache(q, kc, vc, k=k, v=v, cache_seqlens=lens, causal=True,
                                          return_softmax_lse=True)

    cstep = _compile(step, device)
    b, hq, hkv, d = 2, 4, 2, 64
    dt = dtype_for(device)
    g = torch.Generator().manual_seed(3)
    mk = lambda *s: torch.randn(*s, generator=g).to(device=device, dtype=dt)  # noqa: E731
    kc, vc = mk(b, 96, hkv, d), mk(b, 96, hkv, d)
    kc2, vc2 = kc.clone(), vc.clone()
    lens = torch.tensor([10, 50], dtype=torch.int32, device=device)
    with torch.no_grad():
        for i in range(3):
            q, k, v = mk(b, 1, hq, d), mk(b, 1, hkv, d), mk(b, 1, hkv, d)
            want = step(q, kc, vc, k, v, lens)
            got = cstep(q, kc2, vc2, k, v, lens)
            for a, w in zip(got, want):
                bitwise(a, w)
            bitwise(kc2, kc)
            bitwise(vc2, vc)
            lens += 1


# ---- torch >= 2.4 on a GPU ---------------------------------------------------------------------------------------
gpu = pytest.mark.skipif(not HAS_GPU, reason="no CUDA device for torch, or a CPU-only libflash")


@needs_ops
@gpu
def test_compiled_gradients_against_sdpa_float64():
    F = torch.nn.functional
    q, k, v = qkv("cuda", requires_grad=True, hq=4, hkv=4, sq=96, sk=96)
    cf = _compile(lambda q, k, v: lt.flash_attn_func(q, k, v, causal=True), "cuda")
    o = cf(q, k, v)
    do = torch.randn_like(o)
    o.backward(do)
    x64 = [t.detach().double().transpose(1, 2).requires_grad_(True) for t in (q, k, v)]
    ref = F.scaled_dot_product_attention(*x64, is_causal=True).transpose(1, 2)
    ref.backward(do.double())
    # The usual bound (test_torch_backward.py's GPU_TOL for bf16), relative to the largest reference value.
    tol = 6e-2
    for got, want in zip((q.grad, k.grad, v.grad), x64):
        w = want.grad.transpose(1, 2)
        err = (got.double() - w).abs().max().item()
        assert err <= tol * max(w.abs().max().item(), 1.0), err
    assert (o.double() - ref).abs().max().item() <= tol * max(ref.abs().max().item(), 1.0)


def _capture(fn, static_inputs):
    """(graph, static output) of fn(*static_inputs) captured after warm-up on a side stream (torch's recipe)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn(*static_inputs)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn(*static_inputs)
    return graph, out


@needs_ops
@gpu
@pytest.mark.parametrize("m", ["never", "always"])
def test_cuda_graph_forward_replay_bitwise(m):
    q, k, v = qkv("cuda")

    def f(q, k, v):
        with mode(m):
            return lt.flash_attn_func(q, k, v, causal=True, window_size=(32, 0))

    graph, out = _capture(f, (q, k, v))
    for seed in (1, 2):
        nq, nk, nv = qkv("cuda", seed=seed)
        q.copy_(nq), k.copy_(nk), v.copy_(nv)
        graph.replay()
        torch.cuda.synchronize()
        bitwise(out, f(nq, nk, nv))


@needs_ops
@gpu
@pytest.mark.parametrize("m", ["never", "always"])
def test_cuda_graph_forward_backward_replay_bitwise(m):
    class Attn(torch.nn.Module):
        def forward(self, q, k, v):
            with mode(m):
                return lt.flash_attn_func(q, k, v, causal=True, deterministic=True)

    sample = qkv("cuda", requires_grad=True)
    graphed = torch.cuda.make_graphed_callables(Attn(), sample)
    for seed in (4, 5):
        a = qkv("cuda", seed=seed, requires_grad=True)
        b = tuple(t.detach().clone().requires_grad_(True) for t in a)
        o1 = graphed(*a)
        o2 = Attn()(*b)
        do = torch.randn_like(o2)
        o1.backward(do)
        o2.backward(do)
        bitwise(o1, o2)
        for x, y in zip(a, b):
            bitwise(x.grad, y.grad)


@needs_ops
@gpu
@pytest.mark.parametrize("m", ["never", "always"])
def test_cuda_graph_kvcache_decode_replay_bitwise(m):
    b, hq, hkv, d = 2, 8, 2, 128
    g = torch.Generator().manual_seed(9)
    mk = lambda *s: torch.randn(*s, generator=g).to("cuda", torch.bfloat16)  # noqa: E731
    kc, vc = mk(b, 256, hkv, d), mk(b, 256, hkv, d)
    q, k, v = mk(b, 1, hq, d), mk(b, 1, hkv, d), mk(b, 1, hkv, d)
    lens = torch.tensor([7, 100], dtype=torch.int32, device="cuda")
    kc_ref, vc_ref, lens_ref = kc.clone(), vc.clone(), lens.clone()

    def step(q, k, v):
        with mode(m), torch.no_grad():
            o = lt.flash_attn_with_kvcache(q, kc, vc, k=k, v=v, cache_seqlens=lens, causal=True)
            lens.add_(1)
            return o

    graph, out = _capture(step, (q, k, v))
    # the warm-up calls appended tokens and moved lens: start again from the reference state
    kc.copy_(kc_ref), vc.copy_(vc_ref), lens.copy_(lens_ref)
    for _ in range(4):
        nq, nk, nv = mk(b, 1, hq, d), mk(b, 1, hkv, d), mk(b, 1, hkv, d)
        q.copy_(nq), k.copy_(nk), v.copy_(nv)
        graph.replay()
        torch.cuda.synchronize()
        with torch.no_grad():
            want = libflash.attention_with_kvcache(nq, kc_ref, vc_ref, k=nk, v=nv, cache_seqlens=lens_ref, causal=True)
        lens_ref += 1
        bitwise(out, want)
        bitwise(kc, kc_ref)
        bitwise(vc, vc_ref)


@needs_ops
@gpu
def test_compile_reduce_overhead_equals_eager():
    def f(q, k, v):
        return lt.flash_attn_func(q, k, v, causal=True)

    torch._dynamo.reset()
    cf = torch.compile(f, fullgraph=True, mode="reduce-overhead")
    for seed in range(4):
        q, k, v = qkv("cuda", seed=seed)
        got = cf(q, k, v).clone()
        bitwise(got, f(q, k, v))


def test_env_mode_is_read_at_import():
    import subprocess
    import sys

    code = "import libflash.torch as lt; print(lt.custom_op_mode)"
    pkg = os.path.dirname(os.path.dirname(os.path.abspath(libflash.__file__)))
    env = dict(os.environ, LIBFLASH_TORCH_CUSTOM_OP="ALWAYS", PYTHONPATH=pkg)
    if "LIBFLASH_PATH" not in env:
        env["LIBFLASH_PATH"] = libflash.library_path()
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == "always", r.stderr
    env["LIBFLASH_TORCH_CUSTOM_OP"] = "bogus"
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == "auto", r.stderr
