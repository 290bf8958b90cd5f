#!/usr/bin/env bash
# s58-4: the scheduler's L2 prefetch of each schedule's first key blocks (KVPrefetch, 4 and 2 blocks), d128 block-sparse
# and two rings, sm90_dev paired with the dirty flush, two rounds; then the tile profile of both at 4k s = .1.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
[ -f build-h100/build.ninja ] || bash scripts/device-sm90.sh build-dev 2>&1 | tail -1
B=build-h100/libflash/cuda/sm90/sm90_dev
ninja -C build-h100 sm90_dev > $OUT/build-dev.log 2>&1 || { grep -A8 error $OUT/build-dev.log | head -30; exit 1; }
echo "built at $(( $(date +%s) - t0 )) s"
P="4096:0.1,4096:0.25,4096:0.5,8192:0.1,16384:0.1"
for r in 1 2; do
  SM90_DEV_FLUSH=256 SM90_DEV_REF="d128 bs (prod)" SM90_DEV_ONLY="d128 bs s58 (prefetch" SM90_DEV_PROBLEMS="$P" timeout 150 $B 60 sparse 2>&1 | tee $OUT/dev-sparse-d128-s58-4-run$r.txt | grep -E "d128 bs"
  SM90_DEV_FLUSH=256 SM90_DEV_REF="3wg 2 rings" SM90_DEV_ONLY="3wg 2 rings" SM90_DEV_PROBLEMS="$P" timeout 150 $B 60 sparse 2>&1 | tee $OUT/dev-sparse-d64-s58-4-run$r.txt | grep -E "rings( again)? |prefetch"
  echo "round $r at $(( $(date +%s) - t0 )) s"
done
for f in "d128 bs0.1 b2" "d128 bs0.1 pf" "2ring .1" "2ring pf"; do timeout 60 $B 10 profile "$f" 2>&1 | tail -9; done | tee $OUT/prof-s58-4.txt | grep -E "^d|loop block: waitKV|first tile"
echo "done at $(( $(date +%s) - t0 )) s"
