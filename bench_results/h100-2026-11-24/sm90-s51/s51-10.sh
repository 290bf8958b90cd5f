#!/usr/bin/env bash
# s51-10: the causal order's groups at d64 (1k-2k) and d256 with the 1-grid tail (1k), 60 reps, paired.
set -uo pipefail
export OUT
[ -f build-h100/build.ninja ] || bash scripts/device-sm90.sh build-dev 2>&1 | tail -2
B=build-h100/libflash/cuda/sm90/sm90_dev
ninja -C build-h100 sm90_dev > $OUT/build-dev.log 2>&1 || { grep -A8 error $OUT/build-dev.log | head -30; exit 1; }
SM90_DEV_ONLY="grp" SM90_DEV_REF="(prod)" SM90_DEV_PROBLEMS="1024,2048" timeout 250 $B 60 d64 2>&1 | tee $OUT/dev-d64-groups.txt | grep -v " dense "
SM90_DEV_ONLY="grp 8MB t1,grp 12MB t1" SM90_DEV_REF="(prod)" SM90_DEV_PROBLEMS="1024" timeout 150 $B 60 d256 2>&1 | tee $OUT/dev-d256-groups-t1.txt | grep -v " dense "
