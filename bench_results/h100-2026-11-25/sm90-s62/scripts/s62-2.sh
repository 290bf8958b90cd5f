#!/usr/bin/env bash
# s62-2: io_floor with persistent grids and the heads-innermost order (is the floor robust to the access order?).
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -o /tmp/io_floor libflash/cuda/sm90/dev/io_floor.cu || exit 1
for r in 1 2; do /tmp/io_floor 60 2>&1 | tee $OUT/io-floor-s62-2-$r.txt; done
