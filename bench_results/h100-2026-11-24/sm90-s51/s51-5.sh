#!/usr/bin/env bash
# s51-5: the final revision: the sanitizers on the reduced sm90 sweep, issue 7's fa-bench masks once more (run 3).
set -uo pipefail
export OUT
bash scripts/device-sm90.sh build 2>&1 | grep -E "build:|C75" | head
bash scripts/device-sm90.sh sanitize 2>&1 | tail -12
mkdir -p $OUT/run3; OUT=$OUT/run3 bash scripts/device-sm90.sh masks 2>&1 | tail -2
python3 scripts/masks_table.py $OUT/run3/fa-bench-h100-sm90-masks-d64.json $OUT/run3/fa-bench-h100-sm90-masks-d128.json 2>&1 | tail -12
