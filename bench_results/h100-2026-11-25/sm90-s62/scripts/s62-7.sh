#!/usr/bin/env bash
# s62-7: io_floor, one CTA an SM: does which SM takes which tile (%smid tables) move the floor? Three rounds.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -o /tmp/io_floor libflash/cuda/sm90/dev/io_floor.cu || exit 1
for r in 1 2 3; do /tmp/io_floor 60 smid 2>&1 | tee $OUT/io-floor-s62-7-$r.txt; done
