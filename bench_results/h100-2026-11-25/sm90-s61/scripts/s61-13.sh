#!/usr/bin/env bash
# s61-13: fa-bench's clock now sampled during each timed call (a host thread on NVML). The slow mode's A and S
# (d128 8k, dense then s = .5 then s = .1) twice each, then issue 7's masks run once: the clock each row ran at.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
bash scripts/device-sm90.sh build 2>&1 | grep -E "phase build|build:" | head -3
B=build-h100/cli/fa-bench
tab() { python3 - "$@" <<'PY'
import json, sys
for f in sys.argv[1:]:
    for x in json.load(open(f))["results"]:
        print("  d%-3d %5d %-22s %.4f ms  clock %s (min %s) MHz  limited %s of %s  host %.1f us" % (x["head_dim"], x["seqlen_q"], x["mask"],
              x["time_ms_median"], x.get("sm_clock_mhz_median"), x.get("sm_clock_mhz_min"), x.get("clock_limited_reps"), x["reps"],
              x.get("host_call_us_median") or -1))
PY
}
C="--dtype bf16 --head-dim 128 --heads 16 --batch 2 --algo sm90 --no-progress --warmup 5 --reps 30 --mask none;block-sparse:0.5:128;block-sparse:0.1:128"
for r in 1 2; do
  timeout 60 $B run $C --seqlen 8192 --json $OUT/clk13-A$r.json >/dev/null 2>&1; echo "A$r:"; tab $OUT/clk13-A$r.json
  timeout 60 $B run $C --seqlen 1024,8192 --json $OUT/clk13-S$r.json >/dev/null 2>&1; echo "S$r:"; tab $OUT/clk13-S$r.json
done
export PYTHONPATH=bindings/python:scripts LIBFLASH_PATH=build-h100 PYTHONUNBUFFERED=1
bash scripts/device-sm90.sh masks > /dev/null 2>&1
mkdir -p $OUT/masks-s61-13; mv $OUT/fa-bench-*masks* $OUT/masks-s61-13/
python3 scripts/masks_table.py $OUT/masks-s61-13/fa-bench-h100-sm90-masks-d64.json $OUT/masks-s61-13/fa-bench-h100-sm90-masks-d128.json > $OUT/masks-s61-13/masks-table.txt 2>&1
cat $OUT/masks-s61-13/masks-table.txt
tab $OUT/masks-s61-13/fa-bench-h100-sm90-masks-d128.json $OUT/masks-s61-13/fa-bench-h100-sm90-masks-d64.json | tee $OUT/masks-s61-13/clocks.txt
cd $OUT && tar czf s61-13.tgz clk13-*.json masks-s61-13 && rm -rf clk13-*.json masks-s61-13
echo "end at $(( $(date +%s) - t0 )) s"
