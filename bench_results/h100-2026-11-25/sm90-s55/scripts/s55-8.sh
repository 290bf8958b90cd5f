#!/usr/bin/env bash
# s55-8: the deferred O store on d128's block-sparse kernel (O staged in Q: the store issued after the next tile's S_0, the
# Q buffer released after that tile's first softmax), against production, sm90_dev, paired, 60 reps, issue 7's d128 grid.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
[ -f build-h100/build.ninja ] || bash scripts/device-sm90.sh build-dev 2>&1 | tail -1
B=build-h100/libflash/cuda/sm90/sm90_dev
ninja -C build-h100 sm90_dev > $OUT/build-dev.log 2>&1 || { grep -A8 error $OUT/build-dev.log | head -30; exit 1; }
echo "built at $(( $(date +%s) - t0 )) s"
SM90_DEV_REF="d128 bs (prod)" SM90_DEV_ONLY="d128 bs" SM90_DEV_PROBLEMS="4096:0,4096:0.1,4096:0.25,4096:0.5,8192:0.1,16384:0.25" timeout 150 $B 60 sparse 2>&1 | tee $OUT/dev-sparse-d128-s55-8.txt
echo "end at $(( $(date +%s) - t0 )) s"
