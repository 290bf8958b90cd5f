#!/usr/bin/env bash
# s63-6: io_floor_tma's model with the next tile's Q deferred behind the running tile's K/V loads (qdefer), three passes.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -o /tmp/io_floor_tma libflash/cuda/sm90/dev/io_floor_tma.cu || exit 1
for r in 1 2 3; do timeout 90 /tmp/io_floor_tma 50 qdefer 2>&1 | tee $OUT/io-floor-tma-qdefer-s63-6-$r.txt; done
