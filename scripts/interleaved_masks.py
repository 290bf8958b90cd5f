"""Issue 7's ratios with every mask kind timed interleaved in one process, on the same tensors.

    PYTHONPATH=bindings/python LIBFLASH_PATH=build-h100/libflash.so \
        python3 scripts/interleaved_masks.py [--hdims 64,128] [--seqlens 4096,8192,16384] [--reps 30]
        [--flush dirty|clean] [--json out.json]

Why: fa-bench times each (mask, seqlen) in its own burst of back-to-back launches, the masks one after the other, and
the H100's power cap moves a burst's median by up to 10% (session 22, s22-12). Issue 7's figures are ratios of two such
bursts (block-sparse time / dense time), so a ratio carries the two bursts' clock states as well as the kernels. Here
every round times each mask once, in alternating order, so a change of clocks falls on all of them alike (the method of
scripts/interleaved_peers.py for issue 9). Each call is preceded by a 256 MB write that evicts L2 (as fa-bench's flush)
and by a sleep kernel that keeps the GPU busy while Python launches it, so the events bracket the attention alone.
--flush clean also reads a second 256 MB after that write, so L2 holds no dirty lines whose write-back would share
DRAM with the call (ncu's state; session 44: d128 4k s = .1 .154 dirty, .149 clean).

Problems (fa-bench's masks phase): batch 2, heads 2048 / d, bf16, forward, algorithm sm90. Masks: none, causal
(bottom-right), window (256, 0), and random block-sparse maps of 128 x 128 blocks at densities 0.1, 0.25, 0.5, built
as fa-bench builds them (round(s x key blocks) distinct key blocks per query block, the same for every batch and head;
numpy's generator, so not fa-bench's exact pattern). Time / dense uses the medians; "s" is the map's actual density.
"""
import argparse
import json
import statistics

import numpy as np
import torch

import libflash
from interleave import add_round_arguments, time_rounds


def ints(s):
    return [int(x) for x in s.split(",")]


def random_lists(n, density, rng, block=128):
    """fa-bench's random pattern before session 66: per query block, round(density * key blocks) distinct key blocks (at
    least one; fa-bench now draws round(density * all blocks), rows floor or ceil of the mean),
    the same for every batch and head. An int32 [query blocks, per_row] array, each row sorted."""
    nb = (n + block - 1) // block
    per_row = min(nb, max(1, int(round(density * nb))))
    return np.stack([np.sort(rng.choice(nb, per_row, replace=False)) for _ in range(nb)]).astype(np.int32)


def exact_map(n, density, rng, block=128):
    """fa-bench's random pattern since session 66, as a [query blocks, key blocks] bool map: round(density x all blocks)
    blocks (at least one a query block), every query block floor or ceil of the mean, the longer rows and each row's
    blocks drawn at random (numpy's generator: the same kind of map as fa-bench's, not its very blocks)."""
    nb = (n + block - 1) // block
    total = min(nb * nb, max(nb, int(np.floor(density * nb * nb + 0.5))))
    base, extra = divmod(total, nb)
    counts = np.full(nb, base)
    counts[rng.choice(nb, extra, replace=False)] += 1
    keep = np.zeros((nb, nb), dtype=bool)
    for i in range(nb):
        keep[i, rng.choice(nb, counts[i], replace=False)] = True
    return keep


def compact(block_map, block=128):
    """libflash.BlockMask on the GPU from a [nb, nb] bool map (broadcast over batch and heads)."""
    nb = block_map.shape[0]
    counts = block_map.sum(1).astype(np.int32)
    idx = np.zeros((nb, max(1, int(counts.max()))), dtype=np.int32)
    for i in range(nb):
        js = np.nonzero(block_map[i])[0]
        idx[i, :len(js)] = js
    return libflash.BlockMask(torch.from_numpy(counts)[None, None].cuda(), torch.from_numpy(idx)[None, None].cuda(), block)


def block_mask_of(idx, block=128):
    """A libflash.BlockMask on the GPU from random_lists' array (broadcast over batch and heads)."""
    nb, per_row = idx.shape
    counts = torch.full((1, 1, nb), per_row, dtype=torch.int32, device="cuda")
    return libflash.BlockMask(counts, torch.from_numpy(idx)[None, None].cuda(), block)


def random_block_mask(n, density, rng, block=128):
    """(libflash.BlockMask, actual density) of fa-bench's random pattern (random_lists)."""
    idx = random_lists(n, density, rng, block)
    return block_mask_of(idx, block), idx.shape[1] / idx.shape[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hdims", type=ints, default=[64, 128])
    ap.add_argument("--seqlens", type=ints, default=[4096, 8192, 16384])
    ap.add_argument("--densities", default="0.1,0.25,0.5")
    ap.add_argument("--algorithm", default="sm90")
    add_round_arguments(ap, reps=30)
    ap.add_argument("--flush", default="dirty", choices=["dirty", "clean"],
                    help="dirty: L2 evicted by a 256 MB write (fa-bench's and triton's way; its dirty lines are written back "
                         "during the call); clean: that write followed by a read of another 256 MB (ncu's state: clean L2)")
    a = ap.parse_args()
    densities = [float(x) for x in a.densities.split(",")]
    cache = torch.empty(256 << 20, dtype=torch.int8, device="cuda")
    clean = torch.ones(256 << 20, dtype=torch.int8, device="cuda") if a.flush == "clean" else None
    rng = np.random.default_rng(a.seed)
    rows = []
    for d in a.hdims:
        for n in a.seqlens:
            b, h = 2, 2048 // d
            q, k, v = (torch.randn(b, n, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
            o = torch.empty_like(q)
            masks = {"none": ({}, 1.0), "causal": ({"causal": True}, None), "window:256,0": ({"window": (256, 0)}, None)}
            for s in densities:
                bm, actual = random_block_mask(n, s, rng)
                masks["block-sparse:%g:128" % s] = ({"block_mask": bm}, actual)

            def call(kw):
                libflash.attention(q, k, v, algorithm=a.algorithm, out=o, **kw)

            with torch.no_grad():
                for kw, _ in masks.values():  # warm-up
                    for _ in range(3):
                        call(kw)
                torch.cuda.synchronize()
                if not torch.isfinite(o).all():
                    raise SystemExit("non-finite output at d=%d n=%d" % (d, n))
                times = time_rounds({m: (lambda kw=kw: call(kw)) for m, (kw, _) in masks.items()}, a.reps, cache, a.sleep, clean, icache=a.icache)
            ms = {m: statistics.median(t) for m, t in times.items()}
            row = dict(d=d, n=n, b=b, h=h, reps=a.reps, flush=a.flush, icache=a.icache, ms=ms, ms_min={m: min(t) for m, t in times.items()},
                       density={m: s for m, (_, s) in masks.items() if s is not None})
            rows.append(row)
            cells = []
            for s in densities:
                m = "block-sparse:%g:128" % s
                ratio = ms[m] / ms["none"]
                lim = row["density"][m] + 0.05  # the map's own density (session 66: 3 / 32 at 4k s = .1, limit .1438)
                cells.append("s=%g %.3f%s" % (s, ratio, "" if ratio <= lim + 1e-9 else " (>%g)" % lim))
            cells.append("causal/dense %.3f" % (ms["causal"] / ms["none"]))
            cells.append("causal/window(256,0) %.1fx" % (ms["causal"] / ms["window:256,0"]))
            print("d%-3d %6d  dense %.4f ms  %s" % (d, n, ms["none"], "  ".join(cells)), flush=True)
            del q, k, v, o
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(device=torch.cuda.get_device_name(), torch=torch.__version__, rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
