#!/usr/bin/env bash
# s54-2: d128 on three consumer warpgroups (192-row tiles; 64-key blocks x 4 stages, 80-key x 3), O staged in Q, against
# production's 128 x 128 two-warpgroup kernel, paired; seqlens at multiples of 192 (no partial tiles) beside the
# standard ones.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
[ -f build-h100/build.ninja ] || bash scripts/device-sm90.sh build-dev 2>&1 | tail -1
B=build-h100/libflash/cuda/sm90/sm90_dev
ninja -C build-h100 sm90_dev > $OUT/build-dev.log 2>&1 || { grep -A8 error $OUT/build-dev.log | head -30; exit 1; }
grep -A3 "Compiling entry function.*TraitsILi128ELi\(64\|80\)ELi[34]E.*Li3ELi0ELi2E" $OUT/build-dev.log | grep -E "spill|registers|C75" | sort | uniq -c
echo "built at $(( $(date +%s) - t0 )) s"
SM90_DEV_ONLY="d128 3wg" SM90_DEV_REF="(prod)" SM90_DEV_SEQLENS="1024,1152,2048,2304,4096,4608,16128,16384" timeout 400 $B 30 d128 2>&1 | tee $OUT/dev-d128-3wg-s54-2.txt
echo "end at $(( $(date +%s) - t0 )) s"
