"""Block-sparse maps whose rows differ in length, each timed in two mirror images, interleaved in one process.

    PYTHONPATH=bindings/python:scripts LIBFLASH_PATH=build-h100/libflash.so \
        python3 scripts/interleaved_order.py [--hdims 64,128] [--seqlens 4096] [--batch 2] [--reps 20] [--json out.json]

Why (session 66): the sm90 forward hands block-sparse tiles out in a fixed order -- a (batch, head)'s query blocks
together, from its last query block down -- whatever their lists' lengths. fa-bench's random maps give every query
block (nearly) the same number of key blocks, so the order has never mattered in issue 7's grid. Longformer and BigBird
maps do not: their global query blocks list every key block, and global tokens usually come first, so each head's
longest tile is the last one handed out for that head, and the last head's is the launch's last tile. If that costs the
launch a tail, the order should be longest first.

How: each map and its mirror image (query block i -> n - 1 - i, key block j -> n - 1 - j) have the same blocks, the
same work and the same bytes; only where the long rows fall in the order differs. Maps, [n/128 x n/128] blocks,
broadcast over batch and heads:
  longformer  a band of 3 blocks (|i - j| <= 1), plus global row 0 and global column 0;
  bigbird     longformer's, plus 2 random key blocks a query block;
  heavy8      fa-bench's s = .1 map with its first 8 query blocks listing every key block.
Every call is preceded by fa-bench's dirty flush (a 256 MB write) and a sleep kernel (scripts/interleave.py); the
dense call is timed in the same rounds. "ideal" is the map's density x the dense time (the work's share). Each map's
output is poisoned with NaN first, checked finite, and checked against an fp32 reference (every fourth head, both
images); over 0.05 stops the run.
"""
import argparse
import json
import statistics

import numpy as np
import torch

import libflash
from interleave import add_round_arguments, time_rounds
from interleaved_bounds import map_reference_error
from interleaved_masks import compact, ints


def maps(nb, rng):
    band = np.abs(np.arange(nb)[:, None] - np.arange(nb)[None, :]) <= 1
    lf = band.copy()
    lf[0, :] = True
    lf[:, 0] = True
    bb = lf.copy()
    for i in range(nb):
        bb[i, rng.choice(nb, 2, replace=False)] = True
    heavy = np.zeros((nb, nb), dtype=bool)
    per_row = max(1, int(round(0.1 * nb)))
    for i in range(nb):
        heavy[i, rng.choice(nb, per_row, replace=False)] = True
    heavy[:8, :] = True
    return {"longformer": lf, "bigbird": bb, "heavy8": heavy}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hdims", type=ints, default=[64, 128])
    ap.add_argument("--seqlens", type=ints, default=[4096])
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--algorithm", default="sm90")
    add_round_arguments(ap, reps=20)
    a = ap.parse_args()
    cache = torch.empty(256 << 20, dtype=torch.int8, device="cuda")
    rng = np.random.default_rng(a.seed)
    gen = torch.Generator(device="cuda").manual_seed(a.seed)
    rows = []
    for d in a.hdims:
        for n in a.seqlens:
            b, h, nb = a.batch, 2048 // d, (n + 127) // 128
            q, k, v = (torch.randn(b, n, h, d, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(3))
            o = torch.empty_like(q)
            cases = {"none": ({}, None)}
            for name, m in maps(nb, rng).items():
                cases[name] = ({"block_mask": compact(m)}, m)
                mir = m[::-1, ::-1].copy()
                cases[name + "-mirror"] = ({"block_mask": compact(mir)}, mir)
            fns = {name: (lambda kw=kw: libflash.attention(q, k, v, algorithm=a.algorithm, out=o, **kw))
                   for name, (kw, _) in cases.items()}
            errs = {}
            with torch.no_grad():
                for name, fn in fns.items():
                    o.fill_(float("nan"))
                    fn()
                    torch.cuda.synchronize()
                    if not torch.isfinite(o).all():
                        raise SystemExit("non-finite output: d=%d n=%d %s" % (d, n, name))
                    if cases[name][1] is not None:
                        errs[name] = map_reference_error(q, k, v, o, torch.from_numpy(cases[name][1]).cuda())
                        if not errs[name] < 0.05:
                            raise SystemExit("d=%d n=%d %s disagrees with the reference: %g" % (d, n, name, errs[name]))
                times = time_rounds(fns, a.reps, cache, a.sleep, icache=a.icache)
            ms = {name: statistics.median(t) for name, t in times.items()}
            dense = ms["none"]
            print("d%-3d %6d  batch %d  dense %.4f ms  (max |O - ref| %.2g)" % (d, n, b, dense, max(errs.values())), flush=True)
            row = dict(d=d, n=n, b=b, h=h, reps=a.reps, ms=ms, err=errs, density={})
            for name, (_, m) in cases.items():
                if m is None or name.endswith("-mirror"):
                    continue
                dens = float(m.mean())
                row["density"][name] = dens
                t, tm = ms[name], ms[name + "-mirror"]
                print("  %-11s density %.4f  ideal %.4f  as drawn %.4f (%.4f)  mirror %.4f (%.4f)  drawn / mirror %.3f"
                      % (name, dens, dens, t, t / dense, tm, tm / dense, t / tm), flush=True)
            rows.append(row)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(device=torch.cuda.get_device_name(), torch=torch.__version__, rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
