#!/usr/bin/env bash
# s53-5: d256 causal 1k-2k walked upwards (Traits::kDevUpward), with production's groups and heads one after another,
# paired (80 reps); the DRAM bytes of each under ncu (causal 1k, the check launches in candidate order:
# prod, again, up, up 1MB, up 2MB, noskip 1MB, no skip diag).
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
[ -f build-h100/build.ninja ] || bash scripts/device-sm90.sh build-dev 2>&1 | tail -1
B=build-h100/libflash/cuda/sm90/sm90_dev
ninja -C build-h100 sm90_dev > $OUT/build-dev.log 2>&1 || { grep -A8 error $OUT/build-dev.log | head -30; exit 1; }
grep -A3 "Compiling entry function.*Upward" $OUT/build-dev.log | grep -E "spill|registers" | sort | uniq -c
echo "built at $(( $(date +%s) - t0 )) s"
SM90_DEV_ONLY="up,noskip,no skip diag" SM90_DEV_REF="(prod)" SM90_DEV_PROBLEMS="1024,2048" timeout 250 $B 80 d256 2>&1 | tee $OUT/dev-d256-up.txt
M="dram__bytes_read.sum,gpu__time_duration.sum"
SM90_DEV_ONLY="up,noskip,no skip diag" SM90_DEV_PROBLEMS="1024" timeout 200 ncu --clock-control none --kernel-name regex:fwd_kernel \
  --launch-skip 42 --launch-count 7 --metrics "$M" $B 0 d256 > $OUT/ncu-d256-up.txt 2>&1
echo "ncu exit $?"; grep -E "dram__bytes_read|duration" $OUT/ncu-d256-up.txt
echo "end at $(( $(date +%s) - t0 )) s"
