#!/usr/bin/env bash
# s57-12: the block-sparse K/V loaders taking each tile's decode from the scheduler (Traits::kLoaderMhb, production
# candidate) against their own divisions (LoaderMhb<..., false>), the two-ring and d128 kernels, sm90_dev, paired against
# production's first copy, two rounds of 80 reps.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
[ -f build-h100/build.ninja ] || bash scripts/device-sm90.sh build-dev 2>&1 | tail -1
B=build-h100/libflash/cuda/sm90/sm90_dev
ninja -C build-h100 sm90_dev > $OUT/build-dev.log 2>&1 || { grep -A8 error $OUT/build-dev.log | head -30; exit 1; }
echo "built at $(( $(date +%s) - t0 )) s"
P="4096:0,4096:0.1,4096:0.25,4096:0.5,8192:0.1,16384:0.1"
for r in 1 2; do
  SM90_DEV_REF="3wg 2 rings" SM90_DEV_ONLY="3wg 2 rings,(loaders" SM90_DEV_PROBLEMS="$P" timeout 150 $B 80 sparse 2>&1 | tee $OUT/dev-sparse-d64-s57-12-run$r.txt | grep -E "2 rings"
  SM90_DEV_REF="d128 bs (prod)" SM90_DEV_ONLY="d128 bs s57" SM90_DEV_PROBLEMS="$P" timeout 150 $B 80 sparse 2>&1 | tee $OUT/dev-sparse-d128-s57-12-run$r.txt | grep -E "d128 bs"
  echo "round $r at $(( $(date +%s) - t0 )) s"
done
