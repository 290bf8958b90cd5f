#!/usr/bin/env bash
# s54-6: v83: fa-bench standard grid, then torch_sdpa.py, then the table, a second time (s54-5's fa-bench d128 dense 16k
# median fell in its slow mode); then the GPU tests s54-4's fast set leaves out (the small grid, the tail split, d128's
# long ranges, two rings, d64 windows, then the backward's) until the call's limit.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
bash scripts/device-sm90.sh build 2>&1 | grep -E "phase build|build:" | head -3
mkdir -p $OUT/table; OUT=$OUT/table bash scripts/device-sm90.sh bench peers table > $OUT/table/phases.log 2>&1
echo "table at $(( $(date +%s) - t0 )) s"; grep -E "sm90/cuDNN" $OUT/table/table.txt
cd "$OUT" && tar czf s54-6-table.tgz table && rm -rf table && cd - > /dev/null
left=$(( 585 - ($(date +%s) - t0) ))
timeout $(( left > 30 ? left : 30 )) build-h100/tests/flash_gpu_tests --gtest_filter='GpuSmallGrid*:*GpuTailSplit*:*LongKeyRangesD128*:*TwoRings*:*D64Windows*:*GpuBackward*' > $OUT/gpu-tests-s54-6.log 2>&1
echo "tests exit $? ($(grep -c '\[       OK \]' $OUT/gpu-tests-s54-6.log) ok, $(grep -c '\[  FAILED  \]' $OUT/gpu-tests-s54-6.log) failed lines) at $(( $(date +%s) - t0 )) s"
grep -E "FAILED|PASSED|tests ran" $OUT/gpu-tests-s54-6.log | tail -8; grep "\[ RUN" $OUT/gpu-tests-s54-6.log | tail -1
