#!/usr/bin/env bash
# s64-3: scripts/interleaved_flex.py with causal and the window (256, 0) on issue 7's grid (s64-2's run again, with
# dynamo's recompile limit raised so that every shape's mask_mods compile).
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
bash scripts/device-sm90.sh build 2>&1 | grep -E "build:" | head -2
mkdir -p $OUT/s64-3
export PYTHONPATH=bindings/python:scripts LIBFLASH_PATH=build-h100 TORCHINDUCTOR_CACHE_DIR=/tmp/inductor
t0=$(date +%s)
timeout 450 python3 scripts/interleaved_flex.py --reps 30 --json $OUT/s64-3/flex-grid-masks.json 2>&1 | tee $OUT/s64-3/flex-grid-masks.txt | grep -v Warning
echo "flex: $(( $(date +%s) - t0 )) s"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv > $OUT/s64-3/smi.txt
cd $OUT && tar czf s64-3.tgz s64-3 && rm -rf s64-3
