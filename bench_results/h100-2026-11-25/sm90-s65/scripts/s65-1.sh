#!/usr/bin/env bash
# s65-1: scripts/interleaved_bounds.py -- issue 7's block-sparse cells with Q, K/V or all inputs served from L2
# (overlapping views), against the real call: which side (bytes or arithmetic) binds d128 4k s = .1.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
bash scripts/device-sm90.sh build 2>&1 | grep -E "^build:" | head -2
mkdir -p $OUT/s65-1
export PYTHONPATH=bindings/python:scripts LIBFLASH_PATH=build-h100
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv > $OUT/s65-1/smi-before.txt
t0=$(date +%s)
timeout 200 python3 scripts/interleaved_bounds.py --hdims 128,64 --seqlens 4096 --reps 30 --json $OUT/s65-1/bounds-dirty-4k.json 2>&1 | tee $OUT/s65-1/bounds-dirty-4k.txt
timeout 120 python3 scripts/interleaved_bounds.py --hdims 128 --seqlens 4096 --reps 30 --flush clean --json $OUT/s65-1/bounds-clean-4k.json 2>&1 | tee $OUT/s65-1/bounds-clean-4k.txt
timeout 150 python3 scripts/interleaved_bounds.py --hdims 128 --seqlens 8192 --reps 20 --json $OUT/s65-1/bounds-dirty-8k.json 2>&1 | tee $OUT/s65-1/bounds-dirty-8k.txt
timeout 120 python3 scripts/interleaved_bounds.py --hdims 128 --seqlens 4096 --reps 30 --json $OUT/s65-1/bounds-dirty-4k-again.json 2>&1 | tee $OUT/s65-1/bounds-dirty-4k-again.txt
echo "runs: $(( $(date +%s) - t0 )) s"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv > $OUT/s65-1/smi.txt
cd $OUT && tar czf s65-1.tgz s65-1 build.log && rm -rf s65-1
