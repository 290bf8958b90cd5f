#!/usr/bin/env bash
# s59-5: the CTAs' first K/V loads staggered by 250 / 700 cycles x (CTA % 8) after the first schedule (Traits::
# kDevStagger), d128 and the two-ring kernel, sm90_dev paired with the dirty flush, two rounds of 60 reps, each candidate
# twice (its second copy warm).
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
[ -f build-h100/build.ninja ] || bash scripts/device-sm90.sh build-dev 2>&1 | tail -1
B=build-h100/libflash/cuda/sm90/sm90_dev
ninja -C build-h100 sm90_dev > $OUT/build-dev.log 2>&1 || { grep -A8 error $OUT/build-dev.log | head -30; exit 1; }
echo "built at $(( $(date +%s) - t0 )) s"
for r in 1 2; do
  SM90_DEV_FLUSH=256 SM90_DEV_REF="d128 bs (prod)" SM90_DEV_ONLY="d128 bs s59e" SM90_DEV_PROBLEMS="4096:0.1,4096:0.25,8192:0.1" timeout 100 $B 60 sparse 2>&1 | tee $OUT/dev-sparse-d128-s59-5-run$r.txt | grep -E "d128 bs|rror|FAIL"
  SM90_DEV_FLUSH=256 SM90_DEV_REF="d64  bs 3wg 2 rings" SM90_DEV_ONLY="3wg 2 rings" SM90_DEV_PROBLEMS="4096:0.1,4096:0.25" timeout 100 $B 60 sparse 2>&1 | tee $OUT/dev-sparse-d64-s59-5-run$r.txt | grep -E "2 rings|rror|FAIL"
  echo "round $r at $(( $(date +%s) - t0 )) s"
done
