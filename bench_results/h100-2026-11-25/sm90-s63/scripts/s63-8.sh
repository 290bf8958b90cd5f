#!/usr/bin/env bash
# s63-8: fa-bench's 4k d128 masks cells with the SM clock sampled during the calls (NVML), five runs in one process each,
# to set each run's ratio against the clocks of its dense and block-sparse rows.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
bash scripts/device-sm90.sh build 2>&1 | grep -E "build:" | head -2
mkdir -p $OUT/s63-8
for r in 1 2 3 4 5; do
  timeout 120 build-h100/cli/fa-bench run --dtype bf16 --head-dim 128 --heads 16 --batch 2 --seqlen 4096 --algo sm90 \
     --mask "none;block-sparse:0.1:128;block-sparse:0.25:128" --warmup 5 --reps 30 --sample-clock during --no-progress \
     --json $OUT/s63-8/fb-clock-run$r.json > $OUT/s63-8/fb-clock-run$r.txt 2>&1
  python3 - $OUT/s63-8/fb-clock-run$r.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
rows = d.get("results", d.get("rows"))
dense = [x for x in rows if x["mask"] == "none"][0]
for x in rows:
    print("%-24s %.4f ms  ratio %.4f  clock median %s min %s limited %s" % (x["mask"], x["time_ms_median"], x["time_ms_median"] / dense["time_ms_median"],
          x.get("sm_clock_mhz_median"), x.get("sm_clock_mhz_min"), x.get("clock_limited_reps")))
PY
done
cd $OUT && tar czf s63-8.tgz s63-8 && rm -rf s63-8
