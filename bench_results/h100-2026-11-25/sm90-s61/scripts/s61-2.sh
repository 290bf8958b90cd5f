#!/usr/bin/env bash
# s61-2: ncu's source page (per-SASS-instruction warp stall samples) for d128 4k block-sparse s = .1 and its dense twin,
# under fa-bench's own dirty flush: --cache-control none and application replay, so every pass is the first timed rep
# after fa-bench's flush (--launch-skip 2: two warm-ups, then the flushed rep). The last untried diagnosis of session 60.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
[ -x build-h100/cli/fa-bench ] || bash scripts/device-sm90.sh build 2>&1 | grep -E "phase build|build:" | head -3
echo "built at $(( $(date +%s) - t0 )) s"
B=build-h100/cli/fa-bench
for cfg in sparse:block-sparse:0.1:128 dense:none; do
  name=${cfg%%:*}; mask=${cfg#*:}
  A="--dtype bf16 --head-dim 128 --heads 16 --batch 2 --seqlen 4096 --algo sm90 --mask $mask --warmup 2 --reps 1 --no-progress"
  timeout 280 ncu --clock-control none --cache-control none --replay-mode application --kernel-name regex:fwd_kernel \
    --launch-skip 2 --launch-count 1 --section SourceCounters --section WarpStateStats --page source --print-source sass --csv \
    $B run $A > "$OUT/ncu-src-d128-$name.csv" 2>&1
  echo "ncu source $name: exit $? $(wc -c < "$OUT/ncu-src-d128-$name.csv") bytes at $(( $(date +%s) - t0 )) s"
  python3 scripts/ncu_src_summary.py "$OUT/ncu-src-d128-$name.csv" --top 30 --regions 0.01 > "$OUT/ncu-src-d128-$name-summary.txt" 2>&1
  head -c 6000 "$OUT/ncu-src-d128-$name-summary.txt"
  gzip -f "$OUT/ncu-src-d128-$name.csv"
done
echo "end at $(( $(date +%s) - t0 )) s"
