#!/usr/bin/env bash
# s64-5: the rest of s64-4's edge tests (its 300 s limit stopped it in D64WindowsOnEitherKernel/naive): the block-sparse
# edge tests on every GPU algorithm, and that test.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
[ -x build-h100/tests/flash_gpu_tests ] || bash scripts/device-sm90.sh build 2>&1 | grep -E "build:" | head -2
T=build-h100/tests/flash_gpu_tests
t0=$(date +%s)
timeout 400 $T --gtest_filter='Algorithms/GpuEdges.BlockSparse*:Algorithms/GpuEdges.D64WindowsOnEitherKernel/naive' > $OUT/gpu-tests-masks-sparse-s64-5.log 2>&1; echo "block-sparse edges: exit $? ($(( $(date +%s) - t0 )) s)"
grep -hE "FAILED|PASSED|tests ran" $OUT/gpu-tests-masks-sparse-s64-5.log | tail -4
