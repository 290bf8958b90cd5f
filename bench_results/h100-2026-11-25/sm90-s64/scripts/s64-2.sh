#!/usr/bin/env bash
# s64-2: scripts/interleaved_flex.py with causal and the window (256, 0) on issue 7's grid; then fa-bench's masks grid
# twice (device-sm90.sh masks-runs).
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
bash scripts/device-sm90.sh build 2>&1 | grep -E "build:" | head -2
mkdir -p $OUT/s64-2
export PYTHONPATH=bindings/python:scripts LIBFLASH_PATH=build-h100 TORCHINDUCTOR_CACHE_DIR=/tmp/inductor
t0=$(date +%s)
timeout 400 python3 scripts/interleaved_flex.py --reps 30 --json $OUT/s64-2/flex-grid-masks.json 2>&1 | tee $OUT/s64-2/flex-grid-masks.txt | grep -v Warning
echo "flex: $(( $(date +%s) - t0 )) s"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv > $OUT/s64-2/smi.txt
cd $OUT && tar czf s64-2.tgz s64-2 && rm -rf s64-2 && cd - > /dev/null
MASKS_RUNS=2 TAG=s64-2 bash scripts/device-sm90.sh masks-runs 2>&1 | grep -vE "^\s*$" | tail -30
