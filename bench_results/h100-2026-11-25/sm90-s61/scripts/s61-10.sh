#!/usr/bin/env bash
# s61-10: fa-bench now reads the SM clock and the clock-limit reasons (NVML) after each timed call. Is the slow mode
# (s61-5..9) the power cap? A (8k alone, dense first) and S (1k first) once each, then issue 7's masks run once.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
bash scripts/device-sm90.sh build 2>&1 | grep -E "phase build|build:" | head -3
B=build-h100/cli/fa-bench
nvidia-smi -q -d POWER | grep -iE "limit|draw" | head -8
tab() { python3 - "$@" <<'PY'
import json, sys
for f in sys.argv[1:]:
    for x in json.load(open(f))["results"]:
        print("  d%-3d %5d %-22s %.4f ms  clock %s / %s MHz  limited %s of %s" % (x["head_dim"], x["seqlen_q"], x["mask"],
              x["time_ms_median"], x.get("sm_clock_mhz_median"), x.get("sm_clock_mhz_min"), x.get("clock_limited_reps"), x["reps"]))
PY
}
C="--dtype bf16 --head-dim 128 --heads 16 --batch 2 --algo sm90 --no-progress --warmup 5 --reps 30 --mask none;block-sparse:0.5:128;block-sparse:0.1:128"
timeout 60 $B run $C --seqlen 8192 --json $OUT/clk-A.json >/dev/null 2>&1; echo "A:"; tab $OUT/clk-A.json
timeout 60 $B run $C --seqlen 1024,8192 --json $OUT/clk-S.json >/dev/null 2>&1; echo "S:"; tab $OUT/clk-S.json
export PYTHONPATH=bindings/python:scripts LIBFLASH_PATH=build-h100 PYTHONUNBUFFERED=1
bash scripts/device-sm90.sh masks > /dev/null 2>&1
mkdir -p $OUT/masks-s61-10; mv $OUT/fa-bench-*masks* $OUT/masks-s61-10/
python3 scripts/masks_table.py $OUT/masks-s61-10/fa-bench-h100-sm90-masks-d64.json $OUT/masks-s61-10/fa-bench-h100-sm90-masks-d128.json > $OUT/masks-s61-10/masks-table.txt 2>&1
cat $OUT/masks-s61-10/masks-table.txt
tab $OUT/masks-s61-10/fa-bench-h100-sm90-masks-d128.json $OUT/masks-s61-10/fa-bench-h100-sm90-masks-d64.json | tee $OUT/masks-s61-10/clocks.txt
cd $OUT && tar czf s61-10.tgz clk-*.json masks-s61-10 && rm -rf clk-*.json masks-s61-10
echo "end at $(( $(date +%s) - t0 )) s"
