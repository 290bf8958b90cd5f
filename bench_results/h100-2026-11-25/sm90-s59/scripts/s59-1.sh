#!/usr/bin/env bash
# s59-1: d128 block-sparse with the late epilogue (Traits::kLateEpilogue: a tile's epilogue under the next tile's S_0),
# sm90_dev paired with the dirty flush against production's first copy, two rounds of 60 reps.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
[ -f build-h100/build.ninja ] || bash scripts/device-sm90.sh build-dev 2>&1 | tail -1
B=build-h100/libflash/cuda/sm90/sm90_dev
ninja -C build-h100 sm90_dev > $OUT/build-dev.log 2>&1 || { grep -A8 error $OUT/build-dev.log | head -30; exit 1; }
echo "built at $(( $(date +%s) - t0 )) s"
for r in 1 2; do
  SM90_DEV_FLUSH=256 SM90_DEV_REF="d128 bs (prod)" SM90_DEV_ONLY="d128 bs s59" SM90_DEV_PROBLEMS="4096:0.1,2048:0.1,4096:0.25,8192:0.1,16384:0.1" timeout 200 $B 60 sparse 2>&1 | tee $OUT/dev-sparse-d128-s59-1-run$r.txt | grep -E "d128 bs|problem|error|FAIL|mismatch"
  echo "round $r at $(( $(date +%s) - t0 )) s"
done
