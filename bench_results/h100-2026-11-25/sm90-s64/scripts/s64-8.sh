#!/usr/bin/env bash
# s64-8: the interleaved scripts after random_lists / block_mask_of moved into interleaved_masks.py (a short run each).
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
bash scripts/device-sm90.sh build 2>&1 | grep -E "build:" | head -2
export PYTHONPATH=bindings/python:scripts LIBFLASH_PATH=build-h100 TORCHINDUCTOR_CACHE_DIR=/tmp/inductor
timeout 200 python3 scripts/interleaved_flex.py --reps 10 --hdims 128 --seqlens 4096 2>&1 | grep -v Warn | tee $OUT/flex-check-s64-8.txt
timeout 100 python3 scripts/interleaved_masks.py --reps 10 --hdims 128 --seqlens 4096 2>&1 | tee $OUT/masks-check-s64-8.txt
timeout 100 python3 scripts/interleaved_layouts.py --help > /dev/null 2>&1; echo "layouts --help: $?"
timeout 100 python3 scripts/interleaved_libs.py --help > /dev/null 2>&1; echo "libs --help: $?"
