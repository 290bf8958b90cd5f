#!/usr/bin/env bash
# s57-2: rings of their own depth for V (Traits::kVStages, sm90_dev VStages): d128 block-sparse K2V3; the two-ring kernel with
# O staged in Q, alone, with K3V2 and with K2V3; paired against production's first copy, 60 reps, issue 7's grid.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
[ -f build-h100/build.ninja ] || bash scripts/device-sm90.sh build-dev 2>&1 | tail -1
B=build-h100/libflash/cuda/sm90/sm90_dev
ninja -C build-h100 sm90_dev > $OUT/build-dev.log 2>&1 || { grep -A8 error $OUT/build-dev.log | head -30; exit 1; }
echo "built at $(( $(date +%s) - t0 )) s"
P="4096:0,4096:0.1,4096:0.25,4096:0.5,8192:0.1,8192:0.25,16384:0.1,16384:0.25"
SM90_DEV_REF="3wg 2 rings" SM90_DEV_ONLY="2 rings s57" SM90_DEV_PROBLEMS="$P" timeout 230 $B 60 sparse 2>&1 | tee $OUT/dev-sparse-d64-s57-2.txt
echo "d64 at $(( $(date +%s) - t0 )) s"
SM90_DEV_REF="d128 bs (prod)" SM90_DEV_ONLY="d128 bs s57" SM90_DEV_PROBLEMS="$P" timeout 200 $B 60 sparse 2>&1 | tee $OUT/dev-sparse-d128-s57-2.txt
echo "end at $(( $(date +%s) - t0 )) s"
