#!/usr/bin/env bash
# s55-10: the deferred O store on d64's pair with the flush after the prologue's softmax (kDeferStore 2: the three
# warpgroups' SFU turn first), on the three-warpgroup kernel alone or both; and on the rows kernel alone (kDeferStore 1);
# sm90_dev, paired against production, 60 reps.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
[ -f build-h100/build.ninja ] || bash scripts/device-sm90.sh build-dev 2>&1 | tail -1
B=build-h100/libflash/cuda/sm90/sm90_dev
ninja -C build-h100 sm90_dev > $OUT/build-dev.log 2>&1 || { grep -A8 error $OUT/build-dev.log | head -30; exit 1; }
echo "built at $(( $(date +%s) - t0 )) s"
SM90_DEV_REF="(prod)" SM90_DEV_ONLY="defer" SM90_DEV_PROBLEMS="1024,2048,4096,16384" timeout 200 $B 60 d64 2>&1 | tee $OUT/dev-d64-s55-10.txt
echo "end at $(( $(date +%s) - t0 )) s"
