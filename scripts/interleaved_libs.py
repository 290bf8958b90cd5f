"""Builds of libflash timed against each other, interleaved in one process on the same tensors.

    PYTHONPATH=bindings/python:scripts LIBFLASH_PATH=build-new/libflash.so \
        python3 scripts/interleaved_libs.py --base [NAME=]build-old/libflash.so [--base ...] [--reps 40] [--problems ...]
        [--json out.json]

Why: a change to the launch path (session 52: the dynamic order's counter without its memset) changes what happens on
the GPU's timeline around the kernel, which sm90_dev (it launches the kernels itself) does not see. Here the binding's
flash_fwd is swapped for another build's (the same ABI) call by call, each call timed as
scripts/interleaved_masks.py times one (interleave.time_rounds: a 256 MB write before each call, a sleep kernel while
Python launches it, each timed call right after an untimed one of the same build).

Problems (--problems, comma-separated NAME=d:seqlen:batch:heads:mask): by default issue 7's d64 4k cells (batch 2,
32 heads: none and block-sparse 128 x 128 maps at .1 / .25 / .5, as interleaved_masks.py builds them) and issue 9's
causal 1k cells on the standard grid (16384 tokens, 2048 / d heads), with dense d128 1k as a control (the static order:
session 52 did not change its launch path). Every build's output must equal new's bit for bit. Prints each problem's
median ms under every build, each against the first --base (ratio of medians and paired median), and issue 7's ratios
under each build.
"""
import argparse
import ctypes
import json
import statistics

import numpy as np
import torch

import libflash
from libflash import _capi
from interleave import add_round_arguments, time_rounds
from interleaved_masks import random_block_mask

DEFAULT = ("d64-4k-none=64:4096:2:32:none,d64-4k-bs.1=64:4096:2:32:0.1,d64-4k-bs.25=64:4096:2:32:0.25,"
           "d64-4k-bs.5=64:4096:2:32:0.5,d64-causal-1k=64:1024:16:32:causal,d128-causal-1k=128:1024:16:16:causal,"
           "d256-causal-1k=256:1024:16:8:causal,d128-dense-1k=128:1024:16:16:none")


def problem_inputs(spec, rng):
    """One --problems item NAME=d:seqlen:batch:heads:mask: (name, (d, n, b, h, mask), (q, k, v), attention's mask keywords),
    fresh bf16 inputs in (batch, seqlen, heads, d) and, for a density, fa-bench's random 128 x 128 block pattern."""
    name, shape = spec.split("=")
    d, n, b, h, mask = shape.split(":")
    d, n, b, h = int(d), int(n), int(b), int(h)
    qkv = tuple(torch.randn(b, n, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    kw = {}
    if mask == "causal":
        kw["causal"] = True
    elif mask != "none":
        kw["block_mask"], _ = random_block_mask(n, float(mask), rng)
    return name, (d, n, b, h, mask), qkv, kw


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True, action="append",
                    help="another build's libflash.so (the binding's own, 'new', is LIBFLASH_PATH's); NAME=PATH to name it, "
                         "repeated for more builds (the first is the one new is compared with)")
    ap.add_argument("--problems", default=DEFAULT)
    add_round_arguments(ap)
    a = ap.parse_args()

    fwd = {"new": _capi.flash_fwd}
    print("new:  %s (%s)" % (_capi.library_path, _capi.flash_build_info().decode()), flush=True)
    for i, spec in enumerate(a.base):
        name, path = spec.split("=", 1) if "=" in spec else ("base" if i == 0 else "base%d" % i, spec)
        lib = ctypes.CDLL(path)
        f = lib.flash_fwd
        f.restype, f.argtypes = _capi.flash_fwd.restype, _capi.flash_fwd.argtypes
        lib.flash_build_info.restype = ctypes.c_char_p
        fwd[name] = f
        print("%s: %s (%s)" % (name, path, lib.flash_build_info().decode()), flush=True)
    names = list(fwd)
    base_name = names[1]

    cache = torch.empty(256 << 20, dtype=torch.int8, device="cuda")
    rng = np.random.default_rng(a.seed)
    rows = []
    for spec in a.problems.split(","):
        name, (d, n, b, h, mask), (q, k, v), kw = problem_inputs(spec, rng)
        outs = {w: torch.empty_like(q) for w in names}

        def call(which):
            _capi.flash_fwd = fwd[which]
            try:
                libflash.attention(q, k, v, algorithm="sm90", out=outs[which], **kw)
            finally:
                _capi.flash_fwd = fwd["new"]

        with torch.no_grad():
            for which in names:
                outs[which].fill_(float("nan"))
                for _ in range(3):
                    call(which)
            torch.cuda.synchronize()
            for which in names:
                if not torch.isfinite(outs[which]).all() or not torch.equal(outs[which], outs["new"]):
                    raise SystemExit("%s: %s's output differs from new's (or is not finite)" % (name, which))
            times = time_rounds({w: (lambda w=w: call(w)) for w in names}, a.reps, cache, a.sleep, icache=a.icache)
        ms = {w: statistics.median(t) for w, t in times.items()}
        paired = {w: statistics.median([x / y for x, y in zip(times[w], times[base_name])]) for w in names if w != base_name}
        row = dict(name=name, d=d, n=n, b=b, h=h, mask=mask, reps=a.reps, ms=ms, paired_over_base=paired, base=base_name)
        rows.append(row)
        print("%-16s %s" % (name, "  ".join("%s %.4f ms" % (w, ms[w]) for w in names)) + "  |  " +
              "  ".join("%s/%s %.4f (paired %.4f, %+.2f us)" % (w, base_name, ms[w] / ms[base_name], paired[w],
                                                                 1000 * (ms[w] - ms[base_name])) for w in paired), flush=True)
        del q, k, v, outs
    dense = {r["d"]: r for r in rows if r["mask"] == "none" and r["n"] == 4096}
    for r in rows:
        if r["mask"] not in ("none", "causal") and r["d"] in dense:
            den = dense[r["d"]]["ms"]
            print("issue 7 d%d %d s=%s: %s (time / dense of the same build)" %
                  (r["d"], r["n"], r["mask"], "  ".join("%s %.4f" % (w, r["ms"][w] / den[w]) for w in names)))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(device=torch.cuda.get_device_name(), builds=a.base, new=_capi.library_path, rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
