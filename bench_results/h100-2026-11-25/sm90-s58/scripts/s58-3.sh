#!/usr/bin/env bash
# s58-3: d128 block-sparse short lists without ping-pong turns (NoPingPong; and with the clock pin), sm90_dev paired with
# the dirty flush, 4k s = .1 (3-block lists; the longer lists run production's turns kernel in every candidate).
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
[ -f build-h100/build.ninja ] || bash scripts/device-sm90.sh build-dev 2>&1 | tail -1
B=build-h100/libflash/cuda/sm90/sm90_dev
ninja -C build-h100 sm90_dev > $OUT/build-dev.log 2>&1 || { grep -A8 error $OUT/build-dev.log | head -30; exit 1; }
echo "built at $(( $(date +%s) - t0 )) s"
for r in 1 2 3; do
  SM90_DEV_FLUSH=256 SM90_DEV_REF="d128 bs (prod)" SM90_DEV_ONLY="d128 bs s58 (short" SM90_DEV_PROBLEMS="4096:0.1,2048:0.1" timeout 150 $B 80 sparse 2>&1 | tee $OUT/dev-sparse-d128-s58-3-run$r.txt | grep -E "d128 bs"
  echo "round $r at $(( $(date +%s) - t0 )) s"
done
