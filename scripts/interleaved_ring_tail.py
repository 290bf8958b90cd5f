"""The two-ring kernel's tail plan against the plain order, on one build, interleaved in one process.

    PYTHONPATH=bindings/python:scripts LIBFLASH_PATH=build-h100/libflash.so \
        python3 scripts/interleaved_ring_tail.py [--hdims 64] [--seqlens 4096] [--batch 2] [--reps 30] [--json out.json]

Why (session 67): d64 block-sparse problems with lists of 3+ key blocks run on sm90's two-ring kernel, 192-row tiles on a
persistent grid. At issue 7's d64 4k cells (batch 2 x 32 heads) its 1344 whole tiles are 10 rounds of 132 CTAs and 24
more, so 24 CTAs run an eleventh whole tile while the rest have only the heads' 64-row tiles left (ctatimes: the CTAs
idle ~5.5% of the launch at its end). The tail plan (shapes.h ring_tail_plan, RingOrder) takes 24 heads' last 256 rows
as two 128-row tiles and hands every small tile out after the whole ones. LIBFLASH_SM90_RING_TAIL_PLAIN (read at every
launch) turns the plan off, so both orders run from one library.

How: fa-bench's kind of random map (scripts/interleaved_masks.py exact_map: round(s x all blocks) blocks, rows floor or
ceil of the mean) at s = .1, .25, .5, and the dense call, each order of each map once per round, alternating
(scripts/interleave.py: the dirty flush and a sleep kernel before each call, the call's code warm). Both orders compute
every row with the same code on the same key blocks in the same order, so their outputs must be bit-identical; the
plan's is also checked against an fp32 reference (every fourth head; over 0.05 stops the run).
"""
import argparse
import json
import os
import statistics

import numpy as np
import torch

import libflash
from interleave import add_round_arguments, time_rounds
from interleaved_bounds import map_reference_error
from interleaved_masks import compact, exact_map, ints

PLAIN = "LIBFLASH_SM90_RING_TAIL_PLAIN"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hdims", type=ints, default=[64])
    ap.add_argument("--seqlens", type=ints, default=[4096])
    ap.add_argument("--densities", default="0.1,0.25,0.5")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--algorithm", default="sm90")
    add_round_arguments(ap, reps=30)
    a = ap.parse_args()
    densities = [float(x) for x in a.densities.split(",")]
    cache = torch.empty(256 << 20, dtype=torch.int8, device="cuda")
    rng = np.random.default_rng(a.seed)
    gen = torch.Generator(device="cuda").manual_seed(a.seed)
    rows = []
    for d in a.hdims:
        for n in a.seqlens:
            b, h = a.batch, 2048 // d
            q, k, v = (torch.randn(b, n, h, d, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(3))
            o = {arm: torch.empty_like(q) for arm in ("plan", "plain")}
            maps = {s: exact_map(n, s, rng) for s in densities}
            masks = {s: compact(m) for s, m in maps.items()}

            def call(arm, s):
                if arm == "plain":
                    os.environ[PLAIN] = "1"
                else:
                    os.environ.pop(PLAIN, None)
                kw = {} if s is None else {"block_mask": masks[s]}
                libflash.attention(q, k, v, algorithm=a.algorithm, out=o[arm], **kw)

            fns = {"dense": lambda: call("plan", None)}
            for s in densities:
                for arm in ("plan", "plain"):
                    fns["%s %g" % (arm, s)] = (lambda arm=arm, s=s: call(arm, s))
            errs = {}
            with torch.no_grad():
                for s in densities:
                    for arm in ("plan", "plain"):
                        o[arm].fill_(float("nan"))
                        call(arm, s)
                    torch.cuda.synchronize()
                    if not torch.isfinite(o["plan"]).all():
                        raise SystemExit("non-finite output: d=%d n=%d s=%g" % (d, n, s))
                    if not torch.equal(o["plan"], o["plain"]):
                        diff = (o["plan"].float() - o["plain"].float()).abs().max().item()
                        raise SystemExit("d=%d n=%d s=%g: the plan's output differs from the plain order's (max %g)"
                                         % (d, n, s, diff))
                    errs[s] = map_reference_error(q, k, v, o["plan"], torch.from_numpy(maps[s]).cuda())
                    if not errs[s] < 0.05:
                        raise SystemExit("d=%d n=%d s=%g disagrees with the reference: %g" % (d, n, s, errs[s]))
                times = time_rounds(fns, a.reps, cache, a.sleep, icache=a.icache)
            os.environ.pop(PLAIN, None)
            ms = {name: statistics.median(t) for name, t in times.items()}
            dense = ms["dense"]
            print("d%-3d %6d  batch %d  dense %.4f ms  (outputs identical; max |O - ref| %.2g)"
                  % (d, n, b, dense, max(errs.values())), flush=True)
            for s in densities:
                dens = float(maps[s].mean())
                tp, tq = ms["plan %g" % s], ms["plain %g" % s]
                print("  s=%-4g (%.4f)  plan %.4f (%.4f)  plain %.4f (%.4f)  plan / plain %.3f  limit %.4f"
                      % (s, dens, tp, tp / dense, tq, tq / dense, tp / tq, dens + 0.05), flush=True)
            rows.append(dict(d=d, n=n, b=b, h=h, reps=a.reps, ms=ms, err={str(s): e for s, e in errs.items()},
                             density={str(s): float(m.mean()) for s, m in maps.items()}))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(device=torch.cuda.get_device_name(), torch=torch.__version__, rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
