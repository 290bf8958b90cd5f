#!/usr/bin/env bash
# s53-10: v82: the GPU tests s53-7 left out (the backward, whose forward is sm90's, and every small-grid test), then the
# long d256 causal edge test under racecheck.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
bash scripts/device-sm90.sh build 2>&1 | grep -E "phase build|build:" | head -3
timeout 330 build-h100/tests/flash_gpu_tests --gtest_filter='*GpuBackward*:GpuSmallGrid*' > "$OUT/gpu-tests-s53-10.log" 2>&1
echo "tests: exit $? ($(grep -c '\[       OK \]' "$OUT/gpu-tests-s53-10.log") ok, $(grep -c '\[  FAILED  \]' "$OUT/gpu-tests-s53-10.log") failed lines) at $(( $(date +%s) - t0 )) s"
grep -E "FAILED|PASSED|tests ran" "$OUT/gpu-tests-s53-10.log" | tail -6
grep -E "OK \]" "$OUT/gpu-tests-s53-10.log" | awk '{print $(NF-1), $NF, $4}' | sort -n | tail -5
echo "end at $(( $(date +%s) - t0 )) s"
