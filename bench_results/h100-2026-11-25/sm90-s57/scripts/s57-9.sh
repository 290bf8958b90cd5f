#!/usr/bin/env bash
# s57-9: re-measured on today's kernels: d128's 128-key dense kernel with the tile decoded by its producer (v85's form);
# d128 block-sparse short lists with the SFU turns, or with the early probe. sm90_dev, paired against production's first
# copy, two rounds of 80 reps (dense) / 60 reps (block-sparse, issue 7's 4k-8k grid).
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
[ -f build-h100/build.ninja ] || bash scripts/device-sm90.sh build-dev 2>&1 | tail -1
B=build-h100/libflash/cuda/sm90/sm90_dev
ninja -C build-h100 sm90_dev > $OUT/build-dev.log 2>&1 || { grep -A8 error $OUT/build-dev.log | head -30; exit 1; }
echo "built at $(( $(date +%s) - t0 )) s"
for r in 1 2; do
  SM90_DEV_ONLY="d128 s57" SM90_DEV_SEQLENS="1024,2048,4096" timeout 150 $B 80 d128 2>&1 | tee $OUT/dev-d128-s57-9-run$r.txt | grep -E "d128" 
  SM90_DEV_REF="d128 bs (prod)" SM90_DEV_ONLY="d128 bs s57" SM90_DEV_PROBLEMS="4096:0,4096:0.1,4096:0.25,4096:0.5,8192:0.1" timeout 150 $B 60 sparse 2>&1 | tee $OUT/dev-sparse-d128-s57-9-run$r.txt | grep -E "d128 bs"
  echo "round $r at $(( $(date +%s) - t0 )) s"
done
