#!/usr/bin/env bash
# s62-11: issue 7's masks run twice on production on one more fresh machine (the final figures' second machine), tarred.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
bash scripts/device-sm90.sh build 2>&1 | grep -E "phase build|build:" | head -3
export PYTHONPATH=bindings/python:scripts LIBFLASH_PATH=build-h100 PYTHONUNBUFFERED=1
for r in 1 2; do
  bash scripts/device-sm90.sh masks > /dev/null 2>&1
  mkdir -p "$OUT/masks-s62-11-run$r"; mv "$OUT"/fa-bench-*masks* "$OUT/masks-s62-11-run$r/"
  python3 scripts/masks_table.py "$OUT"/masks-s62-11-run$r/fa-bench-h100-sm90-masks-d64.json "$OUT"/masks-s62-11-run$r/fa-bench-h100-sm90-masks-d128.json \
    > "$OUT/masks-s62-11-run$r/masks-table.txt" 2>&1
  echo "masks run $r at $(( $(date +%s) - t0 )) s"; cat "$OUT/masks-s62-11-run$r/masks-table.txt"
done
for r in 1 2; do python3 scripts/floor_table.py bench_results/h100-2026-11-25/sm90-s62/final/io-floor-grid-s62-4.txt $OUT/masks-s62-11-run$r/fa-bench-h100-sm90-masks-d*.json > $OUT/masks-s62-11-run$r/floor-table.txt; done
cd "$OUT" && tar czf s62-11-results.tgz masks-s62-11-run* && rm -rf masks-s62-11-run*
echo "end at $(( $(date +%s) - t0 )) s"
