#!/usr/bin/env python3
"""Issue 7's ratios from fa-bench mask runs: block-sparse time / dense time at each density (to four places, with the
sparse time against its limit's), causal / dense, and dense-causal / window speed-up; then whether every row's
--check passed, and a verdict on each of the issue's three speed criteria over all the rows given.

Usage: masks_table.py [--tokens N] RUN.json [RUN.json ...]
  --tokens N  judge only the problems with batch x seqlen = N (16384: the standard grid) and count only their --check

The files may hold any mix of head dims, batches and seqlens (issue 7's batch-2 grid and the standard grid of
anchors.md, `fa-bench --grid standard`, are each one file a head dim in device-sm90.sh's masks-runs). Rows are matched
on (head dim, batch, seqlen): each block-sparse, causal and window row against the dense row of the same problem.

The limit of a block-sparse cell is s + 0.05 with s the density of the map fa-bench actually ran (the JSON's
block_sparse.block_density), not the nominal one in the mask's name: before session 66 fa-bench rounded each row on
its own, so "block-sparse:0.1" at 4k and 8k was a map of 3 / 32 = .094, and its limit is .144, not .15. Where the
realised density differs from the nominal one by more than 0.0005 the cell prints it.

The verdict (issue 7, "Done when", bf16, d 64 and 128, seqlen 4k-16k):
  block-sparse time <= (s + 0.05) x dense time for s in {0.1, 0.25, 0.5}  -- every such cell present, 4k-16k;
  causal time <= 0.55 x non-causal at 8k                                 -- the 8192 rows;
  window (256, 0) at 16k at least 10x faster than dense causal           -- the 16384 rows.
A criterion with no row to judge prints "not measured", never "met"."""
import json
import sys

MASKS = ["block-sparse:0.1:128", "block-sparse:0.25:128", "block-sparse:0.5:128"]


def load(paths):
    """(d, batch, seqlen) -> {mask: (median ms, realised density or None)}, and (d, batch, seqlen) -> its rows'
    check_passed (None: the row was not checked, fa-bench run without --check)."""
    probs, checks = {}, {}
    for path in paths:
        rows = json.load(open(path))
        rows = rows["results"] if isinstance(rows, dict) else rows
        mine, mine_checks = {}, {}
        for r in rows:
            key = (r["head_dim"], r.get("batch", 0), r["seqlen_q"])
            mine_checks.setdefault(key, []).append(r.get("check_passed"))
            if not r.get("time_ms_median"):
                continue
            bs = r.get("block_sparse") or {}
            mine.setdefault(key, {})[r["mask"]] = (r["time_ms_median"], bs.get("block_density"))
        # A problem's ratios come from one run: a later file that holds the same problem replaces it whole.
        probs.update(mine)
        checks.update(mine_checks)
    return probs, checks


def main(paths, tokens=None):
    probs, checks = load(paths)
    if tokens:
        probs = {k: v for k, v in probs.items() if k[1] * k[2] == tokens}
        checks = {k: v for k, v in checks.items() if k[1] * k[2] == tokens}
    checks = [c for rows in checks.values() for c in rows]
    sparse_cells, sparse_over, causal8k, window16k = 0, [], [], []
    for (d, b, n) in sorted(probs):
        t = probs[(d, b, n)]
        if "none" not in t:
            print(f"d{d} b{b} {n:6d}  no dense row: not judged")
            continue
        dense = t["none"][0]
        cells = [f"dense {dense:.4f} ms"]
        for m in MASKS:
            if m not in t:
                continue
            nominal = float(m.split(":")[1])
            s = t[m][1] if t[m][1] is not None else nominal
            lim = s + 0.05
            ratio = t[m][0] / dense
            real = "" if abs(s - nominal) <= 5e-4 else f" [map {s:.4f}, limit {lim:.4f}]"
            over = "" if ratio <= lim + 1e-9 else f" (>{lim:.4f}: {t[m][0]:.4f} ms against {lim * dense:.4f})"
            cells.append(f"s={m.split(':')[1]} {ratio:.4f}{real}{over}")
            if 4096 <= n <= 16384:
                sparse_cells += 1
                if over:
                    sparse_over.append(f"d{d} b{b} {n} s={m.split(':')[1]} {ratio:.4f} > {lim:.4f}")
        if "causal" in t:
            causal = t["causal"][0] / dense
            cells.append(f"causal/dense {causal:.3f}")
            if n == 8192:
                causal8k.append((d, b, causal))
            if "window:256,0" in t:
                speedup = t["causal"][0] / t["window:256,0"][0]
                cells.append(f"causal/window(256,0) {speedup:.1f}x")
                if n == 16384:
                    window16k.append((d, b, speedup))
        print(f"d{d:<3d} b{b} {n:6d}  " + "  ".join(cells))
    unchecked = sum(c is None for c in checks)
    failed = sum(c is False for c in checks)
    print(f"--check: {len(checks) - unchecked - failed} of {len(checks)} rows passed, {failed} failed, {unchecked} not checked")

    def verdict(name, ok, measured, detail):
        state = "not measured" if not measured else ("met" if ok else "NOT met")
        print(f"issue 7: {name}: {state}{': ' + detail if detail else ''}")

    verdict("block-sparse <= (s + .05) x dense, 4k-16k", not sparse_over, sparse_cells,
            f"{sparse_cells - len(sparse_over)} of {sparse_cells} cells within" +
            ("; over: " + ", ".join(sparse_over) if sparse_over else ""))
    verdict("causal <= .55 x dense at 8k", all(c <= 0.55 for _, _, c in causal8k), causal8k,
            ", ".join(f"d{d} b{b} {c:.3f}" for d, b, c in causal8k))
    verdict("window (256, 0) >= 10x faster than dense causal at 16k", all(s >= 10 for _, _, s in window16k), window16k,
            ", ".join(f"d{d} b{b} {s:.1f}x" for d, b, s in window16k))
    return 1 if failed else 0


if __name__ == "__main__":
    args, tokens = sys.argv[1:], None
    if args[:1] == ["--tokens"] and len(args) >= 2:
        tokens, args = int(args[1]), args[2:]
    if not args:
        sys.exit(__doc__)
    sys.exit(main(args, tokens))
