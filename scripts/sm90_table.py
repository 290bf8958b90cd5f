#!/usr/bin/env python3
"""sm90_table.py FA_BENCH_JSON [TORCH_SDPA_JSON] -- forward TFLOP/s of libflash's algorithms against
PyTorch SDPA's flash (FlashAttention-2) and cuDNN backends, same GPU and run, bf16 standard grid:
one line per (head dim, causal) with a column per sequence length, and the ratios to cuDNN."""
import json
import sys
from collections import defaultdict


def main():
    fa = json.load(open(sys.argv[1]))
    peers = json.load(open(sys.argv[2]))["rows"] if len(sys.argv) > 2 else []
    t = defaultdict(dict)  # (who, d, causal) -> {seqlen: tflops}
    for r in fa["results"]:
        if r.get("error") or r["mode"] != "fwd" or r["mask"] not in ("none", "causal"):
            continue
        t[(r["algo_used"], r["head_dim"], r["mask"] == "causal")][r["seqlen_q"]] = r["tflops"]
    for r in peers:
        if r.get("mode", "fwd") != "fwd" or r.get("tflops") is None:
            continue
        t[(r["backend"], r["d"], bool(r["causal"]))][r["n"]] = r["tflops"]
    seqlens = sorted({n for v in t.values() for n in v})
    print("TFLOP/s, bf16, standard grid; seqlen " + " ".join(f"{n:>6}" for n in seqlens))
    for d in sorted({k[1] for k in t}):
        for causal in (False, True):
            for who in ("sm90", "sm80", "flash", "cudnn"):
                row = t.get((who, d, causal))
                if row:
                    print(f"d{d:<3} {'causal' if causal else 'dense ':6} {who:6} " +
                          " ".join(f"{row.get(n, float('nan')):6.0f}" for n in seqlens))
            ours, ref = t.get(("sm90", d, causal)), t.get(("cudnn", d, causal))
            if ours and ref:
                print(f"d{d:<3} {'causal' if causal else 'dense ':6} sm90/cuDNN " +
                      " ".join(f"{ours.get(n, float('nan')) / ref[n]:6.2f}" if n in ref else "   n/a" for n in seqlens))
            f2 = t.get(("flash", d, causal))
            if ours and f2:
                print(f"d{d:<3} {'causal' if causal else 'dense ':6} sm90/FA2  " +
                      " ".join(f"{ours.get(n, float('nan')) / f2[n]:6.2f}" if n in f2 else "   n/a" for n in seqlens))


if __name__ == "__main__":
    main()
