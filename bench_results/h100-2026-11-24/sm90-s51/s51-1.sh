#!/usr/bin/env bash
# s51-1: build with kSkipDiag (d64 three warpgroups, d256), the fast sm90 tests, then sm90_dev: production (skip) against
# the same kernels without it, d256 and d64 dense + causal, d128's 192-key kernel at 8k-16k.
set -uo pipefail
export OUT
bash scripts/device-sm90.sh build testfast 2>&1 | tail -25
B=build-h100/libflash/cuda/sm90/sm90_dev
ninja -C build-h100 sm90_dev > $OUT/build-dev.log 2>&1 || { grep -A8 error $OUT/build-dev.log | head -30; exit 1; }
echo "== d256"
SM90_DEV_ONLY="no skip diag" SM90_DEV_REF="(prod)" timeout 200 $B 30 d256 2>&1 | tee $OUT/dev-d256.txt
echo "== d64"
SM90_DEV_ONLY="no skip diag" SM90_DEV_REF="(prod)" timeout 200 $B 30 d64 2>&1 | tee $OUT/dev-d64.txt
echo "== d128 (192-key kernel with the skip, causal 8k-16k)"
SM90_DEV_ONLY="bn192 ring" SM90_DEV_REF="bn192 ring (long prod)" SM90_DEV_PROBLEMS="8192,16384" timeout 200 $B 30 d128 2>&1 | tee $OUT/dev-d128-long.txt
