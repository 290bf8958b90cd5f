#!/usr/bin/env bash
# s64-11: the binding's CuPy streams through Stream.from_external (CuPy 14 deprecates ExternalStream): test_cupy.py with
# DeprecationWarning as an error, then the whole Python suite.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
bash scripts/device-sm90.sh build 2>&1 | grep -E "build:" | head -2
export PYTHONPATH=bindings/python LIBFLASH_PATH=build-h100
timeout 200 python3 -m pytest -q -W error::DeprecationWarning bindings/python/tests/test_cupy.py 2>&1 | tee $OUT/pytest-cupy-s64-11.log | tail -4
timeout 300 python3 -m pytest -q bindings/python/tests 2>&1 | tee $OUT/pytest-all-s64-11.log | tail -4
