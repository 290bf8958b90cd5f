#!/usr/bin/env bash
# s67-3: scripts/interleaved_bounds.py on fa-bench's maps since session 66 (--maps exact): the arithmetic side of the 4k
# cells (all-l2: Q, K and V served from L2) beside the real call, twice at d128, once at d64; and once on the old maps.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
bash scripts/device-sm90.sh build 2>&1 | grep -E "^build:" | head -2
mkdir -p $OUT/s67-3
export PYTHONPATH=bindings/python:scripts LIBFLASH_PATH=build-h100
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv > $OUT/s67-3/smi-before.txt
t0=$(date +%s)
timeout 200 python3 scripts/interleaved_bounds.py --hdims 128,64 --seqlens 4096 --reps 30 --json $OUT/s67-3/bounds-exact-4k.json 2>&1 | tee $OUT/s67-3/bounds-exact-4k.txt
timeout 120 python3 scripts/interleaved_bounds.py --hdims 128 --seqlens 4096 --reps 30 --maps rows --json $OUT/s67-3/bounds-rows-4k.json 2>&1 | tee $OUT/s67-3/bounds-rows-4k.txt
timeout 120 python3 scripts/interleaved_bounds.py --hdims 128 --seqlens 4096 --reps 30 --json $OUT/s67-3/bounds-exact-4k-again.json 2>&1 | tee $OUT/s67-3/bounds-exact-4k-again.txt
echo "runs: $(( $(date +%s) - t0 )) s"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv > $OUT/s67-3/smi.txt
cd $OUT && tar czf s67-3.tgz s67-3 build.log && rm -rf s67-3
