#!/usr/bin/env bash
# s67-6: the two-ring tail plan under the three sanitizers (its GPU test on sm90), and fa-bench's masks grid once more on
# a fresh machine.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
bash scripts/device-sm90.sh build 2>&1 | grep -E "^build:" | head -2
for tool in memcheck synccheck racecheck; do
  t0=$(date +%s)
  timeout 140 compute-sanitizer --tool $tool --error-exitcode 9 build-h100/tests/flash_gpu_tests --gtest_brief=1 \
    --gtest_filter='Algorithms/GpuEdges.BlockSparseD64TwoRingsTail/sm90' > $OUT/sanitizer-tail-$tool.log 2>&1
  echo "compute-sanitizer $tool: exit $? in $(( $(date +%s) - t0 )) s: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED' $OUT/sanitizer-tail-$tool.log | tr '\n' ' ')"
done
t0=$(date +%s)
MASKS_RUNS=1 TAG=s67-6 bash scripts/device-sm90.sh masks-runs
echo "masks: $(( $(date +%s) - t0 )) s"
cd $OUT && tar czf s67-6.tgz sanitizer-*.log build.log 2>/dev/null; rm -f sanitizer-*.log
