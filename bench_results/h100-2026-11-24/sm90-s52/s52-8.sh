#!/usr/bin/env bash
# s52-8: compute-sanitizer on the tests that take tiles from the claimed counters (the final revision).
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
bash scripts/device-sm90.sh build 2>&1 | grep -E "phase build|C75" | head
F='GpuWorkspace*:GpuSmallGrid.Sm90D64CausalTopRows:GpuSmallGrid.Sm90D256CausalSkip'
for tool in racecheck memcheck synccheck; do
  left=$(( 585 - ($(date +%s) - t0) )); [ $left -lt 30 ] && break
  timeout $(( left > 200 ? 180 : left - 15 )) compute-sanitizer --tool $tool --error-exitcode 9 build-h100/tests/flash_gpu_tests \
    --gtest_filter="$F" > "$OUT/sanitizer-s52-8-$tool.log" 2>&1
  echo "compute-sanitizer $tool: exit $?"; grep -E "SUMMARY|PASSED|FAILED|tests ran" "$OUT/sanitizer-s52-8-$tool.log" | tail -3
done
echo "end at $(( $(date +%s) - t0 )) s"
