#!/usr/bin/env bash
# s53-1: d256 causal 1k-2k: the causal order's groups smaller than 16 MB with the 1-grid tail, paired (80 reps, twice),
# and their DRAM bytes under ncu (causal 1k).
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
[ -f build-h100/build.ninja ] || bash scripts/device-sm90.sh build-dev 2>&1 | tail -2
B=build-h100/libflash/cuda/sm90/sm90_dev
ninja -C build-h100 sm90_dev > $OUT/build-dev.log 2>&1 || { grep -A8 error $OUT/build-dev.log | head -30; exit 1; }
echo "built at $(( $(date +%s) - t0 )) s"
for r in 1 2; do
  echo "== time, run $r"
  SM90_DEV_ONLY="grp" SM90_DEV_REF="(prod)" SM90_DEV_PROBLEMS="1024,2048" timeout 200 $B 80 d256 2>&1 | tee $OUT/dev-d256-groups-run$r.txt | grep -v " dense "
done
echo "== ncu (causal 1k, the check launches in candidate order: prod, again, 16t2, 8t1, 6t1, 4t1, 2t1)"
M="dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct,gpu__time_duration.sum"
SM90_DEV_ONLY="grp" SM90_DEV_PROBLEMS="1024" timeout 200 ncu --clock-control none --kernel-name regex:fwd_kernel \
  --launch-skip 42 --launch-count 7 --metrics "$M" $B 0 d256 > $OUT/ncu-d256-groups.txt 2>&1
echo "ncu exit $?"; grep -E "dram__bytes_read|duration" $OUT/ncu-d256-groups.txt
echo "end at $(( $(date +%s) - t0 )) s"
