#!/usr/bin/env bash
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
nvcc -O2 -std=c++17 -gencode arch=compute_90a,code=sm_90a -o /tmp/launch_overhead libflash/cuda/sm90/dev/launch_overhead.cu
/tmp/launch_overhead 300 60 2>&1 | tee "$OUT/launch-overhead-60.txt"
/tmp/launch_overhead 100 400 2>&1 | tee "$OUT/launch-overhead-400.txt"
