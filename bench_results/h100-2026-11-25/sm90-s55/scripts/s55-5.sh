#!/usr/bin/env bash
# s55-5: the O store deferred to the next tile's prologue (Traits::kDeferStore: the staging stores' fence, the warpgroup
# barrier and the TMA store issued once the next tile's S_0 is), against production, sm90_dev, paired: d128 (60 reps,
# then 1k-2k at 100), d64's pair, the two-ring kernel at 4k.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
[ -f build-h100/build.ninja ] || bash scripts/device-sm90.sh build-dev 2>&1 | tail -1
B=build-h100/libflash/cuda/sm90/sm90_dev
ninja -C build-h100 sm90_dev > $OUT/build-dev.log 2>&1 || { grep -A8 error $OUT/build-dev.log | head -30; exit 1; }
echo "built at $(( $(date +%s) - t0 )) s"
export SM90_DEV_REF="(prod)"
SM90_DEV_ONLY="defer" SM90_DEV_PROBLEMS="1024,2048,4096,16384" timeout 150 $B 60 d128 2>&1 | tee $OUT/dev-d128-s55-5.txt
echo "d128 at $(( $(date +%s) - t0 )) s"
SM90_DEV_ONLY="defer" SM90_DEV_PROBLEMS="1024,2048,4096,16384" timeout 150 $B 40 d64 2>&1 | tee $OUT/dev-d64-s55-5.txt
echo "d64 at $(( $(date +%s) - t0 )) s"
SM90_DEV_REF="3wg 2 rings" SM90_DEV_ONLY="2 rings" SM90_DEV_PROBLEMS="4096:0,4096:0.1,4096:0.25,4096:0.5,16384:0.25" timeout 120 $B 60 sparse 2>&1 | tee $OUT/dev-sparse-s55-5.txt
echo "sparse at $(( $(date +%s) - t0 )) s"
SM90_DEV_ONLY="defer" SM90_DEV_PROBLEMS="1024,2048" timeout 100 $B 100 d128 2>&1 | tee $OUT/dev-d128-s55-5b.txt
echo "end at $(( $(date +%s) - t0 )) s"
