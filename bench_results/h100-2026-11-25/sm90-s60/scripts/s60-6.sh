#!/usr/bin/env bash
# s60-6: d128 block-sparse with S_0 and / or the drain's P V issued without a ping-pong turn (kDevFreeS0 / kDevFreeDrain);
# sm90_dev paired against production with the dirty flush, three rounds of 60 reps.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
[ -f build-h100/build.ninja ] || bash scripts/device-sm90.sh build-dev 2>&1 | tail -1
B=build-h100/libflash/cuda/sm90/sm90_dev
ninja -C build-h100 sm90_dev > $OUT/build-dev.log 2>&1 || { grep -A8 error $OUT/build-dev.log | head -30; exit 1; }
echo "built at $(( $(date +%s) - t0 )) s"
for r in 1 2 3; do
  SM90_DEV_FLUSH=256 SM90_DEV_REF="d128 bs (prod)" SM90_DEV_ONLY="d128 bs s60" SM90_DEV_PROBLEMS="4096:0.1,4096:0.25,8192:0.1" timeout 150 $B 60 sparse 2>&1 | tee $OUT/dev-sparse-d128-s60-6-run$r.txt | grep -E "d128 bs|rror|FAIL|fail"
  echo "round $r at $(( $(date +%s) - t0 )) s"
done
