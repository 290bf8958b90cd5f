#!/usr/bin/env bash
# s66-4: the final revision's dev scripts run (interleaved_order.py and interleaved_bounds.py after their shared
# reference), and the block-sparse GPU tests.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
bash scripts/device-sm90.sh build 2>&1 | grep -E "^build:" | head -2
mkdir -p $OUT/s66-4
export PYTHONPATH=bindings/python:scripts LIBFLASH_PATH=build-h100
timeout 120 python3 scripts/interleaved_order.py --hdims 128 --seqlens 4096 --reps 4 2>&1 | tee $OUT/s66-4/order.txt | tail -7
timeout 120 python3 scripts/interleaved_bounds.py --hdims 128 --seqlens 4096 --reps 4 2>&1 | tee $OUT/s66-4/bounds.txt | tail -6
t0=$(date +%s)
timeout 300 build-h100/tests/flash_gpu_tests --gtest_filter='*BlockSparse*' --gtest_brief=1 > $OUT/s66-4/gpu-tests-sparse.txt 2>&1
echo "gpu tests (block-sparse): exit $? in $(( $(date +%s) - t0 )) s"; grep -E "PASSED|FAILED|tests ran" $OUT/s66-4/gpu-tests-sparse.txt | head
cd $OUT && tar czf s66-4.tgz s66-4 && rm -rf s66-4
