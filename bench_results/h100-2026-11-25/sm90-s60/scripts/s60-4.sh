#!/usr/bin/env bash
# s60-4: d128 block-sparse with a third V stage (K2V3) or K stage (K3V2), two Q buffers, under fa-bench's dirty flush;
# sm90_dev paired against production, three rounds of 60 reps, 4k s = .1 (and .25 for reference).
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
[ -f build-h100/build.ninja ] || bash scripts/device-sm90.sh build-dev 2>&1 | tail -1
B=build-h100/libflash/cuda/sm90/sm90_dev
ninja -C build-h100 sm90_dev > $OUT/build-dev.log 2>&1 || { grep -A8 error $OUT/build-dev.log | head -30; exit 1; }
echo "built at $(( $(date +%s) - t0 )) s"
for r in 1 2 3; do
  SM90_DEV_FLUSH=256 SM90_DEV_REF="d128 bs (prod)" SM90_DEV_ONLY="d128 bs s60" SM90_DEV_PROBLEMS="4096:0.1,4096:0.25" timeout 100 $B 60 sparse 2>&1 | tee $OUT/dev-sparse-d128-s60-4-run$r.txt | grep -E "d128 bs|rror|FAIL|fail"
  echo "round $r at $(( $(date +%s) - t0 )) s"
done
