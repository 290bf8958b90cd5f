"""The sm90 forward on persistent grids of different sizes, interleaved in one process on the same tensors.

    PYTHONPATH=bindings/python:scripts LIBFLASH_PATH=build-h100/libflash.so \
        python3 scripts/interleaved_grid.py [--grids 0,128,124] [--reps 40] [--problems ...] [--json out.json]

Why (session 54): the standard grid's d128 problems have 2048 equal tiles at every length, 15.5 rounds on 132 SMs --
16 rounds whatever the grid between 128 and 136 CTAs. On 128 CTAs every round is full and four SMs rest; on 132 the
last round runs 68 tiles. Which is faster depends on whether a round's time depends on how many SMs run it (shared L2
and DRAM bandwidth, the power limit's clock). The grid is set through LIBFLASH_SM90_MAX_CTAS (runtime.h
persistent_ctas), which the library reads at every call; 0 in --grids means the variable unset (one CTA per SM, or,
since v83, the library's balanced grid where it takes one: shapes.h balanced_grid).

Problems (--problems, comma-separated NAME=d:seqlen:batch:heads:mask) as scripts/interleaved_libs.py's (its
problem_inputs): mask none, causal or a block-sparse density (fa-bench's random pattern, 128 x 128 blocks). Every grid's output is compared with
the first grid's: equal bit for bit where the grid cannot change a tile's summation order, else within 2e-2 (a split
tile's merge order; printed). Prints each problem's median ms per grid and each grid against the first (ratio of
medians, paired median), and issue 7's time / dense per grid.
"""
import argparse
import json
import os
import statistics

import numpy as np
import torch

import libflash
from interleave import add_round_arguments, time_rounds
from interleaved_libs import problem_inputs

DEFAULT = ("d128-dense-1k=128:1024:16:16:none,d128-dense-2k=128:2048:8:16:none,d128-dense-4k=128:4096:4:16:none,"
           "d128-causal-1k=128:1024:16:16:causal,d64-dense-1k=64:1024:16:32:none,d64-causal-1k=64:1024:16:32:causal,"
           "d256-dense-1k=256:1024:16:8:none,d256-causal-1k=256:1024:16:8:causal,"
           "d64-4k-none=64:4096:2:32:none,d64-4k-bs.1=64:4096:2:32:0.1,d64-4k-bs.25=64:4096:2:32:0.25,"
           "d64-4k-bs.5=64:4096:2:32:0.5,d128-4k-none=128:4096:2:16:none,d128-4k-bs.1=128:4096:2:16:0.1")
VAR = "LIBFLASH_SM90_MAX_CTAS"


def set_grid(g):
    if g > 0:
        os.environ[VAR] = str(g)
    else:
        os.environ.pop(VAR, None)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--grids", default="0,128,124", help="CTAs per launch (0: the variable unset, one per SM)")
    ap.add_argument("--problems", default=DEFAULT)
    add_round_arguments(ap)
    a = ap.parse_args()
    grids = [int(x) for x in a.grids.split(",")]
    names = ["g%d" % g if g > 0 else "sms" for g in grids]
    first = names[0]
    print("%s (%s), grids %s" % (torch.cuda.get_device_name(), libflash._capi.flash_build_info().decode(), names), flush=True)

    cache = torch.empty(256 << 20, dtype=torch.int8, device="cuda")
    rng = np.random.default_rng(a.seed)
    rows = []
    try:
        for spec in a.problems.split(","):
            name, (d, n, b, h, mask), (q, k, v), kw = problem_inputs(spec, rng)
            outs = {w: torch.empty_like(q) for w in names}

            def call(i):
                set_grid(grids[i])
                libflash.attention(q, k, v, algorithm="sm90", out=outs[names[i]], **kw)

            with torch.no_grad():
                for i, w in enumerate(names):
                    outs[w].fill_(float("nan"))
                    for _ in range(3):
                        call(i)
                torch.cuda.synchronize()
                diff = {}
                for w in names:
                    if not torch.isfinite(outs[w]).all():
                        raise SystemExit("%s: %s's output is not finite" % (name, w))
                    diff[w] = (outs[w].float() - outs[first].float()).abs().max().item()
                    if diff[w] > 2e-2:
                        raise SystemExit("%s: %s's output differs from %s's by %g" % (name, w, first, diff[w]))
                times = time_rounds({w: (lambda i=i: call(i)) for i, w in enumerate(names)}, a.reps, cache, a.sleep,
                                    icache=a.icache)
            ms = {w: statistics.median(t) for w, t in times.items()}
            paired = {w: statistics.median([x / y for x, y in zip(times[w], times[first])]) for w in names if w != first}
            rows.append(dict(name=name, d=d, n=n, b=b, h=h, mask=mask, reps=a.reps, ms=ms, paired_over_first=paired,
                             max_diff=diff, first=first))
            print("%-16s %s" % (name, "  ".join("%s %.4f ms" % (w, ms[w]) for w in names)) + "  |  " +
                  "  ".join("%s/%s %.4f (paired %.4f)%s" % (w, first, ms[w] / ms[first], paired[w],
                                                            "" if diff[w] == 0 else " diff %.1e" % diff[w])
                            for w in paired), flush=True)
            del q, k, v, outs
    finally:
        set_grid(0)
    dense = {(r["d"], r["n"]): r for r in rows if r["mask"] == "none" and r["b"] == 2}
    for r in rows:
        if r["mask"] not in ("none", "causal") and (r["d"], r["n"]) in dense:
            den = dense[(r["d"], r["n"])]["ms"]
            print("issue 7 d%d %d s=%s: %s (time / dense on the same grid)" %
                  (r["d"], r["n"], r["mask"], "  ".join("%s %.4f" % (w, r["ms"][w] / den[w]) for w in names)))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(device=torch.cuda.get_device_name(), grids=grids, rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
