#!/usr/bin/env bash
# s60-3: d128 4k block-sparse (fa-bench, dirty flush) on persistent grids of 132 / 128 / 120 / 114 / 103 CTAs
# (LIBFLASH_SM90_MAX_CTAS; 1024 equal 3-block tiles: 7.76 / 8 / 8.5 / 9 / 10 rounds), three passes, grids interleaved.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
bash scripts/device-sm90.sh build 2>&1 | grep -E "phase build|build:" | head -3
B=build-h100/cli/fa-bench
for pass in 1 2 3; do
  for g in 0 128 120 114 103; do
    if [ $g -gt 0 ]; then export LIBFLASH_SM90_MAX_CTAS=$g; else unset LIBFLASH_SM90_MAX_CTAS; fi
    timeout 60 $B run --dtype bf16 --head-dim 128 --heads 16 --batch 2 --seqlen 4096 --algo sm90 \
      --mask "none;block-sparse:0.1:128;block-sparse:0.25:128" --warmup 5 --reps 30 --no-progress \
      --json "$OUT/grid-g$g-p$pass.json" > /dev/null 2>&1 || echo "g$g p$pass failed"
  done
  echo "pass $pass at $(( $(date +%s) - t0 )) s"
done
unset LIBFLASH_SM90_MAX_CTAS
python3 - "$OUT" <<'PY'
import json, sys, glob
d = sys.argv[1]
rows = {}
for f in sorted(glob.glob(d + "/grid-g*-p*.json")):
    g = f.split("grid-g")[1].split("-p")[0]; p = f.split("-p")[1].split(".")[0]
    for x in json.load(open(f))["results"]:
        rows.setdefault((x["mask"], g), []).append((p, x["time_ms_median"]))
dense = {p: t for p, t in rows[("none", "0")]}
for m in ["none", "block-sparse:0.1:128", "block-sparse:0.25:128"]:
    for g in ["0", "128", "120", "114", "103"]:
        v = sorted(rows.get((m, g), []))
        print("%-24s g%-4s %s   / dense(132): %s" % (m, g, " ".join("%.4f" % t for _, t in v),
              " ".join("%.4f" % (t / dense[p]) for p, t in v)))
PY
tar czf $OUT/grid-s60-3.tgz -C $OUT $(cd $OUT && ls grid-g*.json) && rm -f $OUT/grid-g*.json
