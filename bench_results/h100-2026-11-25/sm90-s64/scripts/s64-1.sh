#!/usr/bin/env bash
# s64-1: issue 7's block-sparse cells against FlexAttention (scripts/interleaved_flex.py), issue 7's grid and
# FlashAttention's convention at 4k.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
bash scripts/device-sm90.sh build 2>&1 | grep -E "build:" | head -2
mkdir -p $OUT/s64-1
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"
export PYTHONPATH=bindings/python:scripts LIBFLASH_PATH=build-h100 TORCHINDUCTOR_CACHE_DIR=/tmp/inductor
timeout 420 python3 scripts/interleaved_flex.py --reps 30 --json $OUT/s64-1/flex-grid.json 2>&1 | tee $OUT/s64-1/flex-grid.txt | grep -v Warning
timeout 150 python3 scripts/interleaved_flex.py --reps 30 --batch 4 --seqlens 4096 --json $OUT/s64-1/flex-fa-convention.json 2>&1 | tee $OUT/s64-1/flex-fa-convention.txt | grep -v Warning
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv > $OUT/s64-1/smi.txt
cd $OUT && tar czf s64-1.tgz s64-1 && rm -rf s64-1
