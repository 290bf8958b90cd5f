#!/usr/bin/env bash
# s62-10: io_floor_tma with each CTA's last tile given less of the stand-in arithmetic (what the tail costs), twice.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -o /tmp/io_floor_tma libflash/cuda/sm90/dev/io_floor_tma.cu || exit 1
for r in 1 2; do timeout 90 /tmp/io_floor_tma 50 2>&1 | tee $OUT/io-floor-tma-s62-10-$r.txt; done
