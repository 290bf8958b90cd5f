#!/usr/bin/env bash
# s57-13: v87 (the block-sparse K/V loaders take the tile's decode from the scheduler): the block-sparse GPU tests,
# compute-sanitizer on the two-ring test and on BlockSparseManyTilesPerCta/sm90; and the Q loader with the scheduler's
# decode as well (QLoaderMhb), sm90_dev, paired, one round of 80 reps.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
bash scripts/device-sm90.sh build 2>&1 | grep -E "phase build|build:" | head -3
T=build-h100/tests/flash_gpu_tests
timeout 200 $T --gtest_filter='*BlockSparse*/sm90:*BlockSparseD64TwoRings*' > $OUT/gpu-tests-sparse-s57-13.log 2>&1
echo "sparse tests exit $? at $(( $(date +%s) - t0 )) s"; grep -E "FAILED|PASSED|tests ran" $OUT/gpu-tests-sparse-s57-13.log | tail -4
for f in 'Algorithms/GpuEdges.BlockSparseD64TwoRings/sm90' 'Algorithms/GpuEdges.BlockSparseManyTilesPerCta/sm90'; do
  for tool in racecheck memcheck synccheck; do
    left=$(( 400 - ($(date +%s) - t0) )); [ $left -lt 20 ] && break 2
    n=$(echo $f | sed 's/.*\.\(BlockSparse[A-Za-z0-9]*\).*/\1/')
    timeout $(( left < 90 ? left : 90 )) compute-sanitizer --tool $tool --error-exitcode 9 $T --gtest_brief=1 --gtest_filter="$f" > $OUT/sanitizer-$n-$tool-s57-13.log 2>&1
    echo "$n $tool: exit $? at $(( $(date +%s) - t0 )) s $(grep -E 'SUMMARY' $OUT/sanitizer-$n-$tool-s57-13.log | tail -1)"
  done
done
B=build-h100/libflash/cuda/sm90/sm90_dev
ninja -C build-h100 sm90_dev > $OUT/build-dev.log 2>&1 || { grep -A8 error $OUT/build-dev.log | head -30; exit 1; }
echo "sm90_dev built at $(( $(date +%s) - t0 )) s"
P="4096:0,4096:0.1,4096:0.25,4096:0.5,8192:0.1"
left=$(( 585 - ($(date +%s) - t0) ))
SM90_DEV_REF="3wg 2 rings" SM90_DEV_ONLY="3wg 2 rings,q loader" SM90_DEV_PROBLEMS="$P" timeout $(( left / 2 )) $B 80 sparse 2>&1 | tee $OUT/dev-sparse-d64-s57-13.txt | grep -E "2 rings" | grep -v epilogue
left=$(( 585 - ($(date +%s) - t0) ))
SM90_DEV_REF="d128 bs (prod)" SM90_DEV_ONLY="d128 bs s57 q" SM90_DEV_PROBLEMS="$P" timeout $left $B 80 sparse 2>&1 | tee $OUT/dev-sparse-d128-s57-13.txt | grep -E "d128 bs"
echo "end at $(( $(date +%s) - t0 )) s"
