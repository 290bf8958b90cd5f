#!/usr/bin/env bash
# s63-11: the new masks-runs phase, once (a check of the phase, and one more masks run on a fresh machine).
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
MASKS_RUNS=1 TAG=s63-11 bash scripts/device-sm90.sh build masks-runs 2>&1 | grep -vE "^\s*$" | tail -12
ls -la $OUT
