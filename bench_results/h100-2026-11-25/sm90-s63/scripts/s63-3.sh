#!/usr/bin/env bash
# s63-3: issue 7's block-sparse ratios, token-major against head-major Q/K/V/O (scripts/interleaved_layouts.py).
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
bash scripts/device-sm90.sh build 2>&1 | grep -E "phase build|build:" | head -3
export PYTHONPATH=bindings/python:scripts LIBFLASH_PATH=build-h100 PYTHONUNBUFFERED=1
python3 scripts/interleaved_layouts.py --hdims 128,64 --seqlens 4096 --reps 60 --json $OUT/layouts-4k-a.json 2>&1 | tee $OUT/layouts-4k-a.txt
python3 scripts/interleaved_layouts.py --hdims 128,64 --seqlens 8192,16384 --reps 20 --json $OUT/layouts-8k16k.json 2>&1 | tee $OUT/layouts-8k16k.txt
python3 scripts/interleaved_layouts.py --hdims 128,64 --seqlens 4096 --reps 60 --seed 7 --json $OUT/layouts-4k-b.json 2>&1 | tee $OUT/layouts-4k-b.txt
echo "end at $(( $(date +%s) - t0 )) s"
