#!/usr/bin/env python3
"""fwdbwd_table.py FA_BENCH_JSON TORCH_SDPA_JSON -- forward+backward (fa-bench --mode fwd_bwd) against
PyTorch SDPA's flash (FlashAttention-2) and cuDNN backends from the same run: milliseconds per
(head dim, mask, seqlen) and the speed ratios peer_ms / our_ms (issue 8's criterion is >= 1.0 x flash)."""
import json
import sys


def main():
    fa = json.load(open(sys.argv[1]))
    peers = json.load(open(sys.argv[2]))["rows"]
    ours, peer = {}, {}
    for r in fa["results"]:
        if r.get("error") or r["mode"] != "fwd_bwd":
            continue
        ours[(r["head_dim"], r["mask"] == "causal", r["seqlen_q"])] = r["time_ms_median"]
    for r in peers:
        if r.get("mode") == "fwd_bwd" and r.get("ms") is not None:
            peer[(r["backend"], r["d"], bool(r["causal"]), r["n"])] = r["ms"]
    seqlens = sorted({k[2] for k in ours})
    print("fwd_bwd, bf16, standard grid; seqlen " + " ".join(f"{n:>7}" for n in seqlens))
    for d in sorted({k[0] for k in ours}):
        for causal in (False, True):
            tag = f"d{d:<3} {'causal' if causal else 'dense ':6}"
            print(f"{tag} libflash ms " + " ".join(f"{ours.get((d, causal, n), float('nan')):7.3f}" for n in seqlens))
            for who, name in (("flash", "FA2"), ("cudnn", "cuDNN")):
                vals = []
                for n in seqlens:
                    o, p = ours.get((d, causal, n)), peer.get((who, d, causal, n))
                    vals.append(f"{p / o:7.2f}" if o and p else "    n/a")
                print(f"{tag} {name:5}/ours " + " ".join(vals))


if __name__ == "__main__":
    main()
