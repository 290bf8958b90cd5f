#!/usr/bin/env bash
# s59-2: the block-sparse scheduler's first take kept raw until after the first build (Traits::kDevRawTake), and with the
# first list prefetched to L2 at the kernel's start (kDevListPrefetch): d128 and the two-ring kernel, sm90_dev paired with
# the dirty flush, two rounds of 60 reps; the d128 profile of both.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
[ -f build-h100/build.ninja ] || bash scripts/device-sm90.sh build-dev 2>&1 | tail -1
B=build-h100/libflash/cuda/sm90/sm90_dev
ninja -C build-h100 sm90_dev > $OUT/build-dev.log 2>&1 || { grep -A8 error $OUT/build-dev.log | head -30; exit 1; }
echo "built at $(( $(date +%s) - t0 )) s"
P="4096:0.1,4096:0.25,4096:0.5,8192:0.1,16384:0.25"
for r in 1 2; do
  SM90_DEV_FLUSH=256 SM90_DEV_REF="d128 bs (prod)" SM90_DEV_ONLY="d128 bs s59b" SM90_DEV_PROBLEMS="$P" timeout 140 $B 60 sparse 2>&1 | tee $OUT/dev-sparse-d128-s59-2-run$r.txt | grep -E "d128 bs|rror|FAIL"
  SM90_DEV_FLUSH=256 SM90_DEV_REF="d64  bs 3wg 2 rings" SM90_DEV_ONLY="3wg 2 rings" SM90_DEV_PROBLEMS="$P" timeout 140 $B 60 sparse 2>&1 | tee $OUT/dev-sparse-d64-s59-2-run$r.txt | grep -E "3wg 2 rings|rror|FAIL"
  echo "round $r at $(( $(date +%s) - t0 )) s"
done
SM90_DEV_FLUSH=256 timeout 120 $B 10 profile "d128 bs0.1" 2>&1 | tee $OUT/prof-d128-s59-2.txt | grep -E "^d128|first tile|scheduler|prologue:"
echo "done at $(( $(date +%s) - t0 )) s"
