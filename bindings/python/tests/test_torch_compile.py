"""libflash.torch as torch.library custom ops (PyTorch >= 2.4): torch.ops.libflash.fwd / bwd / fwd_kvcache with fake
implementations and autograd, so that torch.compile(fullgraph=True) traces flash_attn_func (and the packed and KV-cache
functions) without a graph break, and CUDA-graph capture records them.

  - everywhere: the module imports and falls back (custom_op_available() False, the direct path) on an older torch;
  - torch >= 2.4 (CPU is enough): torch.library.opcheck of each op; the custom-op path bitwise equal to the direct
    path (forward and gradients); torch.compile(fullgraph=True) equal to eager (aot_eager on the CPU);
  - the same for packed variable-length batches (torch.ops.libflash.varlen_fwd / varlen_bwd, flash_attn_varlen_func
    and its packed variants), with a CUDA-graph replay on a GPU;
  - torch >= 2.4 with a CUDA GPU and a CUDA libflash: the same on the GPU with Inductor, gradients against float64 SDPA
    within the usual bound, CUDA-graph capture (direct and custom-op paths, forward + backward through
    make_graphed_callables, a KV-cache decode step) replayed bitwise equal to eager, and compile mode="reduce-overhead".
Skipped cleanly where the torch or the GPU is missing (this CI: torch 1.13 on a CPU).

The second half of the file: libflash as PyTorch's SDPA flash-attention implementation (PyTorch >= 2.11; see
the comment there)."""

import itertools
import math
import os

import pytest

torch = pytest.importorskip("torch")

import libflash  # noqa: E402
import libflash.torch as lt  # noqa: E402
from libflash import _attention  # noqa: E402

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



# ---- Packed variable-length batches: torch.ops.libflash.varlen_fwd / varlen_bwd ----------------------------------
def varlen_inputs(device, lens_q=(5, 0, 33, 1, 20), lens_k=(7, 3, 33, 0, 41), hq=4, hkv=2, d=64, seed=0,
                  requires_grad=False):
    g = torch.Generator().manual_seed(seed)
    cu_q = torch.tensor([0] + list(itertools.accumulate(lens_q)), dtype=torch.int32, device=device)
    cu_k = torch.tensor([0] + list(itertools.accumulate(lens_k)), dtype=torch.int32, device=device)
    mk = lambda *s: torch.randn(*s, generator=g).to(device=device, dtype=dtype_for(device))  # noqa: E731
    q, k, v = mk(int(cu_q[-1]), hq, d), mk(int(cu_k[-1]), hkv, d), mk(int(cu_k[-1]), hkv, d)
    return tuple(t.requires_grad_(requires_grad) for t in (q, k, v)), cu_q, cu_k, max(lens_q), max(lens_k)


def varlen_or_skip(fn, *a, **kw):
    """fn's result, or a skip while the library refuses varlen on the GPU (issue 72)."""
    try:
        return fn(*a, **kw)
    except libflash.FlashError as e:
        if e.status == libflash.capi.FLASH_ERROR_UNSUPPORTED and "varlen" in e.message:
            pytest.skip("this libflash refuses varlen on the GPU: %s" % e.message)
        raise


@needs_ops
@pytest.mark.parametrize("device", DEVICES)
def test_opcheck_varlen(device):
    (q, k, v), cu_q, cu_k, mq, mk = varlen_inputs(device, requires_grad=True)
    used = (cu_k[1:] - cu_k[:-1]).clamp(max=6).to(torch.int32)
    varlen_or_skip(torch.ops.libflash.varlen_fwd, q.detach(), k.detach(), v.detach(), cu_q, cu_k, None, mq, mk, None,
                   True, -1, -1, False)
    torch.library.opcheck(torch.ops.libflash.varlen_fwd.default,
                          (q, k, v, cu_q, cu_k, None, mq, mk, None, True, -1, -1, False))
    torch.library.opcheck(torch.ops.libflash.varlen_fwd.default,
                          (q, k, v, cu_q, cu_k, used, mq, 6, 0.3, False, 4, 2, True))
    with torch.no_grad():
        o, lse = torch.ops.libflash.varlen_fwd(q, k, v, cu_q, cu_k, None, mq, mk, None, True, -1, -1, False)
    torch.library.opcheck(torch.ops.libflash.varlen_bwd.default,
                          (torch.randn_like(o), q.detach(), k.detach(), v.detach(), o, lse, cu_q, cu_k, None, mq, mk,
                           None, True, -1, -1, True))


@needs_ops
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("packed", [None, "kv", "qkv"])
def test_varlen_custom_op_path_bitwise_equals_direct_path(device, packed):
    def run(m):
        (q, k, v), cu_q, cu_k, mq, mk = varlen_inputs(device, requires_grad=True, lens_k=(5, 0, 33, 1, 20), hkv=4)
        with mode(m):
            if packed == "qkv":
                qkv_ = torch.stack((q, k, v), dim=1).detach().requires_grad_(True)
                o = varlen_or_skip(lt.flash_attn_varlen_qkvpacked_func, qkv_, cu_q, mq, causal=True,
                                   deterministic=True)
                leaves = (qkv_,)
            elif packed == "kv":
                kv = torch.stack((k, v), dim=1).detach().requires_grad_(True)
                o = varlen_or_skip(lt.flash_attn_varlen_kvpacked_func, q, kv, cu_q, cu_q, mq, mq, causal=True,
                                   deterministic=True)
                leaves = (q, kv)
            else:
                o = varlen_or_skip(lt.flash_attn_varlen_func, q, k, v, cu_q, cu_k, mq, mk, causal=True,
                                   window_size=(16, 0), deterministic=True)
                leaves = (q, k, v)
        o.backward(torch.ones_like(o))
        return [o.detach()] + [x.grad for x in leaves]

    for a, b in zip(run("never"), run("always")):
        bitwise(a, b)


@needs_ops
@pytest.mark.parametrize("device", DEVICES)
def test_compile_varlen_fullgraph_equals_eager(device):
    def f(q, k, v, cu_q, cu_k):
        o = lt.flash_attn_varlen_func(q * 2, k, v, cu_q, cu_k, 33, 41, causal=True, deterministic=True)
        return o * 3

    cf = _compile(f, device)
    (q, k, v), cu_q, cu_k, _, _ = varlen_inputs(device, requires_grad=True)
    q2, k2, v2 = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    want = varlen_or_skip(f, q, k, v, cu_q, cu_k)
    got = cf(q2, k2, v2, cu_q, cu_k)
    bitwise(got, want)
    g = torch.randn_like(want)
    want.backward(g)
    got.backward(g)
    for a, b in zip((q2, k2, v2), (q, k, v)):
        bitwise(a.grad, b.grad)
    explain = torch._dynamo.explain(f)(q, k, v, cu_q, cu_k)
    assert explain.graph_break_count == 0 and explain.graph_count == 1


@needs_ops
@pytest.mark.skipif(not HAS_GPU, reason="no CUDA device for torch, or a CPU-only libflash")
@pytest.mark.parametrize("m", ["never", "always"])
def test_cuda_graph_varlen_forward_backward_replay_bitwise(m):
    """Offsets on the device and max_seqlen given: nothing synchronises, so capture records the whole call."""
    (q0, k0, v0), cu_q, cu_k, mq, mk = varlen_inputs("cuda")
    varlen_or_skip(lt.flash_attn_varlen_func, q0, k0, v0, cu_q, cu_k, mq, mk)

    class Attn(torch.nn.Module):
        def forward(self, q, k, v):
            with mode(m):
                return lt.flash_attn_varlen_func(q, k, v, cu_q, cu_k, mq, mk, causal=True, deterministic=True)

    sample = tuple(t.detach().clone().requires_grad_(True) for t in (q0, k0, v0))
    graphed = torch.cuda.make_graphed_callables(Attn(), sample)
    for seed in (4, 5):
        (a_q, a_k, a_v), _, _, _, _ = varlen_inputs("cuda", seed=seed, requires_grad=True)
        a = (a_q, a_k, a_v)
        b = tuple(t.detach().clone().requires_grad_(True) for t in a)
        o1 = graphed(*a)
        o2 = Attn()(*b)
        do = torch.randn_like(o2)
        o1.backward(do)
        o2.backward(do)
        bitwise(o1, o2)
        for x, y in zip(a, b):
            bitwise(x.grad, y.grad)

# ==== libflash as PyTorch's SDPA flash-attention implementation (was test_torch_sdpa.py) ====================
# libflash as PyTorch's SDPA flash-attention implementation (PyTorch >= 2.11, libflash/_sdpa.py):
# torch.nn.attention.activate_flash_attention_impl("libflash") routes aten::_scaled_dot_product_flash_attention(_backward)
# and aten::_flash_attention_forward/_backward on CUDA tensors to libflash, and what libflash does not take to the
# built-in kernel.
#
# On any torch (this CI too): the kernels' own logic with the dispatcher and the GPU stood in for (CPU fp16 tensors
# through the library's CPU backend, a recording stand-in for the built-in kernel): which calls libflash takes, that its
# results are libflash.attention's / attention_backward's bitwise in the built-in kernels' layouts, and that every other
# call reaches the built-in kernel with its arguments unchanged.
#
# Checked on a GPU: the name is registered (not activated) at import; with it active, SDPA's flash backend runs libflash
# (its last_algorithm_used() is set, and the output is bitwise libflash.attention's on the same memory), the gradients
# match float64 SDPA within the usual bound and, in deterministic mode, bitwise libflash.attention_backward's; the
# FA2-layout ops with windows; calls libflash does not take (dropout, debug mask, causal with seqlen_q != seqlen_k, fp32)
# give exactly what the built-in kernel gives; torch.compile and CUDA-graph capture of SDPA with libflash active; restore
# and re-activation. Skipped without PyTorch 2.11's registry, a CUDA GPU or a CUDA libflash (as on this CI machine):
# this path is untested until run on such a machine.


_needs = [
    pytest.mark.skipif(not lt.sdpa_impl_available(), reason="torch %s has no torch.nn.attention flash-attention "
                       "implementation registry (PyTorch >= 2.11)" % torch.__version__),
    pytest.mark.skipif(not _cuda_ok(), reason="no CUDA device for torch, or a CPU-only libflash"),
]


def registry_and_gpu(fn):
    for m in _needs:
        fn = m(fn)
    return fn


F = torch.nn.functional


# ---- The kernels' logic, without the dispatcher or a GPU (runs everywhere) ------------------------------------------
class Builtin:
    """Stands in for the built-in kernel (a SafeKernelFunction): records what reaches it."""

    def __init__(self):
        self.calls = []

    def call_boxed(self, keyset, *args, **kwargs):
        self.calls.append((keyset, args, kwargs))
        return "builtin"


@pytest.fixture
def cpu_kernels(monkeypatch):
    """The kernels with CPU tensors allowed (the library's CPU backend computes) and the uint64 placeholders (missing
    from older torch) replaced."""
    from libflash import _sdpa

    def dense_ok(*ts):
        dt = ts[0].dtype
        return dt in _sdpa._HALF and all(t.dim() == 4 and t.dtype == dt for t in ts)

    monkeypatch.setattr(_sdpa, "_dense_ok", dense_ok)
    monkeypatch.setattr(_sdpa, "_extras", lambda q: ("rng", "offset", "debug"))
    return _sdpa


def cpu_bhsd(b=2, h=4, sq=24, sk=24, d=32, hkv=None, seed=0):
    g = torch.Generator().manual_seed(seed)
    mk = lambda *s: torch.randn(*s, generator=g).to(torch.float16)  # noqa: E731
    return mk(b, h, sq, d), mk(b, hkv or h, sk, d), mk(b, hkv or h, sk, d)


@pytest.mark.parametrize("causal", [False, True])
def test_kernel_sdpa_forward_and_backward_logic(cpu_kernels, causal):
    q, k, v = cpu_bhsd(hkv=2)
    builtin = Builtin()
    fwd = cpu_kernels._sdpa_forward(builtin)
    out, lse, cq, ck, mq, mk_, rng, off, dbg = fwd("keys", q, k, v, 0.0, causal, False, scale=0.25)
    assert builtin.calls == [] and (cq, ck, mq, mk_) == (None, None, 24, 24)
    t = [x.transpose(1, 2) for x in (q, k, v)]
    want, want_lse = libflash.attention(*t, causal=causal, softmax_scale=0.25, return_lse=True)
    assert torch.equal(out.transpose(1, 2), want) and torch.equal(lse, want_lse)
    layout = torch.empty_like(q.transpose(1, 2)).transpose(1, 2)  # the built-in kernel's (and its meta's) layout
    assert out.stride() == layout.stride() and lse.is_contiguous()
    do = torch.randn(out.shape).to(torch.float16).transpose(1, 2).contiguous().transpose(1, 2)
    bwd = cpu_kernels._sdpa_backward(builtin)
    dq, dk, dv = bwd("keys", do, q, k, v, out, lse, None, None, 24, 24, 0.0, causal, rng, off, scale=0.25)
    assert builtin.calls == []
    wq, wk, wv = libflash.attention_backward(*t, out.transpose(1, 2), do.transpose(1, 2), lse, causal=causal,
                                             softmax_scale=0.25)
    for g, w, x in ((dq, wq, q), (dk, wk, k), (dv, wv, v)):
        assert torch.equal(g.transpose(1, 2), w)
        assert g.shape == x.shape and g.stride() == torch.empty_like(x.transpose(1, 2)).transpose(1, 2).stride()


@pytest.mark.parametrize("layout", ["bhsd", "bshd_view", "sliced"])
def test_kernel_sdpa_layouts(cpu_kernels, layout):
    """The kernels read SDPA's [b, h, s, d] tensors in place (no transposed views) and allocate outputs in the built-in
    kernel's layout: for a contiguous [b, h, s, d] input, the [b, h, s, d] view of a contiguous [b, s, h, d] one (what
    attention modules pass), and a non-dense slice (the general layout path)."""
    q, k, v = cpu_bhsd(d=64, hkv=2)
    if layout == "bshd_view":
        q, k, v = (x.transpose(1, 2).contiguous().transpose(1, 2) for x in (q, k, v))
    elif layout == "sliced":
        q, k, v = (x[..., :32] for x in (q, k, v))
    builtin = Builtin()
    out, lse = cpu_kernels._sdpa_forward(builtin)("keys", q, k, v, 0.0, True, False, scale=0.25)[:2]
    assert builtin.calls == []
    t = [x.transpose(1, 2) for x in (q, k, v)]
    want, want_lse = libflash.attention(*t, causal=True, softmax_scale=0.25, return_lse=True)
    assert torch.equal(out.transpose(1, 2), want) and torch.equal(lse, want_lse)
    assert out.stride() == torch.empty_like(q.transpose(1, 2)).transpose(1, 2).stride()
    do = torch.randn(out.shape).to(torch.float16)
    got = cpu_kernels._sdpa_backward(builtin)("keys", do, q, k, v, out, lse, None, None, 24, 24, 0.0, True, "rng",
                                               "off", scale=0.25)
    assert builtin.calls == []
    wants = libflash.attention_backward(*t, out.transpose(1, 2), do.transpose(1, 2), lse, causal=True,
                                        softmax_scale=0.25)
    for g, w, x in zip(got, wants, (q, k, v)):
        assert torch.equal(g.transpose(1, 2), w)
        assert g.stride() == torch.empty_like(x.transpose(1, 2)).transpose(1, 2).stride()


def test_kernel_flash_forward_and_backward_logic(cpu_kernels):
    q, k, v = (x.transpose(1, 2).contiguous() for x in cpu_bhsd())  # [b, s, h, d]
    builtin = Builtin()
    fwd = cpu_kernels._flash_forward(builtin)
    out, lse, rng, off, dbg = fwd("keys", q, k, v, None, None, 24, 24, 0.0, False, False, window_size_left=4,
                                  window_size_right=2)
    want, want_lse = libflash.attention(q, k, v, window=(4, 2), return_lse=True)
    assert builtin.calls == [] and torch.equal(out, want) and torch.equal(lse, want_lse)
    assert out.stride() == torch.empty_like(q).stride()
    do = torch.randn(out.shape).to(torch.float16)
    bwd = cpu_kernels._flash_backward(builtin)
    got = bwd("keys", do, q, k, v, out, lse, None, None, 24, 24, 0.0, False, rng, off, window_size_left=4,
              window_size_right=2)
    for g, w in zip(got, libflash.attention_backward(q, k, v, out, do, lse, window=(4, 2))):
        assert torch.equal(g, w)
    assert builtin.calls == []


def test_kernel_declined_calls_reach_the_builtin_kernel_unchanged(cpu_kernels):
    q, k, v = cpu_bhsd(sq=16, sk=24)
    qf, kf, vf = (x.transpose(1, 2) for x in (q, k, v))
    builtin = Builtin()
    sdpa, flash = cpu_kernels._sdpa_forward(builtin), cpu_kernels._flash_forward(builtin)
    sdpa_b, flash_b = cpu_kernels._sdpa_backward(builtin), cpu_kernels._flash_backward(builtin)
    cases = [
        (sdpa, ("k", q, k, v, 0.1, False, False), {"scale": None}),  # dropout
        (sdpa, ("k", q, k, v, 0.0, False, True), {"scale": None}),  # debug mask
        (sdpa, ("k", q, k, v, 0.0, True, False), {"scale": None}),  # causal, seqlen_q != seqlen_k
        (sdpa, ("k", q.float(), k.float(), v.float(), 0.0, False, False), {"scale": None}),  # fp32
        (sdpa, ("k", q, k, v, 0.0, False, False), {"scale": 0.0}),  # refused by the library (scale 0)
        (sdpa, ("k", q[..., :12], k[..., :12], v[..., :12], 0.0, False, False), {"scale": None}),  # head dim 12
        (sdpa, ("k", q, k, v, 0.0, False, False), {"scale": None, "future_arg": 3}),  # a newer schema's kwarg
        (flash, ("k", qf, kf, vf, None, None, 16, 24, 0.0, False, False),
         {"scale": None, "window_size_left": 3, "window_size_right": None, "seqused_k": None,
          "alibi_slopes": None}),  # a window with seqlen_q != seqlen_k
        (flash, ("k", qf, kf, vf, None, None, 16, 24, 0.0, False, False),
         {"scale": None, "window_size_left": None, "window_size_right": None, "seqused_k": torch.ones(2),
          "alibi_slopes": None}),
        (flash, ("k", qf[0], kf[0], vf[0], torch.zeros(2), torch.zeros(2), 16, 24, 0.0, False, False),
         {"scale": None, "window_size_left": None, "window_size_right": None, "seqused_k": None,
          "alibi_slopes": None, "block_table": torch.zeros(1)}),  # varlen (3-d) and a paged table
        (sdpa_b, ("k", q, q, k, v, q, torch.zeros(2, 4, 16), None, None, 16, 24, 0.0, True, None, None),
         {"scale": None}),  # causal, seqlen_q != seqlen_k
        (flash_b, ("k", qf, qf, kf, vf, qf, torch.zeros(2, 4, 16), None, None, 16, 24, 0.2, False, None, None),
         {"scale": None, "window_size_left": None, "window_size_right": None}),  # dropout
    ]
    for i, (kernel, args, kwargs) in enumerate(cases):
        assert kernel(*args, **kwargs) == "builtin", i
        keyset, got_args, got_kwargs = builtin.calls[-1]
        assert keyset == "k" and len(got_args) == len(args) - 1, i
        assert all(a is b for a, b in zip(got_args, args[1:])), i
        assert got_kwargs.keys() == kwargs.keys() and all(got_kwargs[n] is kwargs[n] for n in kwargs), i
    assert len(builtin.calls) == len(cases)


# ---- With PyTorch 2.11's registry on a GPU --------------------------------------------------------------------------


def _restore():
    attn = torch.nn.attention
    restore = getattr(attn, "restore_flash_attention_impl", None)
    if restore is None:
        from torch.nn.attention import _registry

        restore = _registry.restore_flash_attention_impl
    restore()


@pytest.fixture
def active():
    torch.nn.attention.activate_flash_attention_impl(lt.SDPA_IMPL_NAME)
    try:
        yield
    finally:
        _restore()


def flash_only():
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel([SDPBackend.FLASH_ATTENTION])


def bhsd(b=2, h=4, sq=128, sk=128, d=64, dtype=torch.bfloat16, seed=0, hkv=None, requires_grad=False):
    g = torch.Generator().manual_seed(seed)
    mk = lambda *s: torch.randn(*s, generator=g).to("cuda", dtype).requires_grad_(requires_grad)  # noqa: E731
    return mk(b, h, sq, d), mk(b, hkv or h, sk, d), mk(b, hkv or h, sk, d)


def ran_libflash(fn):
    """(result, whether libflash ran on this thread during fn())."""
    _attention._last.algorithm_used = -1
    r = fn()
    return r, libflash.last_algorithm_used() is not None


@registry_and_gpu
def test_registered_not_activated():
    assert lt.SDPA_IMPL_NAME in torch.nn.attention.list_flash_attention_impls()
    assert torch.nn.attention.current_flash_attention_impl() != lt.SDPA_IMPL_NAME


@registry_and_gpu
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", [(2, 4, 128, 128, 64), (1, 8, 77, 77, 128), (2, 2, 33, 200, 256)])
def test_sdpa_forward_runs_libflash(active, causal, dtype, shape):
    b, h, sq, sk, d = shape
    if causal and sq != sk:
        pytest.skip("SDPA's flash backend takes causal only for seqlen_q == seqlen_k")
    q, k, v = bhsd(b, h, sq, sk, d, dtype)
    with flash_only():
        o, ran = ran_libflash(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
    assert ran
    # SDPA hands the flash op its scale, 1/sqrt(head_dim) computed in double (sdp::calculate_scale)
    want = libflash.attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=causal,
                              softmax_scale=1.0 / math.sqrt(d)).transpose(1, 2)
    bitwise(o, want)
    ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=causal)
    assert (o.double() - ref).abs().max().item() <= 2e-2 * max(1.0, ref.abs().max().item())


@registry_and_gpu
def test_sdpa_gqa(active):
    q, k, v = bhsd(2, 8, 96, 96, 64, hkv=2)
    with flash_only():
        o, ran = ran_libflash(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True))
    if not ran:
        pytest.skip("this PyTorch does not send GQA to the flash backend")
    want = libflash.attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=True,
                              softmax_scale=1.0 / math.sqrt(64)).transpose(1, 2)
    bitwise(o, want)


@registry_and_gpu
@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_backward(active, causal):
    q, k, v = bhsd(2, 4, 100, 100, 64, requires_grad=True)
    with flash_only():
        o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    do = torch.randn_like(o)
    _attention._last.algorithm_used = -1
    # The binding records the algorithm per thread, and autograd runs a CUDA backward on its own device thread:
    # run it on this one so the record is readable here.
    with torch.autograd.set_multithreading_enabled(False):
        o.backward(do)
    assert libflash.last_algorithm_used() is not None
    x64 = [t.detach().double().requires_grad_(True) for t in (q, k, v)]
    F.scaled_dot_product_attention(*x64, is_causal=causal).backward(do.double())
    for got, want in zip((q.grad, k.grad, v.grad), x64):
        assert (got.double() - want.grad).abs().max().item() <= 6e-2 * max(1.0, want.grad.abs().max().item())


@registry_and_gpu
def test_sdpa_backward_deterministic_is_libflash_bitwise(active):
    q, k, v = bhsd(1, 4, 64, 64, 128, dtype=torch.float16, requires_grad=True)
    was = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        with flash_only():
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        do = torch.randn_like(o)
        o.backward(do)
    finally:
        torch.use_deterministic_algorithms(was)
    t = [x.detach().transpose(1, 2) for x in (q, k, v, o)]
    scale = 1.0 / math.sqrt(128)
    _, lse = libflash.attention(t[0], t[1], t[2], causal=True, return_lse=True, softmax_scale=scale)
    dq, dk, dv = libflash.attention_backward(t[0], t[1], t[2], t[3], do.transpose(1, 2), lse, causal=True,
                                             deterministic=True, softmax_scale=scale)
    for got, want in zip((q.grad, k.grad, v.grad), (dq, dk, dv)):
        bitwise(got, want.transpose(1, 2))


@registry_and_gpu
@pytest.mark.parametrize("window", [(None, None), (16, 0), (8, 8)])
def test_flash_attention_forward_op(active, window):
    q, k, v = (t.transpose(1, 2).contiguous() for t in bhsd(2, 4, 64, 64, 64))  # [b, s, h, d]
    r, ran = ran_libflash(lambda: torch.ops.aten._flash_attention_forward(
        q, k, v, None, None, 64, 64, 0.0, False, False, window_size_left=window[0], window_size_right=window[1]))
    assert ran
    out, lse = r[0], r[1]
    w = (-1 if window[0] is None else window[0], -1 if window[1] is None else window[1])
    want, want_lse = libflash.attention(q, k, v, window=w, return_lse=True)
    bitwise(out, want)
    bitwise(lse, want_lse)


def _builtin(fn):
    """fn() with libflash not active (the built-in kernel)."""
    _restore()
    try:
        return fn()
    finally:
        torch.nn.attention.activate_flash_attention_impl(lt.SDPA_IMPL_NAME)


@registry_and_gpu
def test_declined_calls_run_the_builtin_kernel(active):
    q, k, v = bhsd(2, 4, 64, 96, 64)
    op = torch.ops.aten._scaled_dot_product_flash_attention
    cases = {
        "causal, seqlen_q != seqlen_k": lambda: op(q, k, v, 0.0, True)[:2],
        "debug mask": lambda: op(q, k, v, 0.0, False, True)[:2],
        "dropout": lambda: (torch.manual_seed(5), op(q, k, v, 0.3, False)[0])[1],
    }

    def outcome(fn):  # (result, error message): the built-in kernel refuses some of these (PyTorch 2.11: a debug
        try:           # mask needs dropout > 0), and a declined call must then fail the same way
            return fn(), None
        except RuntimeError as e:
            return None, str(e)

    for name, fn in cases.items():
        (got, err), ran = ran_libflash(lambda: outcome(fn))
        assert not ran, name
        want, want_err = _builtin(lambda: outcome(fn))
        assert err == want_err, name
        if err is None:
            for a, b in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
                bitwise(a, b)


@registry_and_gpu
def test_compile_sdpa_with_libflash_active(active):
    def f(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    torch._dynamo.reset()
    cf = torch.compile(f, fullgraph=True)
    q, k, v = bhsd(2, 4, 128, 128, 64)
    with flash_only():
        got, ran = ran_libflash(lambda: cf(q, k, v))
        want = f(q, k, v)
    assert ran
    bitwise(got, want)


@registry_and_gpu
def test_cuda_graph_sdpa_with_libflash_active(active):
    q, k, v = bhsd(2, 4, 128, 128, 64)

    def f():
        with flash_only():
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            f()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = f()
    for seed in (1, 2):
        nq, nk, nv = bhsd(2, 4, 128, 128, 64, seed=seed)
        q.copy_(nq), k.copy_(nk), v.copy_(nv)
        graph.replay()
        torch.cuda.synchronize()
        bitwise(out, f())


@registry_and_gpu
def test_restore_and_reactivate():
    q, k, v = bhsd(1, 2, 64, 64, 64)
    for _ in range(2):
        torch.nn.attention.activate_flash_attention_impl(lt.SDPA_IMPL_NAME)
        with flash_only():
            _, ran = ran_libflash(lambda: F.scaled_dot_product_attention(q, k, v))
        assert ran
        _restore()
        with flash_only():
            _, ran = ran_libflash(lambda: F.scaled_dot_product_attention(q, k, v))
        assert not ran
