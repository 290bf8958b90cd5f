#!/usr/bin/env bash
# s54-10: libflash and cuDNN back to back with the SM clock and power sampled (scripts/power_peers.py): does ours draw more
# power per call at 16k (fa-bench's slow medians there)?
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
bash scripts/device-sm90.sh build 2>&1 | grep -E "phase build|build:" | head -3
export PYTHONPATH=bindings/python:scripts LIBFLASH_PATH=build-h100 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=power.limit,clocks.max.sm,clocks.applications.graphics --format=csv | tee $OUT/power-limits-s54-10.txt
timeout 200 python3 scripts/power_peers.py --seconds 3 --rounds 2 2>&1 | tee $OUT/power-s54-10.txt
