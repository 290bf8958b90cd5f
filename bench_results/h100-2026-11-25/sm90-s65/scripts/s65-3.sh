#!/usr/bin/env bash
# s65-3: interleaved_bounds.py at batch 1, 2 and 4 (d128 4k): does the gap between the real call and the L2-fed one
# (and the arithmetic side's fixed part) scale with the tiles or stay per launch?
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
bash scripts/device-sm90.sh build 2>&1 | grep -E "^build:" | head -2
mkdir -p $OUT/s65-3
export PYTHONPATH=bindings/python:scripts LIBFLASH_PATH=build-h100
for b in 2 4 1 8; do
  timeout 150 python3 scripts/interleaved_bounds.py --hdims 128 --seqlens 4096 --batch $b --reps 30 --json $OUT/s65-3/bounds-b$b.json 2>&1 | tee $OUT/s65-3/bounds-b$b.txt
done
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv > $OUT/s65-3/smi.txt
cd $OUT && tar czf s65-3.tgz s65-3 && rm -rf s65-3
