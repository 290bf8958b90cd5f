#!/usr/bin/env bash
# s63-4: issue 7's masks run twice on production on a fresh machine (session 63's figures), tarred; the event window's fixed part (launch_overhead) on the same machine.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
bash scripts/device-sm90.sh build 2>&1 | grep -E "phase build|build:" | head -3
export PYTHONPATH=bindings/python:scripts LIBFLASH_PATH=build-h100 PYTHONUNBUFFERED=1
for r in 1 2; do
  bash scripts/device-sm90.sh masks > /dev/null 2>&1
  mkdir -p "$OUT/masks-s63-4-run$r"; mv "$OUT"/fa-bench-*masks* "$OUT/masks-s63-4-run$r/"
  python3 scripts/masks_table.py "$OUT"/masks-s63-4-run$r/fa-bench-h100-sm90-masks-d64.json "$OUT"/masks-s63-4-run$r/fa-bench-h100-sm90-masks-d128.json \
    > "$OUT/masks-s63-4-run$r/masks-table.txt" 2>&1
  echo "masks run $r at $(( $(date +%s) - t0 )) s"; cat "$OUT/masks-s63-4-run$r/masks-table.txt"
done
for r in 1 2; do python3 scripts/floor_table.py bench_results/h100-2026-11-25/sm90-s62/final/io-floor-grid-s62-4.txt $OUT/masks-s63-4-run$r/fa-bench-h100-sm90-masks-d*.json > $OUT/masks-s63-4-run$r/floor-table.txt; done
nvcc -O2 -std=c++17 -gencode arch=compute_90a,code=sm_90a -o /tmp/launch_overhead libflash/cuda/sm90/dev/launch_overhead.cu && /tmp/launch_overhead 200 60 > $OUT/launch-overhead-s63-4.txt 2>&1; tail -8 $OUT/launch-overhead-s63-4.txt
cd "$OUT" && tar czf s63-4-results.tgz masks-s63-4-run* && rm -rf masks-s63-4-run*
echo "end at $(( $(date +%s) - t0 )) s"
