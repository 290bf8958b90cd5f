#!/usr/bin/env bash
# s67-5: the two-ring tail plan on a fresh machine: fa-bench's masks grid twice, then the plan against the plain order
# interleaved at d64 4k (again) and 16k (where the plan also applies: 5440 = 41 x 132 + 28 whole tiles).
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
bash scripts/device-sm90.sh build 2>&1 | grep -E "^build:" | head -2
mkdir -p $OUT/s67-5
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv > $OUT/s67-5/smi-before.txt
t0=$(date +%s)
MASKS_RUNS=2 TAG=s67-5 bash scripts/device-sm90.sh masks-runs
echo "masks: $(( $(date +%s) - t0 )) s"
export PYTHONPATH=bindings/python:scripts LIBFLASH_PATH=build-h100
t0=$(date +%s)
timeout 120 python3 scripts/interleaved_ring_tail.py --hdims 64 --seqlens 4096 --reps 40 --json $OUT/s67-5/ring-tail-4k.json 2>&1 | tee $OUT/s67-5/ring-tail-4k.txt
timeout 200 python3 scripts/interleaved_ring_tail.py --hdims 64 --seqlens 16384 --reps 10 --json $OUT/s67-5/ring-tail-16k.json 2>&1 | tee $OUT/s67-5/ring-tail-16k.txt
echo "ring tail: $(( $(date +%s) - t0 )) s"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv > $OUT/s67-5/smi.txt
cd $OUT && tar czf s67-5.tgz s67-5 build.log && rm -rf s67-5
