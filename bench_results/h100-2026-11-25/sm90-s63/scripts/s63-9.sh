#!/usr/bin/env bash
# s63-9: the standalone dev tools after their shared header (dev_common.h): each built and run briefly.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
cd libflash/cuda/sm90/dev
for f in launch_gap launch_overhead io_floor io_floor_tma cluster_probe; do
  nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -o /tmp/$f $f.cu || { echo "$f: build failed"; exit 1; }
done
/tmp/launch_gap 60 60 2>&1 | tee $OUT/launch-gap-s63-9.txt
/tmp/launch_overhead 60 60 2>&1 | tee $OUT/launch-overhead-s63-9.txt
/tmp/io_floor_tma 20 2>&1 | tee $OUT/io-floor-tma-s63-9.txt | head -8
timeout 120 /tmp/io_floor 10 2>&1 | tee $OUT/io-floor-s63-9.txt | head -12
timeout 60 /tmp/cluster_probe 2>&1 | tee $OUT/cluster-probe-s63-9.txt | tail -5
