#!/usr/bin/env bash
# s51-8: a last causal group of 1 grid against 2 (production), 80 reps at 1k-4k (d256, d128), and DRAM at d256 2k.
set -uo pipefail
export OUT
[ -f build-h100/build.ninja ] || bash scripts/device-sm90.sh build-dev 2>&1 | tail -2
B=build-h100/libflash/cuda/sm90/sm90_dev
ninja -C build-h100 sm90_dev > $OUT/build-dev.log 2>&1 || { grep -A8 error $OUT/build-dev.log | head -30; exit 1; }
for d in 256 128; do
  echo "== d$d"
  SM90_DEV_ONLY="grp 16MB t1,grp 8MB t2" SM90_DEV_REF="(prod)" SM90_DEV_PROBLEMS="1024,2048,4096" timeout 250 $B 80 d$d 2>&1 | tee $OUT/dev-d$d-tail.txt | grep -v " dense "
done
echo "== ncu d256 causal 2k (round 0: prod, again, 16t1)"
M="dram__bytes_read.sum,gpu__time_duration.sum"
SM90_DEV_ONLY="grp 16MB t1" SM90_DEV_PROBLEMS="2048" timeout 200 ncu --clock-control none --kernel-name regex:fwd_kernel \
  --launch-skip 21 --launch-count 6 --metrics "$M" $B 0 d256 > $OUT/ncu-d256-2k.txt 2>&1
echo "ncu exit $?"; grep -E "dram__bytes_read|duration" $OUT/ncu-d256-2k.txt
