#!/usr/bin/env bash
# s54-1: the persistent grid's size (LIBFLASH_SM90_MAX_CTAS: one per SM, 128, 124) on issue 9's and issue 7's problems,
# interleaved (scripts/interleaved_grid.py); then issue 9's peers interleaved (warm, 30 reps) as this machine's baseline.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
[ -f build-h100/libflash.so ] || bash scripts/device-sm90.sh build 2>&1 | grep -E "phase build|build:" | head -3
ninja -C build-h100 -j16 flash > /dev/null 2>&1; ls -la build-h100/libflash.so | head -2
echo "built at $(( $(date +%s) - t0 )) s"
export PYTHONPATH=bindings/python:scripts LIBFLASH_PATH=build-h100 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv > $OUT/gpu-s54-1.txt
timeout 300 python3 scripts/interleaved_grid.py --grids 0,128,124 --reps 40 --json $OUT/grid-s54-1.json > $OUT/grid-s54-1.txt 2>&1
echo "grid exit $? at $(( $(date +%s) - t0 )) s"; cat $OUT/grid-s54-1.txt
left=$(( 560 - ($(date +%s) - t0) ))
timeout $(( left > 40 ? left : 40 )) python3 scripts/interleaved_peers.py --icache warm --reps 30 --json $OUT/peers-warm-s54-1.json > $OUT/peers-warm-s54-1.txt 2>&1
echo "peers exit $? at $(( $(date +%s) - t0 )) s"; tail -31 $OUT/peers-warm-s54-1.txt
