"""Issue 7's block-sparse ratios in the two memory layouts of Q, K, V and O, timed interleaved in one process.

    PYTHONPATH=bindings/python:scripts LIBFLASH_PATH=build-h100/libflash.so \
        python3 scripts/interleaved_layouts.py [--hdims 64,128] [--seqlens 4096] [--reps 40] [--json out.json]

Why (session 63): the ABI takes Q, K, V and O as [batch, seqlen, heads, head_dim] views with any strides. fa-bench
allocates them token-major (that shape, packed: FlashAttention-2's layout), so a 128-row tile of one head is 128 pieces
of 2 x head_dim bytes, heads x 2 x head_dim bytes apart. PyTorch's SDPA (and ../shared/bench/torch_sdpa.py, the peers'
figures) takes [batch, heads, seqlen, head_dim] packed, i.e. head-major memory: the same tile is one contiguous block.
The short block-sparse calls are bound by their bytes (perf-log, session 62), so how those bytes lie in DRAM may move
them; the dense calls are bound by arithmetic. Here both layouts run the same problems on the same values, every call
in every round (alternating order), each behind fa-bench's dirty flush (a 256 MB write) and a sleep kernel, as
scripts/interleaved_masks.py times them.

Problems: batch 2, heads 2048 / d, bf16, forward, algorithm sm90; masks none and random block-sparse maps of 128 x 128
blocks (round(s x key blocks) distinct key blocks a query block, one map for every batch and head) at 0.1, 0.25, 0.5.
Each layout's output is checked against the other's (the same kernel on the same values: bit-identical expected).
"""
import argparse
import json
import statistics

import numpy as np
import torch

import libflash
from interleave import add_round_arguments, time_rounds
from interleaved_masks import ints, random_block_mask


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hdims", type=ints, default=[64, 128])
    ap.add_argument("--seqlens", type=ints, default=[4096])
    ap.add_argument("--densities", default="0.1,0.25,0.5")
    ap.add_argument("--algorithm", default="sm90")
    add_round_arguments(ap)
    a = ap.parse_args()
    densities = [float(x) for x in a.densities.split(",")]
    limits = {0.1: 0.15, 0.25: 0.30, 0.5: 0.55}
    cache = torch.empty(256 << 20, dtype=torch.int8, device="cuda")
    rng = np.random.default_rng(a.seed)
    rows = []
    for d in a.hdims:
        for n in a.seqlens:
            b, h = 2, 2048 // d
            tok = [torch.randn(b, n, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3)]
            # head-major memory, the same values, seen through the ABI's [batch, seqlen, heads, head_dim] shape
            head = [x.permute(0, 2, 1, 3).contiguous().permute(0, 2, 1, 3) for x in tok]
            assert head[0].stride() == (h * n * d, d, n * d, 1)
            outs = {"bshd": torch.empty_like(tok[0]),
                    "bhsd": torch.empty(b, h, n, d, device="cuda", dtype=torch.bfloat16).permute(0, 2, 1, 3)}
            ins = {"bshd": tok, "bhsd": head}
            masks = {"none": ({}, 1.0)}
            for s in densities:
                bm, actual = random_block_mask(n, s, rng)
                masks["block-sparse:%g:128" % s] = ({"block_mask": bm}, actual)
            fns = {}
            for lay in ("bshd", "bhsd"):
                for m, (kw, _) in masks.items():
                    def call(lay=lay, kw=kw):
                        q, k, v = ins[lay]
                        libflash.attention(q, k, v, algorithm=a.algorithm, out=outs[lay], **kw)
                    fns["%s %s" % (lay, m)] = call
            with torch.no_grad():
                for m in masks:  # warm-up, and the two layouts' outputs set side by side
                    for lay in ("bshd", "bhsd"):
                        outs[lay].fill_(float("nan"))
                        for _ in range(3):
                            fns["%s %s" % (lay, m)]()
                    torch.cuda.synchronize()
                    if not torch.isfinite(outs["bshd"]).all() or not torch.isfinite(outs["bhsd"]).all():
                        raise SystemExit("non-finite output at d=%d n=%d %s" % (d, n, m))
                    diff = (outs["bshd"].float() - outs["bhsd"].float()).abs().max().item()
                    if diff != 0.0:
                        print("note: d%d n%d %s: the layouts' outputs differ by %g" % (d, n, m, diff))
                times = time_rounds(fns, a.reps, cache, a.sleep, icache=a.icache)
            ms = {name: statistics.median(t) for name, t in times.items()}
            rows.append(dict(d=d, n=n, b=b, h=h, reps=a.reps, ms=ms, density={m: s for m, (_, s) in masks.items()}))
            for lay in ("bshd", "bhsd"):
                cells = []
                for s in densities:
                    m = "block-sparse:%g:128" % s
                    ratio = ms["%s %s" % (lay, m)] / ms["%s none" % lay]
                    cells.append("s=%g %.4f (%.4f ms)%s" % (s, ratio, ms["%s %s" % (lay, m)],
                                                            "" if ratio <= limits[s] + 1e-9 else " (>%g)" % limits[s]))
                print("d%-3d %6d %s dense %.4f ms  %s" % (d, n, lay, ms["%s none" % lay], "  ".join(cells)), flush=True)
            del tok, head, outs, ins
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(device=torch.cuda.get_device_name(), torch=torch.__version__, rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
