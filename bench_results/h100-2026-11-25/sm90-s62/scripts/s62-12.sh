#!/usr/bin/env bash
# s62-12: io_floor_tma on production's PTX wrappers (fwd_kernel.cuh): the O = Q check and the times again.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -o /tmp/io_floor_tma libflash/cuda/sm90/dev/io_floor_tma.cu || exit 1
timeout 90 /tmp/io_floor_tma 30 2>&1 | tee $OUT/io-floor-tma-s62-12.txt
