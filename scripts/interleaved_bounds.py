"""Issue 7's block-sparse cells with each input's DRAM traffic taken away in turn, timed interleaved in one process.

    PYTHONPATH=bindings/python:scripts LIBFLASH_PATH=build-h100/libflash.so \
        python3 scripts/interleaved_bounds.py [--hdims 64,128] [--seqlens 4096] [--batch 2] [--reps 30]
        [--flush dirty|clean] [--maps exact|rows] [--json out.json]

Why (session 65): sessions 62-63 measured the memory side of d128 4k s = .1 (a kernel that only moves the cell's
bytes, and a TMA skeleton of the kernel's own loads: 56 us against the kernel's 60) but never the other side -- how
long the same kernel takes when its loads cost nothing. A tile there is 3 key blocks, and session 26's profile puts a
d128 tile's fixed cost (prologue, drain, epilogue) at ~1.1 blocks, so the arithmetic alone may be as long as the bytes.
Which side binds decides which lever is worth building.

How: the ABI takes Q, K and V as [batch, seqlen, heads, head_dim] views with any non-negative strides (only outputs
must not overlap). An "L2" input here is a view whose row, head and batch strides are all head_dim elements onto one
buffer of (seqlen + heads + batch) rows: element (b, i, h) is row i + h + b. Its footprint is ~1 MB at d128 4k, so its
tiles come from L2 after the first touch, while the kernel, its tile order, its lists and its TMA boxes (aligned, one
head_dim row a box row, as in the packed layout) stay exactly those of the real call. Variants:
  real    Q, K, V packed (fa-bench's tensors): every input from DRAM;
  q-l2    Q from L2, K and V from DRAM;
  kv-l2   K and V from L2, Q from DRAM;
  all-l2  Q, K and V from L2: what is left is the arithmetic, the pipeline and O's store (33.5 MB at d128 4k).
O is always a packed tensor of its own. Every call is preceded by fa-bench's dirty flush (a 256 MB write; --flush clean
also reads another 256 MB, so L2 holds no dirty lines) and a sleep kernel (scripts/interleave.py), every variant and
mask once per round in alternating order. The L2 variants compute on other values than the real call, so their outputs
are only checked to be finite; the real call's output (first density) is checked against an fp32 reference on the GPU,
softmax(QK^T / sqrt(d) + the block mask expanded to elements) V on every fourth head (max error printed; over 0.05 stops
the run).
"""
import argparse
import json
import statistics

import numpy as np
import torch

import libflash
from interleave import add_round_arguments, time_rounds
from interleaved_masks import block_mask_of, compact, exact_map, ints, random_lists


def l2_view(b, n, h, d, gen):
    """A [b, n, h, d] bf16 view with strides (d, d, d, 1) onto (n + h + b) rows of random values: ~n x d x 2 bytes."""
    rows = torch.randn(n + h + b, d, device="cuda", dtype=torch.bfloat16, generator=gen)
    return rows.as_strided((b, n, h, d), (d, d, d, 1))


def map_reference_error(q, k, v, o, keep, block=128):
    """Max |o - reference| under a [query blocks, key blocks] bool map `keep` (on the GPU; broadcast over batch and
    heads): softmax(QK^T / sqrt(d) + the map expanded to elements) V in fp32, on every fourth head."""
    b, n, h, d = q.shape
    elem = keep.repeat_interleave(block, 0).repeat_interleave(block, 1)[:n, :n]
    worst = 0.0
    for bi in range(b):
        for hi in range(0, h, 4):  # every fourth head: enough to catch a wrong tile, cheap
            qf, kf, vf = (x[bi, :, hi].float() for x in (q, k, v))
            s = (qf @ kf.T) / d ** 0.5
            s = s.masked_fill(~elem, float("-inf"))
            ref = torch.softmax(s, dim=-1) @ vf
            worst = max(worst, (o[bi, :, hi].float() - ref).abs().max().item())
    return worst


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hdims", type=ints, default=[64, 128])
    ap.add_argument("--seqlens", type=ints, default=[4096])
    ap.add_argument("--densities", default="0.1,0.25,0.5")
    ap.add_argument("--algorithm", default="sm90")
    ap.add_argument("--flush", default="dirty", choices=["dirty", "clean"])
    ap.add_argument("--batch", type=int, default=2, help="batch (issue 7's grid: 2; FlashAttention's convention: 16384 / seqlen)")
    ap.add_argument("--maps", default="exact", choices=["exact", "rows"],
                    help="exact: fa-bench's maps since session 66 (round(s x all blocks), rows floor or ceil of the mean); "
                         "rows: each row rounded on its own, as before (3 / 32 at 4k s = .1; session 65's runs)")
    add_round_arguments(ap, reps=30)
    a = ap.parse_args()
    densities = [float(x) for x in a.densities.split(",")]
    cache = torch.empty(256 << 20, dtype=torch.int8, device="cuda")
    clean = torch.ones(256 << 20, dtype=torch.int8, device="cuda") if a.flush == "clean" else None
    rng = np.random.default_rng(a.seed)
    gen = torch.Generator(device="cuda").manual_seed(a.seed)
    variants = ("real", "q-l2", "kv-l2", "all-l2")
    rows = []
    for d in a.hdims:
        for n in a.seqlens:
            b, h = a.batch, 2048 // d
            real = [torch.randn(b, n, h, d, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(3)]
            small = [l2_view(b, n, h, d, gen) for _ in range(3)]
            ins = {"real": real, "q-l2": [small[0], real[1], real[2]], "kv-l2": [real[0], small[1], small[2]],
                   "all-l2": small}
            o = {var: torch.empty(b, n, h, d, device="cuda", dtype=torch.bfloat16) for var in variants}
            masks = {"none": {}}
            lists = {}
            for s in densities:  # lists[s]: the map as a [query blocks, key blocks] bool array
                if a.maps == "exact":
                    lists[s] = exact_map(n, s, rng)
                    masks["block-sparse:%g:128" % s] = {"block_mask": compact(lists[s])}
                else:
                    idx = random_lists(n, s, rng)
                    lists[s] = np.zeros((idx.shape[0], idx.shape[0]), dtype=bool)
                    lists[s][np.arange(idx.shape[0])[:, None], idx] = True
                    masks["block-sparse:%g:128" % s] = {"block_mask": block_mask_of(idx)}
            fns = {}
            for var in variants:
                for m, kw in masks.items():
                    def call(var=var, kw=kw):
                        q, k, v = ins[var]
                        libflash.attention(q, k, v, algorithm=a.algorithm, out=o[var], **kw)
                    fns["%s %s" % (var, m)] = call
            with torch.no_grad():
                for name, fn in fns.items():  # warm-up; every output poisoned first and checked finite
                    o[name.split()[0]].fill_(float("nan"))
                    for _ in range(3):
                        fn()
                    torch.cuda.synchronize()
                    if not torch.isfinite(o[name.split()[0]]).all():
                        raise SystemExit("non-finite output: d=%d n=%d %s" % (d, n, name))
                o["real"].fill_(float("nan"))
                fns["real block-sparse:%g:128" % densities[0]]()
                err = map_reference_error(*real, o["real"], torch.from_numpy(lists[densities[0]]).cuda())
                print("d%d n%d real block-sparse:%g: max |O - fp32 reference| %.3g" % (d, n, densities[0], err), flush=True)
                if not err < 0.05:
                    raise SystemExit("the real call disagrees with the reference")
                times = time_rounds(fns, a.reps, cache, a.sleep, clean, icache=a.icache)
            ms = {name: statistics.median(t) for name, t in times.items()}
            rows.append(dict(d=d, n=n, b=b, h=h, reps=a.reps, flush=a.flush, ms=ms,
                             ms_min={name: min(t) for name, t in times.items()},
                             maps=a.maps, blocks={s: int(lists[s].sum()) for s in densities},
                             cells={s: int(lists[s].size) for s in densities}, max_err=err))
            print("d%-3d %6d  batch %d  flush %s  (ms, and / the real dense call)" % (d, n, b, a.flush), flush=True)
            dense = ms["real none"]
            for var in variants:
                cells = ["dense %.4f (%.3f)" % (ms["%s none" % var], ms["%s none" % var] / dense)]
                for s in densities:
                    t = ms["%s block-sparse:%g:128" % (var, s)]
                    lim = float(lists[s].mean()) + 0.05  # the map's own density (.0996 at 4k s = .1; rows: 3 / 32)
                    cells.append("s=%g %.4f (%.4f%s)" % (s, t, t / dense, "" if t / dense <= lim + 1e-9 else " >%.4f" % lim))
                print("  %-7s %s" % (var, "  ".join(cells)), flush=True)
            del real, small, ins, o
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(device=torch.cuda.get_device_name(), torch=torch.__version__, rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
