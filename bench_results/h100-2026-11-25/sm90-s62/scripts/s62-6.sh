#!/usr/bin/env bash
# s62-6: io_floor with the heads that run together spread along each 4 KB row (channel balance?), twice.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -o /tmp/io_floor libflash/cuda/sm90/dev/io_floor.cu || exit 1
for r in 1 2; do /tmp/io_floor 60 2>&1 | tee $OUT/io-floor-s62-6-$r.txt; done
