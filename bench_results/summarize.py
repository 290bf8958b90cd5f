#!/usr/bin/env python3
"""Summarise one H100 session: fa-bench JSON (libflash) next to torch_sdpa.py JSON (the peers, same GPU,
same lease). Writes markdown to stdout.

    python3 bench_results/summarize.py bench_results/h100-2026-11-22 > bench_results/h100-2026-11-22/SUMMARY.md
"""
import json, os, sys

d = sys.argv[1]
load = lambda name: json.load(open(os.path.join(d, name)))
peers = {}
if os.path.exists(os.path.join(d, "torch-sdpa-h100.json")):
    for r in load("torch-sdpa-h100.json")["rows"]:
        if "tflops" in r:
            peers[(r["mode"], r["d"], r["n"], r["causal"], r["backend"])] = r["tflops"]

def rows(name):
    return load(name)["results"] if os.path.exists(os.path.join(d, name)) else []

out = []
p = out.append
grid = rows("fa-bench-h100-grid.json")
seqlens = sorted({r["seqlen_q"] for f in ("fa-bench-h100-grid.json", "fa-bench-h100-bwd.json") for r in rows(f)})
p("# H100 results (bf16, standard grid: batch*seqlen = 16384, heads = 2048/d)\n")
p("TFLOP/s from the median time; FLOPs = 4*b*h*visible(i,j)*d (exact for the mask). Peers: PyTorch 2.11 SDPA"
  " (`flash` = FlashAttention-2, `cudnn` = cuDNN 9.19) from `torch_sdpa.py` on the same GPU in the same lease.\n")
for mode, fname in (("fwd", "fa-bench-h100-grid.json"), ("fwd_bwd", "fa-bench-h100-bwd.json")):
    rs = [r for r in rows(fname) if r["mode"] == mode and not r.get("error")]
    if not rs:
        continue
    p(f"## {mode}\n")
    p("| d | causal | algorithm | " + " | ".join(str(n) for n in seqlens) + " |")
    p("|---|---|---|" + "---|" * len(seqlens))
    for dim in (64, 128):
        for causal in (False, True):
            mask = "causal" if causal else "none"
            for algo in sorted({r["algo"] for r in rs}, reverse=True):
                t = {r["seqlen_q"]: r["tflops"] for r in rs if r["head_dim"] == dim and r["mask"] == mask and r["algo"] == algo}
                p(f"| {dim} | {'yes' if causal else 'no'} | libflash {algo} | " + " | ".join(f"{t[n]:.0f}" if n in t else "-" for n in seqlens) + " |")
            for backend in ("flash", "cudnn"):
                t = {n: peers.get((mode, dim, n, causal, backend)) for n in seqlens}
                p(f"| {dim} | {'yes' if causal else 'no'} | torch {backend} | " + " | ".join(f"{t[n]:.0f}" if t[n] else "-" for n in seqlens) + " |")
            t = {r["seqlen_q"]: r["tflops"] for r in rs if r["head_dim"] == dim and r["mask"] == mask and r["algo"] == "sm80"}
            for backend in ("flash", "cudnn"):
                ratio = [f"{t[n] / peers[(mode, dim, n, causal, backend)]:.2f}x" if n in t and peers.get((mode, dim, n, causal, backend)) else "-" for n in seqlens]
                p(f"| {dim} | {'yes' if causal else 'no'} | **sm80 / torch {backend}** | " + " | ".join(ratio) + " |")
            if mode == "fwd":
                sp = {r["seqlen_q"]: r.get("speedup_over_naive") for r in rs if r["head_dim"] == dim and r["mask"] == mask and r["algo"] == "sm80"}
                p(f"| {dim} | {'yes' if causal else 'no'} | **sm80 / naive** | " + " | ".join(f"{sp[n]:.1f}x" if sp.get(n) else "-" for n in seqlens) + " |")
    p("")
    if mode == "fwd":
        errs = [r["max_rel_error"] for r in rs if r.get("max_rel_error") is not None]
        fails = [r["name"] for r in rs if r.get("check_passed") is False]
        if errs:
            p(f"--check: {len(errs)} rows, max|o-ref|/max|ref| up to {max(errs):.1e}; failed checks: {fails or 'none'}\n")
        mem = [(r["seqlen_q"], r["head_dim"], r["algo"], r["peak_mem_bytes"]) for r in rs if r["mask"] == "none"]
        p("Peak device memory of the call (inputs + outputs + workspace), MiB, d=128: " + ", ".join(
            f"{n}: sm80 {m / 2**20:.0f} / naive {mn / 2**20:.0f}" for (n, dd, a, m) in mem if dd == 128 and a == "sm80"
            for (n2, dd2, a2, mn) in mem if n2 == n and dd2 == 128 and a2 == "naive") + "\n")

for dim in (64, 128):
    rs = rows(f"fa-bench-h100-masks-d{dim}.json")
    if not rs:
        continue
    p(f"## Masks, d={dim} (sm80, batch 2, heads {2048 // dim}): time relative to dense\n")
    ns = sorted({r["seqlen_q"] for r in rs})
    t = {(r["mask"], r["seqlen_q"]): r["time_ms_median"] for r in rs if not r.get("error")}
    masks = [m for m in dict.fromkeys(r["mask"] for r in rs)]
    p("| mask | " + " | ".join(f"{n} ms | ratio" for n in ns) + " |")
    p("|---|" + "---|---|" * len(ns))
    for m in masks:
        p(f"| {m} | " + " | ".join(f"{t[(m, n)]:.3f} | {t[(m, n)] / t[('none', n)]:.3f}" for n in ns) + " |")
    p("")
    for n in ns:
        checks = []
        for s in (0.1, 0.25, 0.5):
            key = f"block-sparse:{s}:128"
            checks.append(f"s={s}: {t[(key, n)] / t[('none', n)]:.3f} <= {s + 0.05:.2f} {'ok' if t[(key, n)] / t[('none', n)] <= s + 0.05 else 'MISSED'}")
        p(f"- seqlen {n}: block-sparse " + "; ".join(checks))
    if ("causal", 8192) in t:
        c = t[("causal", 8192)] / t[("none", 8192)]
        p(f"- causal / dense at 8k: {c:.3f} (target <= 0.55: {'ok' if c <= 0.55 else 'MISSED'})")
    if ("window:256,0", 16384) in t:
        w = t[("causal", 16384)] / t[("window:256,0", 16384)]
        p(f"- dense causal / window (256,0) at 16k: {w:.1f}x faster (target >= 10x: {'ok' if w >= 10 else 'MISSED'})")
    p("")
print("\n".join(out))
