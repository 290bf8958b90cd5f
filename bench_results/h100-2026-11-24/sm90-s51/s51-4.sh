#!/usr/bin/env bash
# s51-4: d256's narrow S_0 against production; issue 7's fa-bench masks and the fast tests on this revision.
set -uo pipefail
export OUT
bash scripts/device-sm90.sh build 2>&1 | grep -E "build:|C75" | head
B=build-h100/libflash/cuda/sm90/sm90_dev
ninja -C build-h100 sm90_dev > $OUT/build-dev.log 2>&1 || { grep -A8 error $OUT/build-dev.log | head -30; exit 1; }
echo "== d256"
SM90_DEV_ONLY="narrow s0" SM90_DEV_REF="(prod)" timeout 200 $B 40 d256 2>&1 | tee $OUT/dev-d256.txt | grep -v " dense "
for r in 1 2; do
  mkdir -p $OUT/run$r; OUT=$OUT/run$r bash scripts/device-sm90.sh masks 2>&1 | tail -2
  python3 scripts/masks_table.py $OUT/run$r/fa-bench-h100-sm90-masks-d64.json $OUT/run$r/fa-bench-h100-sm90-masks-d128.json 2>&1 | tail -12
done
bash scripts/device-sm90.sh testfast 2>&1 | tail -4
