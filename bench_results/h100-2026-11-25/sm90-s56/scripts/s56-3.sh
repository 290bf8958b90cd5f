#!/usr/bin/env bash
# s56-3: the staged O stored by producer warps, handed over through named barriers instead of an mbarrier, (Traits::kStoreWarps) on d64's three-warpgroup kernel (and the rows
# kernel with 32 producer registers), and on d128's 128-key kernel instead of v84's deferral; sm90_dev, paired.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
[ -f build-h100/build.ninja ] || bash scripts/device-sm90.sh build-dev 2>&1 | tail -1
B=build-h100/libflash/cuda/sm90/sm90_dev
ninja -C build-h100 sm90_dev > $OUT/build-dev.log 2>&1 || { grep -A8 error $OUT/build-dev.log | head -30; exit 1; }
echo "built at $(( $(date +%s) - t0 )) s"
export SM90_DEV_REF="(prod)"
SM90_DEV_ONLY="store warps" SM90_DEV_PROBLEMS="1024,2048,4096,16384" timeout 170 $B 60 d64 2>&1 | tee $OUT/dev-d64-s56-3.txt
echo "d64 at $(( $(date +%s) - t0 )) s"
SM90_DEV_ONLY="store warps,regs32,s54 (store" SM90_DEV_PROBLEMS="1024,2048,4096,16384" timeout 150 $B 60 d128 2>&1 | tee $OUT/dev-d128-s56-3.txt
echo "end at $(( $(date +%s) - t0 )) s"
