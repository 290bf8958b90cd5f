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
"""
import argparse
import datetime
import json
import os
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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
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
