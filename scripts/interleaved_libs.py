"""Two builds of libflash timed against each other, interleaved in one process on the same tensors.

    PYTHONPATH=bindings/python:scripts LIBFLASH_PATH=build-new/libflash.so \
        python3 scripts/interleaved_libs.py --base build-old/libflash.so [--reps 40] [--problems ...] [--json out.json]

Why: a change to the launch path (session 52: the dynamic order's counter without its memset) changes what happens on
the GPU's timeline around the kernel, which sm90_dev (it launches the kernels itself) does not see. Here the binding's
flash_fwd is swapped for the base build's (the same ABI) on alternate calls, each call timed as
scripts/interleaved_masks.py times one (interleave.time_rounds: a 256 MB write before each call, a sleep kernel while
Python launches it, each timed call right after an untimed one of the same build).

Problems (--problems, comma-separated NAME=d:seqlen:batch:heads:mask): by default issue 7's d64 4k cells (batch 2,
32 heads: none and block-sparse 128 x 128 maps at .1 / .25 / .5, as interleaved_masks.py builds them) and issue 9's
causal 1k cells on the standard grid (16384 tokens, 2048 / d heads), with dense d128 1k as a control (its launch path
did not change). Prints each problem's median ms under both builds and new / base, and issue 7's ratios under each.
"""
import argparse
import ctypes
import json
import statistics

import numpy as np
import torch

import libflash
from libflash import _capi
from interleave import add_icache_argument, time_rounds
from interleaved_masks import random_block_mask

DEFAULT = ("d64-4k-none=64:4096:2:32:none,d64-4k-bs.1=64:4096:2:32:0.1,d64-4k-bs.25=64:4096:2:32:0.25,"
           "d64-4k-bs.5=64:4096:2:32:0.5,d64-causal-1k=64:1024:16:32:causal,d128-causal-1k=128:1024:16:16:causal,"
           "d256-causal-1k=256:1024:16:8:causal,d128-dense-1k=128:1024:16:16:none")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True, help="the other build's libflash.so (the binding's own is LIBFLASH_PATH's)")
    ap.add_argument("--problems", default=DEFAULT)
    ap.add_argument("--reps", type=int, default=40)
    ap.add_argument("--seed", type=int, default=24301)
    ap.add_argument("--sleep", type=int, default=2_000_000)
    add_icache_argument(ap)
    ap.add_argument("--json")
    a = ap.parse_args()

    base = ctypes.CDLL(a.base)
    base_fwd = base.flash_fwd
    base_fwd.restype = _capi.flash_fwd.restype
    base_fwd.argtypes = _capi.flash_fwd.argtypes
    new_fwd = _capi.flash_fwd
    base.flash_build_info.restype = ctypes.c_char_p
    print("new:  %s (%s)\nbase: %s (%s)" % (_capi.library_path, _capi.flash_build_info().decode(), a.base,
                                           base.flash_build_info().decode()), flush=True)

    cache = torch.empty(256 << 20, dtype=torch.int8, device="cuda")
    rng = np.random.default_rng(a.seed)
    rows = []
    for spec in a.problems.split(","):
        name, shape = spec.split("=")
        d, n, b, h, mask = shape.split(":")
        d, n, b, h = int(d), int(n), int(b), int(h)
        q, k, v = (torch.randn(b, n, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        outs = {"base": torch.empty_like(q), "new": torch.empty_like(q)}
        kw = {}
        if mask == "causal":
            kw["causal"] = True
        elif mask != "none":
            kw["block_mask"], _ = random_block_mask(n, float(mask), rng)

        def call(which):
            _capi.flash_fwd = base_fwd if which == "base" else new_fwd
            try:
                libflash.attention(q, k, v, algorithm="sm90", out=outs[which], **kw)
            finally:
                _capi.flash_fwd = new_fwd

        with torch.no_grad():
            for which in ("base", "new"):
                outs[which].fill_(float("nan"))
                for _ in range(3):
                    call(which)
            torch.cuda.synchronize()
            if not torch.isfinite(outs["new"]).all() or not torch.equal(outs["new"], outs["base"]):
                raise SystemExit("%s: the builds' outputs differ (or are not finite)" % name)
            times = time_rounds({w: (lambda w=w: call(w)) for w in ("base", "new")}, a.reps, cache, a.sleep, icache=a.icache)
        ms = {w: statistics.median(t) for w, t in times.items()}
        paired = statistics.median([x / y for x, y in zip(times["new"], times["base"])])
        row = dict(name=name, d=d, n=n, b=b, h=h, mask=mask, reps=a.reps, ms=ms, paired_new_over_base=paired)
        rows.append(row)
        print("%-16s base %.4f ms  new %.4f ms  new/base %.4f (paired median %.4f; %+.2f us)" %
              (name, ms["base"], ms["new"], ms["new"] / ms["base"], paired, 1000 * (ms["new"] - ms["base"])), flush=True)
        del q, k, v, outs
    dense = {r["d"]: r for r in rows if r["mask"] == "none" and r["n"] == 4096}
    for r in rows:
        if r["mask"] not in ("none", "causal") and r["d"] in dense:
            den = dense[r["d"]]["ms"]
            print("issue 7 d%d %d s=%s: base %.4f  new %.4f (time / dense of the same build)" %
                  (r["d"], r["n"], r["mask"], r["ms"]["base"] / den["base"], r["ms"]["new"] / den["new"]))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(device=torch.cuda.get_device_name(), base=a.base, new=_capi.library_path, rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
