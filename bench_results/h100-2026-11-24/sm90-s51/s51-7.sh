#!/usr/bin/env bash
# s51-7: d256 causal 1k: the causal order's groups and last group -- time (paired) and DRAM bytes under ncu.
set -uo pipefail
export OUT
[ -f build-h100/build.ninja ] || bash scripts/device-sm90.sh build-dev 2>&1 | tail -2
B=build-h100/libflash/cuda/sm90/sm90_dev
ninja -C build-h100 sm90_dev > $OUT/build-dev.log 2>&1 || { grep -A8 error $OUT/build-dev.log | head -30; exit 1; }
echo "== time"
SM90_DEV_ONLY="grp" SM90_DEV_REF="(prod)" SM90_DEV_PROBLEMS="1024,2048" timeout 200 $B 40 d256 2>&1 | tee $OUT/dev-d256-groups.txt | grep -v " dense "
echo "== ncu (causal 1k, round 0 in candidate order: prod, again, 16t1, 16t3, 8t2, 24t2, 128t2, split)"
M="dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct,gpu__time_duration.sum"
SM90_DEV_ONLY="grp" SM90_DEV_PROBLEMS="1024" timeout 300 ncu --clock-control none --kernel-name regex:fwd_kernel \
  --launch-skip 56 --launch-count 8 --metrics "$M" $B 0 d256 > $OUT/ncu-d256-groups.txt 2>&1
echo "ncu exit $?"; grep -E "dram__bytes_read|dram__bytes_write|hit_rate|duration" $OUT/ncu-d256-groups.txt
