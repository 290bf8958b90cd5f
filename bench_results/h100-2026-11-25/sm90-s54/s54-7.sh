#!/usr/bin/env bash
# s54-7: v83's tests: the new GpuSmallGrid.Sm90BalancedGrid, the tail split's, and the sm90 backward's (their forward is
# sm90's, dense problems balanced where they have 8+ rounds).
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
bash scripts/device-sm90.sh build 2>&1 | grep -E "phase build|build:" | head -3
timeout 420 build-h100/tests/flash_gpu_tests --gtest_filter='GpuSmallGrid.Sm90BalancedGrid:*GpuTailSplit*:*Backward*sm90*' > $OUT/gpu-tests-s54-7.log 2>&1
echo "tests exit $? ($(grep -c '\[       OK \]' $OUT/gpu-tests-s54-7.log) ok, $(grep -c '\[  FAILED  \]' $OUT/gpu-tests-s54-7.log) failed lines) at $(( $(date +%s) - t0 )) s"
grep -E "FAILED|PASSED|tests ran|Sm90BalancedGrid|TailSplit" $OUT/gpu-tests-s54-7.log | tail -12; grep "\[ RUN" $OUT/gpu-tests-s54-7.log | tail -1
