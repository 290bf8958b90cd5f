#!/usr/bin/env bash
# s56-9: the final revision's fast sm90 GPU test set (as s55-6: sm90, GpuAuto, GpuWorkspace, GpuSmallGrid, GpuTailSplit).
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
bash scripts/device-sm90.sh build 2>&1 | grep -E "phase build|build:" | head -3
left=$(( 585 - ($(date +%s) - t0) ))
timeout $(( left > 30 ? left : 30 )) build-h100/tests/flash_gpu_tests --gtest_filter='*sm90*:GpuAuto*:GpuWorkspace*:GpuSmallGrid*:*GpuTailSplit*-*LongKeyRangesD128*:*GpuBackward*:*TwoRings*:*D64Windows*' > $OUT/gpu-tests-s56-9.log 2>&1
echo "tests exit $? ($(grep -c '\[       OK \]' $OUT/gpu-tests-s56-9.log) ok, $(grep -c '\[  FAILED  \]' $OUT/gpu-tests-s56-9.log) failed lines) at $(( $(date +%s) - t0 )) s"
grep -E "FAILED|PASSED|tests ran" $OUT/gpu-tests-s56-9.log | tail -8; grep "\[ RUN" $OUT/gpu-tests-s56-9.log | tail -1
