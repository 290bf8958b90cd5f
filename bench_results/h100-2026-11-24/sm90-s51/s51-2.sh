#!/usr/bin/env bash
# s51-2: kSkipDiag 2 in production: the diagonal tests, then sm90_dev d256 / d64 (skip 2 = prod, skip 1, none, 12 MB).
set -uo pipefail
export OUT
bash scripts/device-sm90.sh build 2>&1 | grep -E "build:|C75" | head
GTEST_FILTER='*Diagonal*/sm90:*TopRows*/sm90:*TilesThatSeeNoKey*/sm90:*EmptyRows*/sm90:Random/GpuSweep.MatchesReference/sm90_*' bash scripts/device-sm90.sh testf 2>&1 | tail -8
B=build-h100/libflash/cuda/sm90/sm90_dev
ninja -C build-h100 sm90_dev > $OUT/build-dev.log 2>&1 || { grep -A8 error $OUT/build-dev.log | head -30; exit 1; }
echo "== d256"
SM90_DEV_ONLY="skip diag,12MB" SM90_DEV_REF="(prod)" timeout 200 $B 40 d256 2>&1 | tee $OUT/dev-d256.txt | grep -v " dense "
echo "== d64"
SM90_DEV_ONLY="skip diag" SM90_DEV_REF="(prod)" timeout 200 $B 40 d64 2>&1 | tee $OUT/dev-d64.txt | grep -v " dense "
