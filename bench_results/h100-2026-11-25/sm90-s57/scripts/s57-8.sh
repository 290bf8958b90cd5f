#!/usr/bin/env bash
# s57-8: compute-sanitizer memcheck, racecheck and synccheck on the reduced sm90 sweep (device-sm90.sh sanitize: three
# random sweep cases and three edge tests), v85's production kernels.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
bash scripts/device-sm90.sh build 2>&1 | grep -E "phase build|build:" | head -3
bash scripts/device-sm90.sh sanitize 2>&1 | tail -12
echo "end at $(( $(date +%s) - t0 )) s"
