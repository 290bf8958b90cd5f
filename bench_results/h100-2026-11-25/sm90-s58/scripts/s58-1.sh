#!/usr/bin/env bash
# s58-1: L2 eviction priorities on the block-sparse short lists (Traits kL2HintQ / KV / O, sm90_dev L2Hints candidates),
# paired against production's first copy, with fa-bench's dirty flush (SM90_DEV_FLUSH=256) and without; then ncu's DRAM
# bytes under the dirty flush (ncu's cache control off) for production and the hinted forms at 4k s = .1.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
[ -f build-h100/build.ninja ] || bash scripts/device-sm90.sh build-dev 2>&1 | tail -1
B=build-h100/libflash/cuda/sm90/sm90_dev
ninja -C build-h100 sm90_dev > $OUT/build-dev.log 2>&1 || { grep -A8 error $OUT/build-dev.log | head -30; exit 1; }
echo "built at $(( $(date +%s) - t0 )) s"
P="4096:0.1,4096:0.25,4096:0.5,8192:0.1,16384:0.1"
for fl in 256 0; do
  SM90_DEV_FLUSH=$fl SM90_DEV_REF="d128 bs (prod)" SM90_DEV_ONLY="d128 bs s58" SM90_DEV_PROBLEMS="$P" timeout 150 $B 60 sparse 2>&1 | tee $OUT/dev-sparse-d128-s58-1-flush$fl.txt | grep -E "d128 bs"
  SM90_DEV_FLUSH=$fl SM90_DEV_REF="3wg 2 rings" SM90_DEV_ONLY="3wg 2 rings" SM90_DEV_PROBLEMS="4096:0.1,4096:0.25,4096:0.5" timeout 150 $B 60 sparse 2>&1 | tee $OUT/dev-sparse-d64-s58-1-flush$fl.txt | grep -E "2 rings"
  echo "flush $fl at $(( $(date +%s) - t0 )) s"
done
M="dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum"
SM90_DEV_FLUSH=256 SM90_DEV_ONLY="d128 bs s58" SM90_DEV_PROBLEMS="4096:0.1,4096:0.25" timeout 200 \
  ncu --cache-control none --clock-control none --kernel-name regex:fwd_kernel --metrics "$M" $B 1 sparse 2>&1 |
  grep -v "==PROF==" > $OUT/ncu-dram-dirty-s58-1.txt
echo "ncu exit $? at $(( $(date +%s) - t0 )) s"
grep -E "fwd_kernel|dram__|gpu__time" $OUT/ncu-dram-dirty-s58-1.txt | head -80
