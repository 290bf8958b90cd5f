#!/usr/bin/env python3
"""Top source lines by warp-stall samples from `ncu -i REPORT --page source --csv --print-source cuda`.
Usage: ncu_top_lines.py SOURCE.csv [N]. Prints the header it found, then the N lines with the most samples."""
import csv
import sys

rows = list(csv.reader(open(sys.argv[1], errors="replace")))
n = int(sys.argv[2]) if len(sys.argv) > 2 else 30
head_i = next((i for i, r in enumerate(rows) if any("Sampl" in c for c in r)), None)
if head_i is None:
    print("no sampling column; first rows:", rows[:5])
    sys.exit(0)
head = rows[head_i]
print("columns:", head)
col = next(i for i, c in enumerate(head) if "Sampl" in c and "All" in c) if any("Sampl" in c and "All" in c for c in head) else next(i for i, c in enumerate(head) if "Sampl" in c)
src = next((i for i, c in enumerate(head) if c.strip().lower() in ("source", "address / source")), 1)
line = next((i for i, c in enumerate(head) if c.strip() == "#" or c.strip().lower() == "line"), 0)
def num(x):
    try:
        return float(x.replace(",", ""))
    except ValueError:
        return 0.0
body = [r for r in rows[head_i + 1:] if len(r) > col]
total = sum(num(r[col]) for r in body) or 1.0
print(f"total samples ({head[col]}): {total:.0f}")
for r in sorted(body, key=lambda r: -num(r[col]))[:n]:
    print(f"{num(r[col]) / total * 100:5.1f}%  {r[line]:>5}  {r[src].strip()[:150]}")
