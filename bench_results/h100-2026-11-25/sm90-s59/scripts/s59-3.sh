#!/usr/bin/env bash
# s59-3: d128 block-sparse short lists with the adaptive late epilogue (Traits::kLateEpilogue + kLateAdaptive: the next
# tile's S_0 before the epilogue only where its Q and K_0 have landed by the drain), sm90_dev paired with the dirty flush,
# three rounds of 60 reps (a copy of it after it, as production's "again", for the warm comparison).
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
[ -f build-h100/build.ninja ] || bash scripts/device-sm90.sh build-dev 2>&1 | tail -1
B=build-h100/libflash/cuda/sm90/sm90_dev
ninja -C build-h100 sm90_dev > $OUT/build-dev.log 2>&1 || { grep -A8 error $OUT/build-dev.log | head -30; exit 1; }
echo "built at $(( $(date +%s) - t0 )) s"
for r in 1 2 3; do
  SM90_DEV_FLUSH=256 SM90_DEV_REF="d128 bs (prod)" SM90_DEV_ONLY="d128 bs s59c" SM90_DEV_PROBLEMS="4096:0.1,2048:0.25,4096:0.25" timeout 120 $B 60 sparse 2>&1 | tee $OUT/dev-sparse-d128-s59-3-run$r.txt | grep -E "d128 bs|rror|FAIL"
  echo "round $r at $(( $(date +%s) - t0 )) s"
done
