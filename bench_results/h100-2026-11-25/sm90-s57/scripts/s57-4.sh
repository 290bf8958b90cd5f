#!/usr/bin/env bash
# s57-4: v85 (d64's three-warpgroup kernel with the tile decoded by its producer): the fast sm90 GPU test set, the d64
# small-grid and window tests, and compute-sanitizer (memcheck, racecheck, synccheck) on the d64 small-grid tests (two
# CTAs, many tiles each: every tile_mhb slot reused).
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
bash scripts/device-sm90.sh build 2>&1 | grep -E "phase build|build:|fwd_hdim64_bf16|spill" | head -8
T=build-h100/tests/flash_gpu_tests
timeout 240 $T --gtest_filter='*sm90*:GpuAuto*:GpuWorkspace*-*GpuTailSplit*:*LongKeyRangesD128*:GpuSmallGrid*:*GpuBackward*:*TwoRings*:*D64Windows*' > $OUT/gpu-tests-fast-s57-4.log 2>&1
echo "fast set exit $? at $(( $(date +%s) - t0 )) s"; grep -E "FAILED|PASSED|tests ran" $OUT/gpu-tests-fast-s57-4.log | tail -5
timeout 150 $T --gtest_filter='GpuSmallGrid.Sm90D64*:*D64Windows*' > $OUT/gpu-tests-d64-s57-4.log 2>&1
echo "d64 small grid + windows exit $? at $(( $(date +%s) - t0 )) s"; grep -E "FAILED|PASSED|tests ran" $OUT/gpu-tests-d64-s57-4.log | tail -5
for tool in racecheck synccheck memcheck; do
  left=$(( 580 - ($(date +%s) - t0) )); [ $left -lt 20 ] && break
  timeout $(( left < 120 ? left : 120 )) compute-sanitizer --tool $tool --error-exitcode 9 $T --gtest_brief=1 --gtest_filter='GpuSmallGrid.Sm90D64*' > $OUT/sanitizer-d64-$tool-s57-4.log 2>&1
  echo "compute-sanitizer $tool: exit $? at $(( $(date +%s) - t0 )) s"; grep -E "SUMMARY|PASSED|FAILED" $OUT/sanitizer-d64-$tool-s57-4.log | tail -3
done
echo "end at $(( $(date +%s) - t0 )) s"
