#!/usr/bin/env bash
# s57-3: d64's three-warpgroup kernel with the tile decoded by its producer (TileInSmem, the dense producer's form of
# s38-6 / s49-1), paired against production's first copy, 100 reps, dense and causal 1k-4k, two rounds.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
[ -f build-h100/build.ninja ] || bash scripts/device-sm90.sh build-dev 2>&1 | tail -1
B=build-h100/libflash/cuda/sm90/sm90_dev
ninja -C build-h100 sm90_dev > $OUT/build-dev.log 2>&1 || { grep -A8 error $OUT/build-dev.log | head -30; exit 1; }
echo "built at $(( $(date +%s) - t0 )) s"
for r in 1 2; do
  SM90_DEV_ONLY="s57" SM90_DEV_SEQLENS="1024,2048,4096" timeout 200 $B 100 d64 2>&1 | tee $OUT/dev-d64-s57-3-run$r.txt
done
echo "end at $(( $(date +%s) - t0 )) s"
