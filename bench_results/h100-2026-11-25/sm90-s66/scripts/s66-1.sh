#!/usr/bin/env bash
# s66-1: fa-bench's masks grid with maps of the asked-for density (session 66: 102 / 1024 blocks at 4k s = .1, not
# 3 / 32 a row), twice; then scripts/interleaved_order.py -- maps with rows of unequal length and their mirror images.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
bash scripts/device-sm90.sh build 2>&1 | grep -E "^build:" | head -2
mkdir -p $OUT/s66-1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv > $OUT/s66-1/smi-before.txt
t0=$(date +%s)
export PYTHONPATH=bindings/python:scripts LIBFLASH_PATH=build-h100
timeout 200 python3 scripts/interleaved_order.py --hdims 128,64 --seqlens 4096 --reps 20 --json $OUT/s66-1/order-4k.json 2>&1 | tee $OUT/s66-1/order-4k.txt
timeout 150 python3 scripts/interleaved_order.py --hdims 128 --seqlens 8192 --reps 12 --json $OUT/s66-1/order-8k.json 2>&1 | tee $OUT/s66-1/order-8k.txt
echo "order: $(( $(date +%s) - t0 )) s"
t0=$(date +%s)
MASKS_RUNS=2 TAG=s66-1 bash scripts/device-sm90.sh masks-runs
echo "masks: $(( $(date +%s) - t0 )) s"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv > $OUT/s66-1/smi.txt
cd $OUT && tar czf s66-1.tgz s66-1 build.log && rm -rf s66-1
