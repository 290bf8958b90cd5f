#!/usr/bin/env python3
"""Summarise ncu's source page (--page source --print-source sass --csv, optionally gzipped): where a kernel's warp stall
samples fall, by stall reason, by opcode and by instruction (the top ones, with their leading reasons and executions).

    python3 scripts/ncu_src_summary.py ncu-src-rings.csv[.gz] [--top 40] [--regions 0.003]

Used on the d64 two-ring and dense kernels (scripts/device-sm90.sh ncu-src; perf-log, session 40). --regions also
lists runs of consecutive instructions with equal execution counts (a tile's prologue, a loop body, ...) holding at
least that share of the samples, each with its cycles per warp and execution: the run's instructions executed over its
own "selected" samples share (a warp issues when selected), split by stall reason. Normalising by the whole kernel's
selected share instead mixes in the producer's spin loops, which issue without progress (perf-log, session 41)."""
import argparse, csv, gzip, io, re, sys
from collections import defaultdict


def rows_of(path):
    raw = gzip.open(path, "rt", errors="replace") if path.endswith(".gz") else open(path, errors="replace")
    lines = raw.read().splitlines()
    start = next((i for i, l in enumerate(lines) if l.startswith('"Address"')), None)
    if start is None:
        sys.exit(f"{path}: no source table (no line starting with \"Address\")")
    rows = []
    for r in csv.DictReader(io.StringIO("\n".join(lines[start:]))):
        if r.get("Address") == "Address" or not r.get("Address", "").startswith("0x"):
            continue  # a repeated header (one per kernel function)
        rows.append(r)
    return rows


def num(r, key):
    try:
        return float(r.get(key) or 0)
    except ValueError:
        return 0.0


def opcode(src):
    s = src.strip()
    s = re.sub(r"^@!?U?P\w+\s+", "", s)  # a predicate
    return s.split(" ")[0].rstrip(";") if s else "?"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("path")
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--regions", type=float, default=None, metavar="SHARE")
    a = ap.parse_args()
    rows = rows_of(a.path)
    reasons = [k for k in rows[0] if k.startswith("stall_") and "(Not Issued)" not in k]
    total = sum(num(r, "Warp Stall Sampling (All Samples)") for r in rows)
    print(f"{a.path}: {len(rows)} instructions, {total:.0f} stall samples")
    by_reason = {k: sum(num(r, k) for r in rows) for k in reasons}
    print("by reason: " + ", ".join(f"{k[6:]} {v / total:.1%}" for k, v in sorted(by_reason.items(), key=lambda x: -x[1]) if v > 0.004 * total))
    by_op = defaultdict(lambda: [0.0, 0.0])
    for r in rows:
        o = opcode(r["Source"])
        o = o.split(".")[0] if not o.startswith(("HGMMA", "WARPGROUP", "SYNCS", "BAR", "MUFU")) else ".".join(o.split(".")[:2])
        by_op[o][0] += num(r, "Warp Stall Sampling (All Samples)")
        by_op[o][1] += num(r, "Instructions Executed")
    print("by opcode (samples share, warp instructions executed):")
    for o, (smp, ex) in sorted(by_op.items(), key=lambda x: -x[1][0])[:24]:
        print(f"  {o:22s} {smp / total:6.1%} {ex:12.0f}")
    print(f"top {a.top} instructions (index, samples share, executions, leading reasons, SASS):")
    order = sorted(range(len(rows)), key=lambda i: -num(rows[i], "Warp Stall Sampling (All Samples)"))[: a.top]
    for i in sorted(order):
        r = rows[i]
        smp = num(r, "Warp Stall Sampling (All Samples)")
        lead = sorted(((num(r, k), k[6:]) for k in reasons), reverse=True)[:2]
        why = " ".join(f"{k}:{v / smp:.0%}" for v, k in lead if v > 0) if smp else ""
        print(f"  {i:5d} {smp / total:6.2%} {num(r, 'Instructions Executed'):10.0f}  {why:28s} {r['Source'].strip()[:90]}")
    if a.regions is not None:
        print_regions(rows, reasons, total, a.regions)


def print_regions(rows, reasons, total, share):
    sel_key = next(k for k in reasons if k.startswith("stall_selected"))
    runs, start = [], 0
    for i in range(1, len(rows) + 1):
        if i == len(rows) or num(rows[i], "Instructions Executed") != num(rows[start], "Instructions Executed"):
            runs.append((start, i - 1))
            start = i
    print(f"regions with >= {share:.1%} of the samples (first, last index, executions, share, cycles per warp and execution, by reason):")
    for a, b in runs:
        reg = rows[a : b + 1]
        smp = sum(num(r, "Warp Stall Sampling (All Samples)") for r in reg)
        ex = num(rows[a], "Instructions Executed")
        if smp < share * total or ex == 0:
            continue
        sel = sum(num(r, sel_key) for r in reg)
        scale = sum(num(r, "Instructions Executed") for r in reg) / sel / ex if sel else 0.0
        by = sorted(((sum(num(r, k) for r in reg) * scale, k[6:]) for k in reasons), reverse=True)
        cyc = sum(v for v, _ in by)
        lead = ", ".join(f"{k} {v:.0f}" for v, k in by[:4] if v >= 1)
        print(f"  {a:5d}-{b:5d} {ex:10.0f} {smp / total:6.2%} {cyc:8.0f}  ({lead})  {reg[0]['Source'].strip()[:50]}")


if __name__ == "__main__":
    main()
