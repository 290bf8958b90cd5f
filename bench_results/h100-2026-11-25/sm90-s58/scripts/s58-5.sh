#!/usr/bin/env bash
# s58-5: the block-sparse scheduler's late take (LateTake: the next tile asked for after the slot wait), d128 and two
# rings, sm90_dev paired with the dirty flush, two rounds; ctatimes (the CTAs' idle at the end).
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader
[ -f build-h100/build.ninja ] || bash scripts/device-sm90.sh build-dev 2>&1 | tail -1
B=build-h100/libflash/cuda/sm90/sm90_dev
ninja -C build-h100 sm90_dev > $OUT/build-dev.log 2>&1 || { grep -A8 error $OUT/build-dev.log | head -30; exit 1; }
echo "built at $(( $(date +%s) - t0 )) s"
P="4096:0.1,4096:0.25,4096:0.5,8192:0.1,16384:0.1"
for r in 1 2; do
  SM90_DEV_FLUSH=256 SM90_DEV_REF="d128 bs (prod)" SM90_DEV_ONLY="d128 bs s58 (late" SM90_DEV_PROBLEMS="$P" timeout 150 $B 60 sparse 2>&1 | tee $OUT/dev-sparse-d128-s58-5-run$r.txt | grep -E "d128 bs"
  SM90_DEV_FLUSH=256 SM90_DEV_REF="3wg 2 rings" SM90_DEV_ONLY="3wg 2 rings" SM90_DEV_PROBLEMS="$P" timeout 150 $B 60 sparse 2>&1 | tee $OUT/dev-sparse-d64-s58-5-run$r.txt | grep -E "rings( again)? |late"
  echo "round $r at $(( $(date +%s) - t0 )) s"
done
timeout 90 $B 15 ctatimes 2>&1 | tee $OUT/ctatimes-s58-5.txt
echo "done at $(( $(date +%s) - t0 )) s"
