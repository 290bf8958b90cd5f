#!/usr/bin/env bash
# s63-1: what the event window holds beyond the CTAs' span (dev/launch_overhead.cu; sm90_dev ctatimes with the flush).
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$OUT/nvidia-smi.csv" 2>&1
nvcc -O2 -std=c++17 -gencode arch=compute_90a,code=sm_90a -o /tmp/launch_overhead libflash/cuda/sm90/dev/launch_overhead.cu
/tmp/launch_overhead 300 60 2>&1 | tee "$OUT/launch-overhead-60.txt"
/tmp/launch_overhead 100 400 2>&1 | tee "$OUT/launch-overhead-400.txt"
echo "launch_overhead done at $(( $(date +%s) - t0 )) s"
bash scripts/device-sm90.sh build-dev 2>&1 | tail -3
SM90_DEV_FLUSH=100 timeout 200 build-h100/libflash/cuda/sm90/sm90_dev 31 ctatimes 2>&1 | tee "$OUT/ctatimes-flush.txt"
echo "end at $(( $(date +%s) - t0 )) s"
