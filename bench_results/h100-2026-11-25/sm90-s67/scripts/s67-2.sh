#!/usr/bin/env bash
# s67-2: s67-1 again on a fresh machine (the io_floor grid now with the one-tile-an-SM arrangement too), masks once.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
bash scripts/device-sm90.sh build 2>&1 | grep -E "^build:" | head -2
mkdir -p $OUT/s67-2
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv > $OUT/s67-2/smi-before.txt
t0=$(date +%s)
D=libflash/cuda/sm90/dev
nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -o /tmp/io_floor $D/io_floor.cu
nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -o /tmp/io_floor_tma $D/io_floor_tma.cu
timeout 120 /tmp/io_floor 50 famap 2>&1 | tee $OUT/s67-2/io-floor-famap.txt
timeout 120 /tmp/io_floor 50 grid > $OUT/s67-2/io-floor-grid-s67-2.txt 2>&1; echo "grid: exit $?"
timeout 120 /tmp/io_floor_tma 60 famap 2>&1 | tee $OUT/s67-2/io-floor-tma-famap.txt
echo "floors: $(( $(date +%s) - t0 )) s"
t0=$(date +%s)
FLOOR_GRID=$OUT/s67-2/io-floor-grid-s67-2.txt MASKS_RUNS=1 TAG=s67-2 bash scripts/device-sm90.sh masks-runs
echo "masks: $(( $(date +%s) - t0 )) s"
tar xzf $OUT/s67-2-results.tgz -C /tmp && for r in 1; do echo "== floor table run $r"; cat /tmp/masks-s67-2-run$r/floor-table.txt; done
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv > $OUT/s67-2/smi.txt
cd $OUT && tar czf s67-2.tgz s67-2 build.log && rm -rf s67-2
