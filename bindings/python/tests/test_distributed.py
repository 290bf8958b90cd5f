"""libflash.distributed.ring_attention over torch.distributed with gloo, on the CPU backend.

2 and 4 processes (torch.multiprocessing.spawn, file:// rendezvous) each run every case of CASES once: each rank
takes its slice (contiguous or zigzag) of one global q, k, v, dO, runs ring attention forward and backward, and the
results are gathered to rank 0, which compares O, the LSE, dq, dk, dv with one-shot libflash (flash_attn_func on the
whole sequence, same dtype) and a float64 torch reference: |ring - ref64| <= 2 * max(error of one-shot libflash, error
of naive attention in the same dtype) + 1 ulp of the dtype at max |ref| (the suite's usual bound). One spawn per world
size (the cases run inside it) keeps the file to ~20 s on 2 cores. Without the processes: the split helpers, the
per-step mask plans against brute force, a world of 1 (bitwise one-shot) and the refusals. Skipped without torch,
torch.distributed or gloo."""

import json
import math
import os
import tempfile

import numpy as np
import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

import libflash  # noqa: E402
from libflash.distributed import _plan, _segments, ring_attention, zigzag_split, zigzag_unsplit  # noqa: E402
from reference import visible  # noqa: E402

# name: (dtype, batch, heads_q, heads_kv, head_dim, local_seqlen, causal, window, layout, softmax_scale, deterministic)
CASES = {
    "fp32-full-odd": ("float32", 2, 4, 2, 32, 7, False, (-1, -1), None, None, False),
    "fp32-causal-zigzag": ("float32", 1, 4, 1, 16, 6, True, (-1, -1), None, None, True),
    "bf16-full-odd": ("bfloat16", 1, 2, 2, 32, 5, False, (-1, -1), None, None, False),
    "bf16-causal-zigzag": ("bfloat16", 2, 4, 2, 16, 10, True, (-1, -1), None, None, False),
    "fp32-causal-window-contiguous": ("float32", 1, 4, 2, 16, 7, True, (4, 0), "contiguous", None, False),
    "fp32-window-zigzag": ("float32", 1, 2, 1, 16, 6, False, (3, 6), "zigzag", 0.3, False),
    "fp32-causal-window-zigzag": ("float32", 1, 4, 4, 8, 10, True, (5, 0), None, None, False),
}
SUBGROUP_CASE = "fp32-subgroups"  # world 4 only: two rings of 2 ({0, 2} and {1, 3}) on different sequences
NAMES = ("o", "lse", "dq", "dk", "dv")


def _dtype(name):
    return getattr(torch, name)


def _inputs(spec, world, seed):
    dtype, b, hq, hkv, d, n = spec[:6]
    g = torch.Generator().manual_seed(seed)
    big = world * n
    shapes = ((b, big, hq, d), (b, big, hkv, d), (b, big, hkv, d), (b, big, hq, d))
    return [torch.randn(s, generator=g).to(_dtype(dtype)) for s in shapes]


def _layout(spec):
    return spec[8] or ("zigzag" if spec[6] else "contiguous")


def _split(x, layout, rank, world, dim=1):
    if layout == "zigzag":
        return zigzag_split(x, rank, world, dim=dim)
    return x.chunk(world, dim=dim)[rank].contiguous()


def _unsplit(parts, layout, dim=1):
    return zigzag_unsplit(parts, dim=dim) if layout == "zigzag" else torch.cat(parts, dim=dim)


def _attn(q, k, v, scale, mask):
    """O and LSE by plain torch ops in q's dtype (differentiable; [B, S, H, D] in, LSE [B, H, S])."""
    hq, hkv = q.shape[2], k.shape[2]
    qt = q.transpose(1, 2)
    kt = k.transpose(1, 2).repeat_interleave(hq // hkv, dim=1)
    vt = v.transpose(1, 2).repeat_interleave(hq // hkv, dim=1)
    s = (qt @ kt.transpose(-1, -2)) * scale
    s = s.masked_fill(~mask, float("-inf"))
    return (torch.softmax(s, dim=-1) @ vt).transpose(1, 2), torch.logsumexp(s.double(), dim=-1)


def _references(spec, full, do):
    """{name: (ref64, one-shot libflash, naive same dtype)} for O, LSE, dq, dk, dv over the whole sequence."""
    dtype, _, _, _, d, _, causal, window, _, scale, _ = spec
    n = full[0].shape[1]
    mask = torch.from_numpy(np.ascontiguousarray(visible(n, n, causal=causal, window=window)))
    s = 1.0 / math.sqrt(d) if scale is None else scale
    out = {}
    for kind in ("ref", "one", "naive"):
        xs = [x.detach().clone().to(torch.float64 if kind == "ref" else x.dtype).requires_grad_(True) for x in full]
        if kind == "one":
            o, lse = libflash.attention(*xs, causal=causal, window=window, softmax_scale=scale, return_lse=True)
        else:
            o, lse = _attn(*xs, s, mask)
        o.backward(do.to(o.dtype))
        out[kind] = [o.detach(), lse.detach()] + [x.grad for x in xs]
    return {nm: (out["ref"][i], out["one"][i], out["naive"][i]) for i, nm in enumerate(NAMES)}


def _ulp(x, dtype):
    mant = {"float32": 23, "bfloat16": 7, "float16": 10}[dtype]
    return 2.0 ** (math.floor(math.log2(max(x, 1e-30))) - mant)


def _check(spec, got, refs):
    """{name: [err_ring, bound, err_one, err_naive]} (errors against float64)."""
    res = {}
    for nm in NAMES:
        ref, one, naive = refs[nm]
        dtype = "float32" if nm == "lse" else spec[0]
        err = [(x.double() - ref).abs().max().item() for x in (got[nm], one, naive)]
        if nm == "lse":  # fp32 whatever the inputs (the naive LSE, of scores rounded to the dtype, is no yardstick)
            bound = 2 * err[1] + 4 * _ulp(ref.abs().max().item(), dtype)
        else:
            bound = 2 * max(err[1], err[2]) + _ulp(ref.abs().max().item(), dtype)
        res[nm] = [err[0], bound, err[1], err[2]]
    return res


def _run_case(spec, group, rank, world, seed):
    layout = _layout(spec)
    full = _inputs(spec, world, seed)
    q, k, v, do = (_split(x, layout, rank, world) for x in full)
    for t in (q, k, v):
        t.requires_grad_(True)
    o, lse = ring_attention(q, k, v, group=group, causal=spec[6], window=spec[7], softmax_scale=spec[9],
                            layout=spec[8], deterministic=spec[10], return_lse=True)
    o.backward(do)
    got = {}
    for nm, x, dim in zip(NAMES, (o.detach(), lse, q.grad, k.grad, v.grad), (1, 2, 1, 1, 1)):
        parts = [torch.empty(x.shape, dtype=torch.float32) for _ in range(world)]
        dist.all_gather(parts, x.float().contiguous(), group=group)  # gloo has no bfloat16 collectives
        got[nm] = _unsplit(parts, layout, dim).to(x.dtype)
    return got, full


def _worker(rank, world, init, out_path):
    os.environ["LIBFLASH_NUM_THREADS"] = "1"
    torch.set_num_threads(1)
    from datetime import timedelta
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world, timeout=timedelta(seconds=60))
    results = {}
    for i, (name, spec) in enumerate(CASES.items()):
        got, full = _run_case(spec, None, rank, world, seed=100 * world + i)
        if rank == 0:
            results[name] = _check(spec, got, _references(spec, full[:3], full[3]))
    if world == 4:
        # Two rings over subgroups whose ring order is not the global order: ring peers are the groups' ranks.
        groups = [dist.new_group([0, 2]), dist.new_group([1, 3])]
        gi = 0 if rank in (0, 2) else 1
        spec = CASES["fp32-full-odd"]
        got, full = _run_case(spec, groups[gi], dist.get_rank(groups[gi]), 2, seed=7 + gi)
        if dist.get_rank(groups[gi]) == 0:
            res = _check(spec, got, _references(spec, full[:3], full[3]))
            with open(out_path + ".sub%d" % gi, "w") as f:
                json.dump(res, f)
    dist.barrier()
    if rank == 0:
        with open(out_path, "w") as f:
            json.dump(results, f)
    dist.destroy_process_group()


_RESULTS = {}


def _results(world):
    if world not in _RESULTS:
        import torch.multiprocessing as mp
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "results.json")
            try:
                mp.spawn(_worker, args=(world, "file://" + os.path.join(tmp, "rendezvous"), out), nprocs=world)
                with open(out) as f:
                    res = json.load(f)
                if world == 4:
                    subs = []
                    for gi in (0, 1):
                        with open(out + ".sub%d" % gi) as f:
                            subs.append(json.load(f))
                    res[SUBGROUP_CASE] = subs
            except Exception as e:  # reported by every test of this world size
                res = e
        _RESULTS[world] = res
    if isinstance(_RESULTS[world], Exception):
        raise _RESULTS[world]
    return _RESULTS[world]


def _assert_within(res, label):
    for nm in NAMES:
        err, bound, one, naive = res[nm]
        assert err <= bound, "%s %s: max |ring - ref64| = %.3g > %.3g (one-shot libflash %.3g, naive %.3g)" % (
            label, nm, err, bound, one, naive)


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("case", list(CASES))
def test_ring_attention_matches_one_shot(world, case):
    """Forward (O, LSE) and backward (dq, dk, dv) of the ring, gathered, against the whole-sequence references."""
    _assert_within(_results(world)[case], "%s world %d" % (case, world))


def test_ring_attention_subgroups():
    """world 4 split into the rings {0, 2} and {1, 3}: group ranks are not global ranks (the P2P peers are mapped)."""
    for i, res in enumerate(_results(4)[SUBGROUP_CASE]):
        _assert_within(res, "subgroup %d" % i)


# ---- Without processes ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("world", [1, 2, 3, 4])
@pytest.mark.parametrize("chunk", [1, 3, 4])
def test_zigzag_split_unsplit(world, chunk):
    n = 2 * world * chunk
    x = torch.arange(3 * n * 2).reshape(3, n, 2)
    parts = [zigzag_split(x, r, world) for r in range(world)]
    for r, p in enumerate(parts):
        pos = zigzag_split(torch.arange(n), r, world, dim=0)
        want = list(range(r * chunk, (r + 1) * chunk)) + list(range((2 * world - 1 - r) * chunk,
                                                                     (2 * world - r) * chunk))
        assert pos.tolist() == want
        assert torch.equal(p, x[:, pos])
    assert torch.equal(zigzag_unsplit(parts), x)
    y = x.transpose(0, 1).contiguous()
    assert torch.equal(zigzag_unsplit([zigzag_split(y, r, world, dim=0) for r in range(world)], dim=0), y)
    with pytest.raises(ValueError, match="multiple of 2"):
        zigzag_split(torch.zeros(1, n + 1), 0, world)
    with pytest.raises(ValueError, match="not in"):
        zigzag_split(x, world, world)
    with pytest.raises(ValueError, match="even"):
        zigzag_unsplit([torch.zeros(1, 3)])


def _masks():
    return [(False, (-1, -1)), (True, (-1, -1)), (True, (0, 0)), (True, (3, 0)), (False, (2, 5)), (False, (0, 7)),
            (False, (9, 1)), (True, (20, 0))]


@pytest.mark.parametrize("layout", ["contiguous", "zigzag"])
@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_step_plans_cover_the_mask(layout, world):
    """Every rank's calls over the ring, mapped to global positions, see each visible (query, key) pair exactly once
    and no masked pair; causal zigzag is one call per step with equal work on every rank."""
    for n in (2, 6, 7, 10):
        if layout == "zigzag" and n % 2:
            continue
        big = world * n
        for causal, window in _masks():
            left, right = window[0], 0 if causal else window[1]
            want = visible(big, big, causal=causal, window=window)[0, 0]
            seen = np.zeros((big, big), int)
            for r in range(world):
                gpos_q = np.concatenate([np.arange(g, g + m) for _, g, m in _segments(layout, r, world, n)])
                work = []
                for t in range(world):
                    s = (r - t) % world
                    gpos_k = np.concatenate([np.arange(g, g + m) for _, g, m in _segments(layout, s, world, n)])
                    calls = _plan(layout, r, s, world, n, left, right)
                    for ql, qh, kl, kh, wl, wr in calls:
                        sub = visible(qh - ql, kh - kl, alignment="top_left", window=(wl, wr))[0, 0]
                        gi, gj = np.nonzero(sub)
                        np.add.at(seen, (gpos_q[ql + gi], gpos_k[kl + gj]), 1)
                    if causal and window[0] < 0 and layout == "zigzag":
                        assert len(calls) == 1, (r, s, calls)
                        work.append(sum((qh - ql) * (kh - kl) for ql, qh, kl, kh, _, _ in calls))
                if work and world > 1:
                    assert work[1:] == [n * n // 2] * (world - 1), work  # balanced: half a block every step
            assert np.array_equal(seen, want.astype(int)), (layout, world, n, causal, window)


@pytest.fixture
def world1():
    """A process group of one process (this one), torn down afterwards."""
    if dist.is_initialized():
        pytest.skip("a process group already exists in this process")
    with tempfile.TemporaryDirectory() as tmp:
        dist.init_process_group("gloo", init_method="file://" + os.path.join(tmp, "rv"), rank=0, world_size=1)
        try:
            yield
        finally:
            dist.destroy_process_group()


def test_world_of_one_is_one_shot(world1):
    """With one rank there is one step of one call (causal zigzag: causal on the local slice; a window in the
    contiguous layout): O, LSE and the gradients are bitwise those of one-shot libflash."""
    from libflash.torch import flash_attn_func
    g = torch.Generator().manual_seed(5)
    for causal, window, layout in ((False, (-1, -1), None), (True, (-1, -1), None), (True, (3, 0), "contiguous"),
                                   (False, (2, 5), "contiguous")):
        q, k, v, do = (torch.randn(s, generator=g) for s in ((2, 8, 4, 16), (2, 8, 2, 16), (2, 8, 2, 16), (2, 8, 4, 16)))
        xs = [x.clone().requires_grad_(True) for x in (q, k, v)]
        ys = [x.clone().requires_grad_(True) for x in (q, k, v)]
        o, lse = ring_attention(*xs, causal=causal, window=window, layout=layout, return_lse=True)
        o.backward(do)
        ro = flash_attn_func(*ys, causal=causal, window_size=window)
        ro.backward(do)
        _, rlse = libflash.attention(q, k, v, causal=causal, window=window, return_lse=True)
        assert torch.equal(o, ro) and torch.equal(lse, rlse)
        for a, b in zip(xs, ys):
            assert torch.equal(a.grad, b.grad)


def test_refusals(world1):
    q = torch.zeros(1, 6, 2, 16)
    with pytest.raises(TypeError, match="torch.Tensor"):
        ring_attention(q.numpy(), q, q)
    with pytest.raises(ValueError, match="dimensions"):
        ring_attention(q[0], q, q)
    with pytest.raises(ValueError, match="but v has"):
        ring_attention(q, q, q[:, :, :1])
    with pytest.raises(ValueError, match="local tokens"):
        ring_attention(q, q[:, :4], q[:, :4])
    with pytest.raises(ValueError, match="even local_seqlen"):
        ring_attention(q[:, :5], q[:, :5], q[:, :5], causal=True)
    with pytest.raises(ValueError, match="layout"):
        ring_attention(q, q, q, layout="striped")
    with pytest.raises(ValueError, match=">= 0, or -1"):
        ring_attention(q, q, q, window=(-2, 0))
    with pytest.raises(ValueError, match="pair"):
        ring_attention(q, q, q, window=3)
    with pytest.raises(libflash.FlashError):  # the library's own checks still apply (heads_q % heads_kv)
        ring_attention(torch.zeros(1, 6, 3, 16), q, q)


def test_requires_a_process_group():
    if dist.is_initialized():
        pytest.skip("a process group exists in this process")
    q = torch.zeros(1, 6, 2, 16)
    with pytest.raises(RuntimeError, match="init_process_group"):
        ring_attention(q, q, q)
