#!/usr/bin/env bash
# s58-2: the block-sparse first Q after the first schedule (FirstQAfterSched) -- does the first Q's DRAM traffic hold the
# first schedule's list read back? sm90_dev paired with the dirty flush, the tile profile, and the CTAs' start/end spread.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
[ -f build-h100/build.ninja ] || bash scripts/device-sm90.sh build-dev 2>&1 | tail -1
B=build-h100/libflash/cuda/sm90/sm90_dev
ninja -C build-h100 sm90_dev > $OUT/build-dev.log 2>&1 || { grep -A8 error $OUT/build-dev.log | head -30; exit 1; }
echo "built at $(( $(date +%s) - t0 )) s"
P="4096:0.1,4096:0.25,4096:0.5,8192:0.1"
for r in 1 2; do
  SM90_DEV_FLUSH=256 SM90_DEV_REF="d128 bs (prod)" SM90_DEV_ONLY="d128 bs s58 (first" SM90_DEV_PROBLEMS="$P" timeout 150 $B 60 sparse 2>&1 | tee $OUT/dev-sparse-d128-s58-2-run$r.txt | grep -E "d128 bs"
  SM90_DEV_FLUSH=256 SM90_DEV_REF="3wg 2 rings" SM90_DEV_ONLY="3wg 2 rings s58 (first" SM90_DEV_PROBLEMS="$P" timeout 150 $B 60 sparse 2>&1 | tee $OUT/dev-sparse-d64-s58-2-run$r.txt | grep -E "2 rings"
  echo "round $r at $(( $(date +%s) - t0 )) s"
done
timeout 120 $B 10 profile "d128 bs" 2>&1 | tee $OUT/prof-d128-s58-2.txt | tail -40
for f in "2ring .1" "2ring fq"; do timeout 60 $B 10 profile "$f" 2>&1 | tail -9; done | tee $OUT/prof-2ring-s58-2.txt
timeout 60 $B 15 ctatimes 2>&1 | tee $OUT/ctatimes-s58-2.txt
echo "done at $(( $(date +%s) - t0 )) s"
