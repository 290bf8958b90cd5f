#!/usr/bin/env bash
# s63-5: the SM clock during each launch from inside the kernel (sm90_dev ctatimes, %clock64 over %globaltimer per CTA),
# under the 100 MB dirty flush with events, two passes.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit,temperature.gpu --format=csv > "$OUT/nvidia-smi.csv" 2>&1
bash scripts/device-sm90.sh build-dev 2>&1 | tail -2
for r in 1 2; do
  SM90_DEV_FLUSH=100 timeout 200 build-h100/libflash/cuda/sm90/sm90_dev 31 ctatimes 2>&1 | tee "$OUT/ctatimes-clock-s63-5-pass$r.txt"
done
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv >> "$OUT/nvidia-smi.csv" 2>&1
echo "end at $(( $(date +%s) - t0 )) s"
