#!/usr/bin/env bash
# s52-10: the final revision (04ead16: epochs never in the top 2^16 either): the tests that take tiles.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
bash scripts/device-sm90.sh build 2>&1 | grep -E "phase build|C75" | head
timeout 400 build-h100/tests/flash_gpu_tests \
  --gtest_filter='GpuWorkspace*:*GpuEdges.BlockSparse*/sm90:GpuSmallGrid.Sm90D64CausalTopRows:GpuSmallGrid.Sm90D256CausalSkip:*GpuEdges.LongSequenceCausal/sm90:*GpuEdges.SlidingWindows/sm90' \
  > "$OUT/gpu-tests-s52-10.log" 2>&1
echo "gpu tests: exit $? ($(grep -c '\[       OK \]' "$OUT/gpu-tests-s52-10.log") ok, $(grep -c '\[  FAILED  \]' "$OUT/gpu-tests-s52-10.log") failed lines)"; grep -E "PASSED|tests ran" "$OUT/gpu-tests-s52-10.log" | tail -3
