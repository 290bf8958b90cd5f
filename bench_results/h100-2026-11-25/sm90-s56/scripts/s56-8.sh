#!/usr/bin/env bash
# s56-8: issue 7's 4k block-sparse cells on fewer persistent CTAs (LIBFLASH_SM90_MAX_CTAS 128, 124) against the full grid,
# fa-bench, 50 reps, each grid twice in alternating order; the ratios use the full grid's dense time.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
bash scripts/device-sm90.sh build 2>&1 | grep -E "phase build|build:" | head -3
B=build-h100/cli/fa-bench
for round in 1 2; do
  for c in 132 128 124; do
    if [ $c = 132 ]; then unset LIBFLASH_SM90_MAX_CTAS; else export LIBFLASH_SM90_MAX_CTAS=$c; fi
    for d in 64 128; do
      timeout 60 $B run --dtype bf16 --head-dim $d --heads $((2048 / d)) --batch 2 --seqlen 4096 --algo sm90 \
        --mask "none;block-sparse:0.1:128;block-sparse:0.25:128;block-sparse:0.5:128" --warmup 5 --reps 50 --no-progress \
        --json $OUT/c$c-d$d-r$round.json > /dev/null 2>&1 || echo "fa-bench exit $? (c $c d $d)"
    done
  done
done
unset LIBFLASH_SM90_MAX_CTAS
python3 - "$OUT" <<'PY'
import json, sys, glob
o = sys.argv[1]
def times(c, d, r):
    rows = json.load(open("%s/c%d-d%d-r%d.json" % (o, c, d, r)))["results"]
    return {x["mask"]: x["time_ms_median"] for x in rows}
for r in (1, 2):
    for d in (64, 128):
        base = times(132, d, r)
        for c in (132, 128, 124):
            t = times(c, d, r)
            print("round %d d%-3d ctas %d: dense %.4f ms (%.3f of full grid's)  s = .1 / .25 / .5: %s" % (r, d, c, t["none"], t["none"] / base["none"],
                  " / ".join("%.4f" % (t["block-sparse:%s:128" % s] / base["none"]) for s in ("0.1", "0.25", "0.5"))))
PY
echo "end at $(( $(date +%s) - t0 )) s"
