#!/usr/bin/env python3
"""dev/ab.py -- A/B of two libflash source trees on one GPU (a development harness: not part of libflash.so, not
built by default). Used for refactors that must not slow a kernel.

    git archive <old-revision> | tar -x -C .devcarry/old        # a copy of the old sources (git-ignored, carried)
    python3 dev/ab.py build --old-src .devcarry/old              # on the GPU machine: the old tree into /tmp/ab/old
    python3 dev/ab.py bench --old /tmp/ab/old/cli/fa-bench --new build-device/cli/fa-bench --out out/ab [--deadline S]

`build` configures and builds the old tree's library and fa-bench (Release, sm_90a only, --jobs) beside the new one
(scripts/device.sh build). `bench` times fa-bench's standard grid (fwd and fwd_bwd; d 64, 128, 256; no mask and
causal) and the masks grid with both builds on the same grids, interleaved: each round runs every grid with both
builds, old then new in odd rounds and new then old in even ones, so clock and power drift fall on both alike. A row's
time is the median over rounds of fa-bench's median. Rows whose new / old exceeds --limit (1.02) are re-run alone
(old, new, new, old) and judged on all their samples. Writes the JSON of every run and table.md (the table, the rows
past the limit, the verdict) to --out; exits 1 when a row stays past the limit. --deadline: seconds after which no
new fa-bench run starts (the table is still written from what ran, and says what was cut). --row NAME (repeatable):
time that row of a table alone, --rounds times, instead of the grids (a row that moved, with more samples).
"""

import argparse, json, os, statistics, subprocess, sys, time

T0 = time.time()

GRIDS = {  # name: fa-bench run arguments
    "fwd": ["--grid", "standard", "--mode", "fwd", "--head-dim", "64,128,256", "--mask", "none;causal"],
    "fwd_bwd": ["--grid", "standard", "--mode", "fwd_bwd", "--head-dim", "64,128,256", "--mask", "none;causal"],
    "masks": ["--grid", "standard", "--mode", "fwd", "--head-dim", "64,128", "--seqlen", "4096,8192,16384", "--mask",
              "none;causal;window:256,0;block-sparse:0.1:128;block-sparse:0.25:128;block-sparse:0.5:128"],
}


def run(fb, args, json_path, reps):
    cmd = [fb, "run", "--dtype", "bf16", "--algo", "sm90", "--warmup", "5", "--reps", str(reps), "--no-progress",
           "--json", json_path] + args
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.stderr.write(f"{' '.join(cmd)}: exit {r.returncode}\n{r.stderr[-2000:]}\n")
    with open(json_path) as f:
        return {row["name"]: row for row in json.load(f)["results"] if row.get("time_ms_median")}


def row_args(name):
    """fa-bench arguments of one row from its name: mode/dtype/algo/bB/hH/hkvK/sqS/skS/dD/mask."""
    mode, _dtype, _algo, b, h, hkv, sq, sk, d, mask = name.split("/", 9)
    if sq[2:] != sk[2:] or h[1:] != hkv[3:]:
        raise SystemExit(f"--row {name}: only seqlen_q = seqlen_k and heads_q = heads_kv rows")
    return ["--mode", mode, "--batch", b[1:], "--heads", h[1:], "--seqlen", sq[2:], "--head-dim", d[1:], "--mask", mask]


def key(row):
    return row["name"]


def build(a):
    """The old tree's library and fa-bench, sm_90a, into a.dir (the new tree is scripts/device.sh build's)."""
    cfg = ["cmake", "-S", a.old_src, "-B", a.dir, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release", "-DFLASH_WITH_CUDA=ON",
           "-DFLASH_CUDA_ARCHS=90a", "-DFLASH_CUDA_PTX=OFF", "-DFLASH_BUILD_TESTS=OFF", "-DFLASH_BUILD_EXAMPLES=OFF",
           "-DFLASH_REVISION=old"]
    os.makedirs(os.path.dirname(a.dir.rstrip("/")) or ".", exist_ok=True)
    with open(a.dir.rstrip("/") + ".log", "w") as log:
        for cmd in (cfg, ["cmake", "--build", a.dir, "-j", str(a.jobs), "--target", "flash", "fa-bench"]):
            if subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT).returncode != 0:
                print(f"{' '.join(cmd)} failed (log: {log.name})")
                return 1
    print(f"old tree built in {time.time() - T0:.0f} s: {a.dir}/cli/fa-bench")
    return 0


def main():
    top = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = top.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="build the old tree")
    b.add_argument("--old-src", required=True, help="the old sources (a git archive of the old revision)")
    b.add_argument("--dir", default="/tmp/ab/old", help="its build directory")
    b.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 2) // 2))
    ap = sub.add_parser("bench", help="time both builds, interleaved, and table new / old")
    ap.add_argument("--old", required=True)
    ap.add_argument("--new", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--limit", type=float, default=1.02)
    ap.add_argument("--grids", default="fwd,fwd_bwd,masks")
    ap.add_argument("--head-dim", help="only these head dims (e.g. 128), in every grid")
    ap.add_argument("--row", action="append", default=[],
                    help="time this row (a name from table.md) alone instead of the grids; repeatable")
    ap.add_argument("--deadline", type=float, default=0, help="seconds after which no new run starts (0: none)")
    a = top.parse_args()
    if a.cmd == "build":
        return build(a)
    os.makedirs(a.out, exist_ok=True)
    late = lambda: a.deadline > 0 and time.time() - T0 > a.deadline  # noqa: E731
    cut = []
    if a.head_dim:
        for g in GRIDS.values():
            g[g.index("--head-dim") + 1] = a.head_dim
    builds = {"old": a.old, "new": a.new}
    samples = {}  # (grid, row name) -> {"old": [...], "new": [...]}: fa-bench's medians
    fastest = {}  # (grid, row name) -> {"old": ms, "new": ms}: the fastest call of any run
    rows = {}
    grids = dict(GRIDS)
    if a.row:  # rows named on the command line, each its own "grid" of one row
        grids = {name: row_args(name) for name in a.row}
    for rnd in range(1, a.rounds + 1):
        order = ["old", "new"] if rnd % 2 else ["new", "old"]
        for grid in (list(grids) if a.row else a.grids.split(",")):
            for b in order:
                if late():
                    cut.append(f"round {rnd} {grid} {b}")
                    continue
                tag = grid if not a.row else f"row{list(grids).index(grid)}"
                got = run(builds[b], grids[grid], os.path.join(a.out, f"{b}-{tag}-r{rnd}.json"), a.reps)
                for name, row in got.items():
                    samples.setdefault((grid, name), {"old": [], "new": []})[b].append(row["time_ms_median"])
                    f = fastest.setdefault((grid, name), {})
                    f[b] = min(f.get(b, float("inf")), row["time_ms_min"])
                    rows[(grid, name)] = row
        print(f"round {rnd}: {time.strftime('%H:%M:%S')}", flush=True)

    def ratio(s):
        return statistics.median(s["new"]) / statistics.median(s["old"]) if s["old"] and s["new"] else float("nan")

    # Rows past the limit: re-run alone, both builds interleaved, and judged on every sample.
    moved = [k for k, s in samples.items() if ratio(s) > a.limit]
    for grid, name in moved:
        r = rows[(grid, name)]
        args = ["--mode", r["mode"], "--batch", str(r["batch"]), "--heads", str(r["heads_q"]), "--seqlen", str(r["seqlen_q"]),
                "--head-dim", str(r["head_dim"]), "--mask", r["mask"]]
        for i, b in enumerate(["old", "new", "new", "old"]):
            if late():
                cut.append(f"re-run {grid} {name} {b}")
                continue
            got = run(builds[b], args, os.path.join(a.out, f"rerun-{b}.json"), a.reps)
            for row in got.values():
                samples[(grid, name)][b].append(row["time_ms_median"])
                fastest[(grid, name)][b] = min(fastest[(grid, name)].get(b, float("inf")), row["time_ms_min"])
    # The fastest calls' ratio too: a row whose calls fall in two modes (a slow one both builds reach, e.g. at b1 s16k)
    # can flip its median between runs; the fast mode then says whether the kernel changed.
    lines = ["| grid | row | old ms | new ms | new / old | fastest new / old |", "|---|---|---|---|---|---|"]
    worst, past = 0.0, []
    for (grid, name), s in sorted(samples.items()):
        q = ratio(s)
        worst = max(worst, q)
        mark = " **past**" if q > a.limit else ""
        if q > a.limit:
            past.append(f"{grid} {name}")
        lines.append(f"| {grid} | {name} | {statistics.median(s['old']):.4f} | {statistics.median(s['new']):.4f} | "
                     f"{q:.3f}{mark} | {fastest[(grid, name)].get('new', 0) / fastest[(grid, name)].get('old', 1):.3f} |")
    ratios = sorted(ratio(s) for s in samples.values()) or [float("nan")]
    lines += ["", f"rows: {len(samples)}; re-run: {len(moved)}; new / old median {statistics.median(ratios):.3f}, "
              f"min {ratios[0]:.3f}, max {worst:.3f}; past {a.limit}: {len(past)}"]
    lines += [f"- {p}" for p in past]
    if cut:
        lines += ["", f"cut by the deadline ({a.deadline:.0f} s): " + "; ".join(cut)]
    text = "\n".join(lines) + "\n"
    open(os.path.join(a.out, "table.md"), "w").write(text)
    print(text)
    return 1 if past else 0


if __name__ == "__main__":
    sys.exit(main())
