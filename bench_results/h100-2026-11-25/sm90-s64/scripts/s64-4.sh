#!/usr/bin/env bash
# s64-4: issue 7's GPU tests at this revision, every GPU algorithm (naive, sm80, sm90): the masks' edge tests, the
# random sweeps with masks, the backward's mask tests.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
bash scripts/device-sm90.sh build 2>&1 | grep -E "build:" | head -2
T=build-h100/tests/flash_gpu_tests
F1='Algorithms/GpuEdges.BlockSparse*:Algorithms/GpuEdges.EmptyRowsAndAlignments/*:Algorithms/GpuEdges.SlidingWindows/*:Algorithms/GpuEdges.TilesThatSeeNoKey/*:Algorithms/GpuEdges.D64WindowsOnEitherKernel/*:Algorithms/GpuEdges.LongSequenceCausal/*:Algorithms/GpuEdges.ShortLastTiles/*:Algorithms/GpuEdges.D64CausalTopRows/*:Algorithms/GpuEdges.D256DiagonalSkip/*'
F2='Random/GpuSweep.*:Algorithms/GpuBackward.BlockSparse/*:Algorithms/GpuBackward.SlidingWindows/*:Algorithms/GpuBackward.EmptyRowsUnseenKeysAndAlignments/*:Random/GpuBackwardSweep.*'
t0=$(date +%s)
timeout 300 $T --gtest_filter="$F1" > $OUT/gpu-tests-masks-edges-s64-4.log 2>&1; echo "edges: exit $? ($(( $(date +%s) - t0 )) s)"
t0=$(date +%s)
timeout 200 $T --gtest_filter="$F2" > $OUT/gpu-tests-masks-sweeps-s64-4.log 2>&1; echo "sweeps + backward: exit $? ($(( $(date +%s) - t0 )) s)"
grep -hE "FAILED|PASSED|tests ran" $OUT/gpu-tests-masks-*.log | tail -8
