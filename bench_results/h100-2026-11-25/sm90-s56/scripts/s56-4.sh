#!/usr/bin/env bash
# s56-4: mbarrier waits with try_wait's suspend-time hint (Traits::kWaitSuspend: 1 the producer's, 2 all) on every
# production kernel family; sm90_dev, paired, 40-60 reps.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
[ -f build-h100/build.ninja ] || bash scripts/device-sm90.sh build-dev 2>&1 | tail -1
B=build-h100/libflash/cuda/sm90/sm90_dev
ninja -C build-h100 sm90_dev > $OUT/build-dev.log 2>&1 || { grep -A8 error $OUT/build-dev.log | head -30; exit 1; }
echo "built at $(( $(date +%s) - t0 )) s"
export SM90_DEV_REF="(prod)"
SM90_DEV_ONLY="suspend" SM90_DEV_PROBLEMS="1024,2048,4096,16384" timeout 120 $B 50 d64 2>&1 | tee $OUT/dev-d64-s56-4.txt
echo "d64 at $(( $(date +%s) - t0 )) s"
SM90_DEV_ONLY="suspend" SM90_DEV_PROBLEMS="1024,2048,4096,16384" timeout 100 $B 50 d128 2>&1 | tee $OUT/dev-d128-s56-4.txt
echo "d128 at $(( $(date +%s) - t0 )) s"
SM90_DEV_ONLY="suspend" SM90_DEV_PROBLEMS="1024,4096,16384" timeout 80 $B 40 d256 2>&1 | tee $OUT/dev-d256-s56-4.txt
echo "d256 at $(( $(date +%s) - t0 )) s"
SM90_DEV_REF="3wg 2 rings" SM90_DEV_ONLY="3wg 2 rings,d128 bs" SM90_DEV_PROBLEMS="4096:0,4096:0.1,4096:0.25,4096:0.5,16384:0.25" timeout 120 $B 50 sparse 2>&1 | tee $OUT/dev-sparse-s56-4.txt
echo "end at $(( $(date +%s) - t0 )) s"
