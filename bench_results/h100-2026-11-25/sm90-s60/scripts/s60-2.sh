#!/usr/bin/env bash
# s60-2: S_{j+1} issued with P_{j-1} V_{j-1} (Traits::kSAhead): d128 block-sparse on 64-key blocks (four stages) and d128
# dense on 96-key blocks, each against the same shape without it; sm90_dev paired, dirty flush, two rounds.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
[ -f build-h100/build.ninja ] || bash scripts/device-sm90.sh build-dev 2>&1 | tail -1
B=build-h100/libflash/cuda/sm90/sm90_dev
ninja -C build-h100 sm90_dev > $OUT/build-dev.log 2>&1 || { grep -A8 error $OUT/build-dev.log | head -30; exit 1; }
echo "built at $(( $(date +%s) - t0 )) s"
for r in 1 2; do
  SM90_DEV_FLUSH=256 SM90_DEV_REF="d128 bs (prod)" SM90_DEV_ONLY="d128 bs s60" SM90_DEV_PROBLEMS="4096:0.1,4096:0.25,4096:0.5,16384:0.1" timeout 120 $B 40 sparse 2>&1 | tee $OUT/dev-sparse-d128-s60-2-run$r.txt | grep -E "d128 bs|rror|FAIL|fail"
  SM90_DEV_REF="d128 (prod)" SM90_DEV_ONLY="d128 s60" SM90_DEV_SEQLENS=1024,4096,16384 timeout 150 $B 25 d128 2>&1 | tee $OUT/dev-d128-s60-2-run$r.txt | grep -E "d128|rror|FAIL|fail"
  echo "round $r at $(( $(date +%s) - t0 )) s"
done
