#!/usr/bin/env bash
# s52-5: the workspace test with many tiles per CTA, and the three sanitizers on it.
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH PYTHONUNBUFFERED=1
OUT=${OUT:-$PWD/device-out}; mkdir -p "$OUT"
t0=$(date +%s)
bash scripts/device-sm90.sh build 2>&1 | grep -E "phase build|error" | head
timeout 120 build-h100/tests/flash_gpu_tests --gtest_filter='GpuWorkspace*' > "$OUT/gpu-tests-s52-5.log" 2>&1
echo "workspace test: exit $?"; tail -3 "$OUT/gpu-tests-s52-5.log"
for tool in memcheck racecheck synccheck; do
  left=$(( 585 - ($(date +%s) - t0) )); [ $left -lt 30 ] && break
  timeout $(( left > 170 ? 150 : left - 15 )) compute-sanitizer --tool $tool --error-exitcode 9 build-h100/tests/flash_gpu_tests \
    --gtest_filter='GpuWorkspace*' > "$OUT/sanitizer-s52-5-$tool.log" 2>&1
  echo "compute-sanitizer $tool: exit $?"; grep -E "SUMMARY|PASSED|FAILED" "$OUT/sanitizer-s52-5-$tool.log" | tail -3
done
echo "end at $(( $(date +%s) - t0 )) s"
