#!/usr/bin/env bash
# s54-3: the persistent grid on 128 CTAs against one per SM again (s54-1: d128 dense 2k .993, d256 dense 1k .992, d128
# 4k s = .1 .989, d128 dense 1k .997 paired), 60 reps, twice, on the static-order problems only.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
[ -f build-h100/libflash.so ] || bash scripts/device-sm90.sh build 2>&1 | grep -E "phase build|build:" | head -3
ninja -C build-h100 -j16 flash > /dev/null 2>&1
echo "built at $(( $(date +%s) - t0 )) s"
export PYTHONPATH=bindings/python:scripts LIBFLASH_PATH=build-h100 PYTHONUNBUFFERED=1
P="d128-dense-1k=128:1024:16:16:none,d128-dense-2k=128:2048:8:16:none,d128-dense-4k=128:4096:4:16:none,d256-dense-1k=256:1024:16:8:none,d256-dense-2k=256:2048:8:8:none,d64-dense-1k=64:1024:16:32:none,d64-dense-2k=64:2048:8:32:none,d128-4k-none=128:4096:2:16:none,d128-4k-bs.1=128:4096:2:16:0.1,d128-4k-bs.25=128:4096:2:16:0.25,d128-4k-bs.5=128:4096:2:16:0.5"
for run in 1 2; do
  timeout 250 python3 scripts/interleaved_grid.py --grids 0,128 --reps 60 --problems "$P" --json $OUT/grid-s54-3-run$run.json > $OUT/grid-s54-3-run$run.txt 2>&1
  echo "run $run exit $? at $(( $(date +%s) - t0 )) s"; cat $OUT/grid-s54-3-run$run.txt
done
