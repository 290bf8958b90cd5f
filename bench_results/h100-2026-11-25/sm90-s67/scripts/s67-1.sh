#!/usr/bin/env bash
# s67-1: the memory floor on fa-bench's maps since session 66 (io_floor famap / grid, io_floor_tma famap), then the masks
# grid twice with floor_table.py against this machine's new floor grid.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
bash scripts/device-sm90.sh build 2>&1 | grep -E "^build:" | head -2
mkdir -p $OUT/s67-1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv > $OUT/s67-1/smi-before.txt
t0=$(date +%s)
D=libflash/cuda/sm90/dev
nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -o /tmp/io_floor $D/io_floor.cu
nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -o /tmp/io_floor_tma $D/io_floor_tma.cu
timeout 120 /tmp/io_floor 50 famap 2>&1 | tee $OUT/s67-1/io-floor-famap.txt
timeout 120 /tmp/io_floor 50 grid > $OUT/s67-1/io-floor-grid-s67-1.txt 2>&1; echo "grid: exit $?"
timeout 120 /tmp/io_floor_tma 60 famap 2>&1 | tee $OUT/s67-1/io-floor-tma-famap.txt
echo "floors: $(( $(date +%s) - t0 )) s"
t0=$(date +%s)
FLOOR_GRID=$OUT/s67-1/io-floor-grid-s67-1.txt MASKS_RUNS=2 TAG=s67-1 bash scripts/device-sm90.sh masks-runs
echo "masks: $(( $(date +%s) - t0 )) s"
tar xzf $OUT/s67-1-results.tgz -C /tmp && for r in 1 2; do echo "== floor table run $r"; cat /tmp/masks-s67-1-run$r/floor-table.txt; done
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv > $OUT/s67-1/smi.txt
cd $OUT && tar czf s67-1.tgz s67-1 build.log && rm -rf s67-1
