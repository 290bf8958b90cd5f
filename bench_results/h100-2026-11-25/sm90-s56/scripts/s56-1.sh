#!/usr/bin/env bash
# s56-1: d128 block-sparse with a staging tile of its own and two Q buffers (shapes.h's schedule reserve 2 KB), with and
# without the deferred O store, on the short lists' kernel or on both; sm90_dev, paired, 60 reps, issue 7's d128 grid.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
[ -f build-h100/build.ninja ] || bash scripts/device-sm90.sh build-dev 2>&1 | tail -1
B=build-h100/libflash/cuda/sm90/sm90_dev
ninja -C build-h100 sm90_dev > $OUT/build-dev.log 2>&1 || { grep -A8 error $OUT/build-dev.log | head -30; exit 1; }
echo "built at $(( $(date +%s) - t0 )) s"
SM90_DEV_REF="d128 bs (prod)" SM90_DEV_ONLY="d128 bs own" SM90_DEV_PROBLEMS="4096:0,4096:0.1,4096:0.25,4096:0.5,8192:0.1,8192:0.25,16384:0.1,16384:0.5" timeout 200 $B 60 sparse 2>&1 | tee $OUT/dev-sparse-d128-s56-1.txt
echo "end at $(( $(date +%s) - t0 )) s"
