#!/usr/bin/env bash
# s64-7: the Python binding's FlexAttention BlockMask interop on the H100 (test_block_mask_from_flex_attention on every
# GPU algorithm), then the whole Python suite with torch and CuPy on the GPU.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
bash scripts/device-sm90.sh build 2>&1 | grep -E "build:" | head -2
export PYTHONPATH=bindings/python LIBFLASH_PATH=build-h100
timeout 240 python3 -m pytest -q -rs bindings/python/tests/test_torch.py -k "flex or block_mask" 2>&1 | tee $OUT/pytest-flex-s64-7.log | tail -8
timeout 300 python3 -m pytest -q -rs bindings/python/tests 2>&1 | tee $OUT/pytest-all-s64-7.log | tail -8
