#!/usr/bin/env bash
# s67-4: the two-ring tail plan (ring_tail_plan / RingOrder): GPU tests of the two-ring kernel and the block-sparse ones,
# the plan against the plain order interleaved (scripts/interleaved_ring_tail.py, d64 4k), fa-bench's masks grid once.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
bash scripts/device-sm90.sh build 2>&1 | grep -E "^build:|rings" | head -6
mkdir -p $OUT/s67-4
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv > $OUT/s67-4/smi-before.txt
t0=$(date +%s)
timeout 240 build-h100/tests/flash_gpu_tests --gtest_filter='*TwoRings*:*BlockSparse*' > $OUT/s67-4/gpu-tests.log 2>&1
echo "gpu tests: exit $? in $(( $(date +%s) - t0 )) s: $(grep -E '^\[  (PASSED|FAILED)' $OUT/s67-4/gpu-tests.log | tr '\n' ' ')"
grep -E "FAILED|Failure" $OUT/s67-4/gpu-tests.log | head -10
export PYTHONPATH=bindings/python:scripts LIBFLASH_PATH=build-h100
t0=$(date +%s)
timeout 150 python3 scripts/interleaved_ring_tail.py --hdims 64 --seqlens 4096 --reps 30 --json $OUT/s67-4/ring-tail-4k.json 2>&1 | tee $OUT/s67-4/ring-tail-4k.txt
echo "ring tail: $(( $(date +%s) - t0 )) s"
t0=$(date +%s)
MASKS_RUNS=1 TAG=s67-4 bash scripts/device-sm90.sh masks-runs
echo "masks: $(( $(date +%s) - t0 )) s"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv > $OUT/s67-4/smi.txt
cd $OUT && tar czf s67-4.tgz s67-4 build.log && rm -rf s67-4
