#!/usr/bin/env bash
# session 50, s50-9: issue 7's fa-bench figures twice, and the fast GPU tests, at this revision (production as session 47)
set -uo pipefail
bash scripts/device-sm90.sh build 2>&1 | grep -E "^build|phase" | tail -2
for r in 1 2; do
  mkdir -p $OUT/run$r
  OUT=$OUT/run$r bash scripts/device-sm90.sh masks 2>&1 | tail -3
  python3 scripts/masks_table.py $OUT/run$r/fa-bench-h100-sm90-masks-d64.json $OUT/run$r/fa-bench-h100-sm90-masks-d128.json 2>&1 | tail -12
done
bash scripts/device-sm90.sh testfast 2>&1 | tail -4
