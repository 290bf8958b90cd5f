#!/usr/bin/env bash
# s54-9: the mend's check: scripts/interleaved_grid.py and interleaved_libs.py with their shared problem_inputs, a few
# reps on two problems each.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
bash scripts/device-sm90.sh build 2>&1 | grep -E "phase build|build:" | head -3
export PYTHONPATH=bindings/python:scripts LIBFLASH_PATH=build-h100 PYTHONUNBUFFERED=1
P="d128-dense-1k=128:1024:16:16:none,d64-4k-bs.25=64:4096:2:32:0.25,d64-4k-none=64:4096:2:32:none"
timeout 100 python3 scripts/interleaved_grid.py --grids 0,128 --reps 5 --problems "$P" 2>&1 | tee $OUT/grid-s54-9.txt
timeout 100 python3 scripts/interleaved_libs.py --base same=build-h100/libflash.so --reps 5 --problems "$P" 2>&1 | tee $OUT/libs-s54-9.txt
