#!/usr/bin/env python3
"""Issue 7's ratios from fa-bench mask runs: block-sparse time / dense time at each density (to four places, with the
sparse time against its limit's), causal / dense, and dense-causal / window speed-up; then whether every row's
--check passed. Usage: masks_table.py fa-bench-...-masks-d64.json [...-d128.json]

The limit of a block-sparse cell is s + 0.05 with s the density of the map fa-bench actually ran (the JSON's
block_sparse.block_density), not the nominal one in the mask's name: before session 66 fa-bench rounded each row on
its own, so "block-sparse:0.1" at 4k and 8k was a map of 3 / 32 = .094, and its limit is .144, not .15. Where the
realised density differs from the nominal one by more than 0.0005 the cell prints it."""
import json
import sys

MASKS = ["block-sparse:0.1:128", "block-sparse:0.25:128", "block-sparse:0.5:128"]
checks = []
for path in sys.argv[1:]:
    rows = json.load(open(path))
    rows = rows["results"] if isinstance(rows, dict) else rows
    checks += [r.get("check_passed") for r in rows]  # None: the row was not checked (fa-bench run without --check)
    t = {(r["head_dim"], r["seqlen_q"], r["mask"]): r["time_ms_median"] for r in rows if r.get("time_ms_median")}
    dens = {(r["head_dim"], r["seqlen_q"], r["mask"]): r["block_sparse"]["block_density"] for r in rows
            if r.get("block_sparse") and r["block_sparse"].get("block_density") is not None}
    for d, n in sorted({(d, n) for d, n, _ in t}):
        dense = t[(d, n, "none")]
        cells = [f"dense {dense:.4f} ms"]
        for m in MASKS:
            nominal = float(m.split(":")[1])
            s = dens.get((d, n, m), nominal)
            lim = s + 0.05
            ratio = t[(d, n, m)] / dense
            real = "" if abs(s - nominal) <= 5e-4 else f" [map {s:.4f}, limit {lim:.4f}]"
            over = "" if ratio <= lim + 1e-9 else f" (>{lim:.4f}: {t[(d, n, m)]:.4f} ms against {lim * dense:.4f})"
            cells.append(f"s={m.split(':')[1]} {ratio:.4f}{real}{over}")
        causal = t[(d, n, "causal")] / dense
        cells.append(f"causal/dense {causal:.3f}")
        cells.append(f"causal/window(256,0) {t[(d, n, 'causal')] / t[(d, n, 'window:256,0')]:.1f}x")
        print(f"d{d} {n:6d}  " + "  ".join(cells))
unchecked = sum(c is None for c in checks)
failed = sum(c is False for c in checks)
print(f"--check: {len(checks) - unchecked - failed} of {len(checks)} rows passed, {failed} failed, {unchecked} not checked")
