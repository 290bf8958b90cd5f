"""libflash against PyTorch's SDPA backends (cuDNN, FlashAttention-2), timed interleaved in one process on the same tensors.

    PYTHONPATH=bindings/python LIBFLASH_PATH=build/libflash.so \
        python3 scripts/interleaved_peers.py [--hdims 64,128,256] [--seqlens 1024,...,16384] [--reps 30] [--json peers.json]

(`scripts/device.sh peers` runs it on the device's build and writes $OUT/peers/peers.json.)

Why interleaved: timing each backend in its own run of back-to-back launches lets the GPU's power manager set a
different clock for each; at 16k on the H100 that moved a 30-launch median by up to 10% from one run to the next.
Here every round times each backend once, in alternating order, so a change of clocks falls on all of them alike and
the ratio is what is left. Each timed call is preceded, as in triton's do_bench, by an untimed call of the same function
(its code in the instruction caches, as a repeated call finds it), a 256 MB write that evicts L2, and a sleep kernel
that keeps the GPU busy while Python launches the call, so the CUDA events bracket the attention kernel alone.

Grid: batch * seqlen = 16384, heads = 2048 / head_dim, bf16, forward; q, k, v are [batch, heads, seqlen, d] tensors
(SDPA's layout) that libflash reads through transposed views ([batch, seqlen, heads, d], any strides).
TFLOP/s = 4 b h n^2 d (/2 causal) / median time. Also recorded: max |O_libflash - O_peer| / max |O_peer| against the
first peer. The JSON's format is described in bench_results/README.md ("peers.json").

--mode decode: one new query token over a KV cache (libflash.attention_with_kvcache against SDPA on the same cache,
read through [b, heads_kv, L, d] views; enable_gqa), batch x cached keys in --decode-shapes, heads --heads (32/8),
--hdims (128); libflash also on paged copies of the cache (--page-sizes, a random page order; the peers have no
paged cache). GB/s = K and V bytes read / median time, also as a fraction of the device-to-device copy bandwidth
measured in the same process. JSON: "decode.json" in bench_results/README.md.

--mode varlen: packed variable-length batches (issue 72's speed bar): --varlen-total tokens (65536) of lengths drawn
uniformly from each --varlen-dists range (128:8192 and 16:512; seeded), --hdims (64,128), --varlen-heads (16/16 and
32/8), causal and not, forward and forward+backward (--varlen-modes). Timed interleaved: libflash's varlen call,
FlashAttention-2's varlen kernel through PyTorch (aten::_flash_attention_forward, the kernel under
torch.nn.attention.varlen.varlen_attn; its autograd for fwd_bwd) and libflash's own dense call at the mean length
(batch = total / mean). TFLOP/s are counted per sequence: 4 h d x (visible query-key pairs), x 3.5 for fwd_bwd (the
backward's five products are 2.5x the forward's two). The bars: libflash varlen >= 0.95x its dense TFLOP/s at the
mean length and >= 1.1x FA2's varlen. JSON: the rows under "varlen_rows".

--mode train: forward+backward and the backward alone (issue 73's speed bar) on the standard grid (--hdims, --seqlens,
--causal) and the Llama-8B shape (heads 32/8, d128, causal, batch x seqlen = 16k, --llama-seqlens), through autograd
for every contestant: libflash.torch.flash_attn_func on [b, s, h, d] views (also deterministic=True:
"libflash_det"), SDPA cuDNN and FlashAttention-2 (enable_gqa for 32/8). fwd_bwd times a forward and its backward;
bwd times torch.autograd.grad on a kept forward's graph (retain_graph). TFLOP/s: the forward's 4 b h n^2 d (/2
causal) x 3.5 (fwd_bwd) or x 2.5 (bwd). Also recorded: max |dQ_libflash - dQ_peer| / max |dQ_peer| against the
first peer. JSON: the rows under "train_rows".
"""
import argparse
import datetime
import json
import os
import random
import re
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import libflash

BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}


def ints(s):
    return [int(x) for x in s.split(",")]


def time_rounds(fns, reps, cache, sleep, icache="warm"):
    """{name: [ms per round]} for fns, a {name: callable} dict. Each round calls every fn once, in list order on even
    rounds and reversed on odd ones, so a change of clocks falls on all alike. Each call is preceded by a write of
    `cache` (evicting L2) and, with sleep > 0, by that many GPU cycles of torch.cuda._sleep, which keeps the GPU busy
    while Python launches the call: the CUDA events bracket the call alone.

    icache "warm" calls each fn once more, untimed, right before its cache write, so that the timed call finds its own
    code in the SMs' instruction caches, as a function timed repeatedly (do_bench, fa-bench) does. "mixed": a call
    finds the previous call's code there (a launch whose code is not cached measured up to 3% slower)."""
    times = {name: [] for name in fns}
    order = list(fns)
    for r in range(reps):
        marks = []
        for name in (order if r % 2 == 0 else order[::-1]):
            if icache == "warm":
                fns[name]()
            cache.zero_()
            if sleep > 0:
                torch.cuda._sleep(sleep)
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            fns[name]()
            e1.record()
            marks.append((name, e0, e1))
        torch.cuda.synchronize()
        for name, e0, e1 in marks:
            times[name].append(e0.elapsed_time(e1))
    return times


def copy_bandwidth(reps=20):
    """Device-to-device copy of 1 GiB: bytes read + written over the median time (bytes/s)."""
    src = torch.empty(1 << 30, dtype=torch.int8, device="cuda")
    dst = torch.empty_like(src)
    ts = []
    for _ in range(reps):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        dst.copy_(src)
        e1.record()
        torch.cuda.synchronize()
        ts.append(e0.elapsed_time(e1))
    del src, dst
    return 2 * (1 << 30) / (statistics.median(ts) * 1e-3)


def decode(a, peers, cache):
    """The decode rows: {b, L, d, hq, hkv, page, ms, gbs, copy_fraction, max_rel_err, splits}."""
    hq, hkv = a.heads
    copy_bw = copy_bandwidth()
    print("device-to-device copy: %.0f GB/s" % (copy_bw / 1e9), flush=True)
    rows = []
    gen = torch.Generator(device="cuda").manual_seed(0)
    for d in a.hdims:
        for b, L in a.decode_shapes:
            q = torch.randn(b, 1, hq, d, device="cuda", dtype=torch.bfloat16, generator=gen)
            kc = torch.randn(b, L, hkv, d, device="cuda", dtype=torch.bfloat16, generator=gen)
            vc = torch.randn(b, L, hkv, d, device="cuda", dtype=torch.bfloat16, generator=gen)
            seqlens = torch.full((b,), L, dtype=torch.int32, device="cuda")
            kv_bytes = 2 * b * L * hkv * d * 2
            qt, kt, vt = q.transpose(1, 2), kc.transpose(1, 2), vc.transpose(1, 2)  # SDPA's [b, h, s, d] views
            for page in a.page_sizes:
                if page and L % page:
                    continue
                if page:  # the same keys in pages of a shuffled pool; block_table[i, j] = page of keys [j*page, (j+1)*page)
                    n_pages = b * L // page
                    order = torch.randperm(n_pages, device="cuda", generator=gen).to(torch.int32)
                    table = order.reshape(b, L // page)
                    kp = torch.empty(n_pages, page, hkv, d, device="cuda", dtype=torch.bfloat16)
                    vp = torch.empty_like(kp)
                    kp[order.long()] = kc.reshape(n_pages, page, hkv, d)
                    vp[order.long()] = vc.reshape(n_pages, page, hkv, d)
                    kw = dict(block_table=table)
                else:
                    kp, vp, kw = kc, vc, {}
                o = torch.empty_like(q)
                ws = torch.empty(max(1, libflash.kvcache_workspace_size(q, kp, vp, cache_seqlens=seqlens, **kw)),
                                 dtype=torch.uint8, device="cuda")

                def lib():
                    libflash.attention_with_kvcache(q, kp, vp, cache_seqlens=seqlens, out=o, workspace=ws, **kw)

                def peer(name):
                    with sdpa_kernel([BACKENDS[name]]):
                        return F.scaled_dot_product_attention(qt, kt, vt, enable_gqa=True)

                fns = {"libflash": lib}
                if not page:
                    for name in peers:
                        fns[name] = (lambda name=name: peer(name))
                with torch.no_grad():
                    for fn in fns.values():
                        for _ in range(3):
                            fn()
                    lib()
                    torch.cuda.synchronize()
                    splits = libflash.last_num_splits_used()
                    err = None
                    if not page:
                        ref = peer(peers[0]).transpose(1, 2).float()
                        err = ((o.float() - ref).abs().max() / ref.abs().max()).item()
                    times = time_rounds(fns, a.reps, cache, a.sleep, icache=a.icache)
                ms = {name: statistics.median(t) for name, t in times.items()}
                row = dict(b=b, L=L, d=d, hq=hq, hkv=hkv, page=page, splits=splits, reps=a.reps, ms=ms,
                           gbs={n: kv_bytes / (t * 1e-3) / 1e9 for n, t in ms.items()},
                           copy_fraction=kv_bytes / (ms["libflash"] * 1e-3) / copy_bw, max_rel_err=err)
                rows.append(row)
                print("d%d %d/%d b%-4d L%-7d page%-4d libflash %8.1f us %6.0f GB/s (%.2f of copy) %s" % (
                    d, hq, hkv, b, L, page, ms["libflash"] * 1e3, row["gbs"]["libflash"], row["copy_fraction"],
                    "  ".join("%s %8.1f us x%.3f" % (n, ms[n] * 1e3, ms[n] / ms["libflash"]) for n in ms if n != "libflash")),
                    flush=True)
                del kp, vp, o, ws
            del q, kc, vc
    return rows, copy_bw


def varlen_lengths(lo, hi, total, seed):
    """Lengths drawn uniformly from [lo, hi] until they sum to total (the last one cut to fit)."""
    rng = random.Random(seed)
    lens, s = [], 0
    while s < total:
        n = min(rng.randint(lo, hi), total - s)
        lens.append(n)
        s += n
    return lens


def varlen(a, peers, cache):
    """The varlen rows: {dist, d, hq, hkv, causal, mode, sequences, mean, ms, tflops, max_rel_err}."""
    import libflash.torch as lt

    rows = []
    aten_fa = torch.ops.aten._flash_attention_forward
    for dist in a.varlen_dists.split(","):
        lo, hi = (int(x) for x in dist.split(":"))
        lens = varlen_lengths(lo, hi, a.varlen_total, seed=lo * 7919 + hi)
        total, m = sum(lens), max(lens)
        mean = max(8, int(round(total / len(lens) / 8.0)) * 8)
        cu = torch.tensor([0] + list(__import__("itertools").accumulate(lens)), dtype=torch.int32, device="cuda")
        for d in a.hdims:
            for hq, hkv in a.varlen_heads:
                for causal in (bool(int(c)) for c in a.causal.split(",")):
                    pairs = sum(n * (n + 1) // 2 if causal else n * n for n in lens)
                    bd = max(1, total // mean)
                    pairs_dense = bd * (mean * (mean + 1) // 2 if causal else mean * mean)
                    for mode in a.varlen_modes.split(","):
                        grad = mode == "fwd_bwd"
                        mk = lambda *shape: torch.randn(*shape, device="cuda", dtype=torch.bfloat16, requires_grad=grad)  # noqa: E731
                        q, k, v = mk(total, hq, d), mk(total, hkv, d), mk(total, hkv, d)
                        qd, kd, vd = mk(bd, mean, hq, d), mk(bd, mean, hkv, d), mk(bd, mean, hkv, d)
                        do, dod = torch.randn(total, hq, d, device="cuda", dtype=torch.bfloat16), \
                            torch.randn(bd, mean, hq, d, device="cuda", dtype=torch.bfloat16)
                        o = torch.empty(total, hq, d, device="cuda", dtype=torch.bfloat16)

                        def fa2_out():
                            return aten_fa(q, k, v, cu, cu, m, m, 0.0, causal, False)[0]

                        if grad:
                            def lib():
                                out = lt.flash_attn_varlen_func(q, k, v, cu, cu, m, m, causal=causal)
                                torch.autograd.grad(out, (q, k, v), do)

                            def fa2():
                                torch.autograd.grad(fa2_out(), (q, k, v), do)

                            def dense():
                                torch.autograd.grad(lt.flash_attn_func(qd, kd, vd, causal=causal), (qd, kd, vd), dod)
                        else:
                            def lib():
                                libflash.attention(q, k, v, causal=causal, cu_seqlens_q=cu, cu_seqlens_k=cu,
                                                   max_seqlen_q=m, max_seqlen_k=m, out=o)

                            def fa2():
                                fa2_out()

                            def dense():
                                libflash.attention(qd, kd, vd, causal=causal)

                        fns = {"libflash": lib, "fa2_varlen": fa2, "libflash_dense_mean": dense}
                        with torch.set_grad_enabled(grad):
                            for name, fn in list(fns.items()):
                                try:
                                    for _ in range(3):
                                        fn()
                                except Exception as e:  # a peer this PyTorch cannot run (e.g. no autograd)
                                    print("  %s: %s: %s" % (name, type(e).__name__, str(e)[:120]), flush=True)
                                    del fns[name]
                            err = None
                            with torch.no_grad():
                                libflash.attention(q.detach(), k.detach(), v.detach(), causal=causal, cu_seqlens_q=cu,
                                                   cu_seqlens_k=cu, max_seqlen_q=m, max_seqlen_k=m, out=o)
                                if "fa2_varlen" in fns:
                                    ref = fa2_out().float()
                                    err = ((o.float() - ref).abs().max() / ref.abs().max()).item()
                            torch.cuda.synchronize()
                            times = time_rounds(fns, a.reps, cache, a.sleep, icache=a.icache)
                        mult = 4 * hq * d * (3.5 if grad else 1.0)
                        ms = {n: statistics.median(t) for n, t in times.items()}
                        tf = {n: mult * (pairs_dense if n == "libflash_dense_mean" else pairs) / (t * 1e-3) / 1e12
                              for n, t in ms.items()}
                        row = dict(dist=dist, total=total, sequences=len(lens), max_seqlen=m, mean=mean, dense_batch=bd,
                                   d=d, hq=hq, hkv=hkv, causal=causal, mode=mode, reps=a.reps, ms=ms, tflops=tf,
                                   max_rel_err=err)
                        rows.append(row)
                        lt_ = tf["libflash"]
                        print("%-9s %-8s d%-3d %2d/%-2d %-6s libflash %6.1f TFLOP/s  / dense@%d %s  / FA2 varlen %s  err %s" % (
                            dist, mode, d, hq, hkv, "causal" if causal else "dense", lt_, mean,
                            "%.2f" % (lt_ / tf["libflash_dense_mean"]) if "libflash_dense_mean" in tf else "-",
                            "%.2f" % (lt_ / tf["fa2_varlen"]) if "fa2_varlen" in tf else "-",
                            "%.1e" % err if err is not None else "-"), flush=True)
                        del q, k, v, qd, kd, vd, do, dod, o
    return rows


def train(a, peers, cache):
    """The train rows: {d, n, b, hq, hkv, causal, mode, ms, tflops, max_rel_err_dq}."""
    import libflash.torch as lt

    shapes = [(d, n, max(1, 16384 // n), 2048 // d, 2048 // d, causal) for d in a.hdims for n in a.seqlens
              for causal in (bool(int(c)) for c in a.causal.split(","))]
    shapes += [(128, n, max(1, 16384 // n), 32, 8, True) for n in a.llama_seqlens]
    rows = []
    gen = torch.Generator(device="cuda").manual_seed(0)
    for d, n, b, hq, hkv, causal in shapes:
        mk = lambda h: torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16, generator=gen).requires_grad_()  # noqa: E731
        q, k, v = mk(hq), mk(hkv), mk(hkv)
        do = torch.randn(b, hq, n, d, device="cuda", dtype=torch.bfloat16, generator=gen)

        def lib(det=False):
            return lt.flash_attn_func(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=causal,
                                      deterministic=det).transpose(1, 2)

        def peer(name):
            with sdpa_kernel([BACKENDS[name]]):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=hq != hkv)

        outs = {"libflash": lib, "libflash_det": lambda: lib(True)}
        for name in peers:
            outs[name] = (lambda name=name: peer(name))
        dq = {}
        for name, f in list(outs.items()):
            try:
                for _ in range(2):
                    dq[name] = torch.autograd.grad(f(), (q, k, v), do)[0]
            except Exception as e:  # a peer this PyTorch cannot run here (e.g. GQA on a backend)
                print("  %s: %s: %s" % (name, type(e).__name__, str(e)[:120]), flush=True)
                del outs[name]
        ref = next((dq[p] for p in peers if p in dq), None)
        err = None if ref is None else ((dq["libflash"].float() - ref.float()).abs().max() / ref.float().abs().max()).item()
        kept = {name: f() for name, f in outs.items()}  # one forward each, its graph kept for the bwd timing
        for mode in ("fwd_bwd", "bwd"):
            if mode == "fwd_bwd":
                fns = {name: (lambda f=f: torch.autograd.grad(f(), (q, k, v), do)) for name, f in outs.items()}
            else:
                fns = {name: (lambda o=o: torch.autograd.grad(o, (q, k, v), do, retain_graph=True))
                       for name, o in kept.items()}
            torch.cuda.synchronize()
            times = time_rounds(fns, a.reps, cache, a.sleep, icache=a.icache)
            flops = 4 * b * hq * n * n * d / (2 if causal else 1) * (3.5 if mode == "fwd_bwd" else 2.5)
            ms = {name: statistics.median(t) for name, t in times.items()}
            row = dict(d=d, n=n, b=b, hq=hq, hkv=hkv, causal=causal, mode=mode, reps=a.reps, ms=ms,
                       tflops={name: flops / (t * 1e-3) / 1e12 for name, t in ms.items()}, max_rel_err_dq=err)
            rows.append(row)
            print("d%-3d %2d/%-2d n%-6d b%-3d %-6s %-7s libflash %6.1f TFLOP/s  det %s  %s  dq err %s" % (
                d, hq, hkv, n, b, "causal" if causal else "none", mode, row["tflops"]["libflash"],
                "%.2f" % (ms["libflash_det"] / ms["libflash"]) if "libflash_det" in ms else "-",
                "  ".join("%s x%.3f" % (p, ms[p] / ms["libflash"]) for p in peers if p in ms),
                "%.1e" % err if err is not None else "-"), flush=True)
        del q, k, v, do, kept, dq
    return rows


def pairs(s):
    return [tuple(int(v) for v in x.split("x")) for x in s.split(",")]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mode", default="fwd", choices=["fwd", "decode", "varlen", "train"])
    ap.add_argument("--llama-seqlens", type=ints, default=[4096, 8192, 16384, 32768],
                    help="train: seqlens of the Llama-8B shape (heads 32/8, d128, causal)")
    ap.add_argument("--varlen-dists", default="128:8192,16:512", help="varlen: LO:HI length ranges, comma separated")
    ap.add_argument("--varlen-total", type=int, default=65536, help="varlen: tokens in the packed batch")
    ap.add_argument("--varlen-heads", type=lambda x: [tuple(int(v) for v in p.split("/")) for p in x.split(",")],
                    default=[(16, 16), (32, 8)], help="varlen: heads_q/heads_kv pairs, comma separated")
    ap.add_argument("--varlen-modes", default="fwd,fwd_bwd", help="varlen: fwd, fwd_bwd")
    ap.add_argument("--decode-shapes", type=pairs, default=pairs("1x8192,1x131072,16x8192,16x32768,64x4096,64x32768,128x2048"),
                    help="decode: batch x cached keys, comma separated")
    ap.add_argument("--heads", type=ints, default=[32, 8], help="decode: query heads, KV heads")
    ap.add_argument("--page-sizes", type=ints, default=[0, 16, 256], help="decode: 0 = contiguous cache")
    ap.add_argument("--hdims", type=ints, default=[64, 128, 256])
    ap.add_argument("--seqlens", type=ints, default=[1024, 2048, 4096, 8192, 16384])
    ap.add_argument("--causal", default="0,1", help="0: no mask, 1: causal (bottom-right), comma separated")
    ap.add_argument("--peers", default="cudnn,flash", help="SDPA backends: cudnn, flash (FlashAttention-2)")
    ap.add_argument("--algorithm", default="auto", help="libflash's algorithm (auto, sm90, sm80, ...)")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--icache", default="warm", choices=["warm", "mixed"],
                    help="warm: each timed call right after an untimed one of the same function (default)")
    ap.add_argument("--sleep", type=int, default=2_000_000, help="GPU cycles of torch.cuda._sleep before each timed call (0: none)")
    ap.add_argument("--json")
    a = ap.parse_args()
    peers = a.peers.split(",")
    cache = torch.empty(256 << 20, dtype=torch.int8, device="cuda")
    if a.mode in ("decode", "train", "varlen"):
        if "--hdims" not in " ".join(sys.argv):
            a.hdims = {"decode": [128], "varlen": [64, 128]}.get(a.mode, a.hdims)
        extra = {}
        if a.mode == "decode":
            rows, extra["copy_bytes_per_s"] = decode(a, peers, cache)
        else:
            rows = (train if a.mode == "train" else varlen)(a, peers, cache)
        if a.json:  # the rows under "<mode>_rows", so fa-bench report skips the file (bench_results/README.md)
            doc = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, libflash_version=libflash.version(),
                       libflash_build_info=libflash.build_info(), mode=a.mode, dtype="bf16", **extra,
                       date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), argv=sys.argv)
            doc[a.mode + "_rows"] = rows
            with open(a.json, "w") as f:
                json.dump(doc, f, indent=1)
        return
    rows = []
    used = set()  # the algorithms libflash ran (auto resolves to the GPU's fastest)
    print("%4s %6s %6s %10s %10s %s  %s" % ("d", "mask", "seqlen", "libflash", "", "  ".join("%8s %6s" % (p, "ratio") for p in peers),
                                          "max|d|/max vs " + peers[0]), flush=True)
    for d in a.hdims:
        for n in a.seqlens:
            b, h = max(1, 16384 // n), 2048 // d
            for causal in (bool(int(c)) for c in a.causal.split(",")):
                q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
                o_lib = torch.empty_like(q)
                qt, kt, vt, ot = (x.transpose(1, 2) for x in (q, k, v, o_lib))  # [b, n, h, d] views

                def lib():
                    libflash.attention(qt, kt, vt, causal=causal, algorithm=a.algorithm, out=ot)

                def peer(name):
                    with sdpa_kernel([BACKENDS[name]]):
                        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

                fns = {"libflash": lib}
                for name in peers:
                    fns[name] = (lambda name=name: peer(name))
                with torch.no_grad():
                    for fn in fns.values():  # warm-up (and cuDNN's plan build)
                        for _ in range(3):
                            fn()
                    ref = peer(peers[0]).float()
                    lib()
                    torch.cuda.synchronize()
                    used.add(libflash.last_algorithm_used())
                    err = ((o_lib.float() - ref).abs().max() / ref.abs().max()).item()
                    times = time_rounds(fns, a.reps, cache, a.sleep, icache=a.icache)
                flops = 4 * b * h * n * n * d / (2 if causal else 1)
                row = dict(d=d, n=n, b=b, h=h, causal=causal, reps=a.reps, icache=a.icache, max_rel_err=err,
                           ms={name: statistics.median(t) for name, t in times.items()})
                row["tflops"] = {name: flops / ms / 1e9 for name, ms in row["ms"].items()}
                rows.append(row)
                lt = row["tflops"]["libflash"]
                print("%4d %6s %6d %10.1f %10s %s  %.1e" % (d, "causal" if causal else "dense", n, lt, "TFLOP/s",
                      "  ".join("%8.1f %6.2f" % (row["tflops"][p], lt / row["tflops"][p]) for p in peers), err), flush=True)
                del q, k, v, o_lib, ref
    if a.json:
        # The revision as fa-bench records it (FA_BENCH_GIT_REVISION overrides, e.g. for a copied tree), else the one
        # the library was built from, so that a report can pair this file with fa-bench's run of the same build.
        info = libflash.build_info()
        m = re.search(r"git ([0-9a-f]+)", info)
        revision = os.environ.get("FA_BENCH_GIT_REVISION") or (m.group(1) if m else "")
        doc = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, libflash_version=libflash.version(),
                   libflash_build_info=info, git_revision=revision,
                   algorithm=used.pop() if len(used) == 1 else a.algorithm, mode="fwd", dtype="bf16",
                   date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), argv=sys.argv,
                   rows=rows)
        with open(a.json, "w") as f:
            json.dump(doc, f, indent=1)


if __name__ == "__main__":
    main()
