#!/usr/bin/env bash
# s61-14: does the during-call NVML sampler slow what it watches (s61-13: d64 4k block-sparse 2.5-3% slower than in any
# other run)? d64 and d128 4k, --sample-clock none / during / after, interleaved, three rounds.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
bash scripts/device-sm90.sh build 2>&1 | grep -E "phase build|build:" | head -3
B=build-h100/cli/fa-bench
for r in 1 2 3; do
  for m in none during after; do
    for d in 64 128; do
      timeout 60 $B run --dtype bf16 --head-dim $d --heads $((2048 / d)) --batch 2 --seqlen 4096 --algo sm90 --no-progress \
        --warmup 5 --reps 30 --mask "none;block-sparse:0.1:128;block-sparse:0.25:128;block-sparse:0.5:128" --sample-clock $m \
        --json $OUT/pt-d$d-$m-r$r.json >/dev/null 2>&1 || echo "d$d $m $r failed"
    done
  done
  echo "round $r at $(( $(date +%s) - t0 )) s"
done
python3 - $OUT <<'PY' | tee $OUT/perturb-s61-14.txt
import json, glob, sys
for d in (64, 128):
    for m in ("none", "during", "after"):
        for f in sorted(glob.glob(f"{sys.argv[1]}/pt-d{d}-{m}-r*.json")):
            res = json.load(open(f))["results"]
            dense = res[0]["time_ms_median"]
            print("d%-3d %-6s %s  dense %.4f  %s" % (d, m, f[-7:-5], dense, "  ".join("%s %.4f (%.4f) clk %s" % (x["mask"][13:17], x["time_ms_median"], x["time_ms_median"] / dense, x.get("sm_clock_mhz_median")) for x in res[1:])))
PY
tar czf $OUT/perturb-s61-14.tgz -C $OUT $(cd $OUT && ls pt-*.json) && rm -f $OUT/pt-*.json
echo "end at $(( $(date +%s) - t0 )) s"
