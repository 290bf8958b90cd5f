#!/usr/bin/env bash
# s54-8: d128 with three K/V stages and O staged in the ring (one Q buffer), with and without the early probe, against
# production (2 stages, two Q buffers), paired, 40 reps, the standard grid's d128 problems.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
[ -f build-h100/build.ninja ] || bash scripts/device-sm90.sh build-dev 2>&1 | tail -1
B=build-h100/libflash/cuda/sm90/sm90_dev
ninja -C build-h100 sm90_dev > $OUT/build-dev.log 2>&1 || { grep -A8 error $OUT/build-dev.log | head -30; exit 1; }
echo "built at $(( $(date +%s) - t0 )) s"
SM90_DEV_ONLY="d128 s3" SM90_DEV_REF="(prod)" SM90_DEV_PROBLEMS="1024,2048,4096,16384" timeout 300 $B 40 d128 2>&1 | tee $OUT/dev-d128-s3-s54-8.txt
echo "end at $(( $(date +%s) - t0 )) s"
