#!/usr/bin/env bash
# s53-7: v82 (d256 causal walked upwards): build, ptxas, the fast sm90 tests + the d256 small-grid causal test, the
# three sanitizers on that test, then sm90_dev: production's upward choice against the downward kernel, 1k-16k.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
bash scripts/device-sm90.sh build 2>&1 | grep -E "phase build|build:|spill|C75" | head -40
echo "built at $(( $(date +%s) - t0 )) s"
timeout 240 build-h100/tests/flash_gpu_tests --gtest_filter='*sm90*:GpuAuto*:GpuWorkspace*:GpuSmallGrid.Sm90D256CausalSkip:GpuSmallGrid.Sm90D64CausalTopRows-*GpuTailSplit*:*LongKeyRangesD128*:*GpuBackward*:*TwoRings*:*D64Windows*' \
  > "$OUT/gpu-tests-s53-7.log" 2>&1
echo "tests: exit $? ($(grep -c '\[       OK \]' "$OUT/gpu-tests-s53-7.log") ok, $(grep -c '\[  FAILED  \]' "$OUT/gpu-tests-s53-7.log") failed lines)"; grep -E "FAILED|PASSED|tests ran" "$OUT/gpu-tests-s53-7.log" | tail -8
echo "tests done at $(( $(date +%s) - t0 )) s"
GTEST_FILTER='GpuSmallGrid.Sm90D256CausalSkip' bash scripts/device-sm90.sh sanitize-f 2>&1 | grep -E "ERROR SUMMARY|exit|hazard|PASSED|FAILED" | head -12
echo "sanitizers done at $(( $(date +%s) - t0 )) s"
ninja -C build-h100 sm90_dev > $OUT/build-dev.log 2>&1 || { grep -A8 error $OUT/build-dev.log | head -30; exit 1; }
echo "sm90_dev built at $(( $(date +%s) - t0 )) s"
left=$(( 590 - ($(date +%s) - t0) ))
SM90_DEV_ONLY="d256 up" SM90_DEV_REF="(prod)" SM90_DEV_PROBLEMS="1024,2048,4096,8192,16384" timeout $(( left > 60 ? left - 10 : 50 )) \
  build-h100/libflash/cuda/sm90/sm90_dev 40 d256 2>&1 | tee $OUT/dev-d256-up-s53-7.txt | grep -E "candidate|prod\)|d256 up  "
echo "end at $(( $(date +%s) - t0 )) s"
