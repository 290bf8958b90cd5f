#!/usr/bin/env bash
# s65-2: fa-bench's masks grid twice at this revision (production unchanged since session 57), on s65-1's machine.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
[ -x build-h100/cli/fa-bench ] || bash scripts/device-sm90.sh build 2>&1 | grep -E "^build:" | head -2
t0=$(date +%s)
MASKS_RUNS=2 TAG=s65-2 bash scripts/device-sm90.sh masks-runs
echo "masks: $(( $(date +%s) - t0 )) s"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv
