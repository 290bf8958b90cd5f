#!/usr/bin/env bash
# s53-2: where d256 causal 1k's DRAM reads above Q + K + V come from: ncu on production, always-rescale and its K/V-hot
# probe (every K/V load from key block 0), dense and causal 1k; the check launches in candidate order.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
B=build-h100/libflash/cuda/sm90/sm90_dev
M="dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sectors_op_read.sum,lts__t_sectors_op_write.sum,gpu__time_duration.sum"
for sk in 0 30; do
  SM90_DEV_ONLY="d256 a" SM90_DEV_PROBLEMS="1024" timeout 200 ncu --clock-control none --kernel-name regex:fwd_kernel \
    --launch-skip $sk --launch-count 5 --metrics "$M" $B 0 d256 > $OUT/ncu-d256-probes-$sk.txt 2>&1
  echo "ncu skip $sk exit $?"; grep -E "^  [a-z_]|dram__|lts__|duration" $OUT/ncu-d256-probes-$sk.txt | grep -v "^    Section" | head -40
done
SM90_DEV_ONLY="d256 a" SM90_DEV_PROBLEMS="1024" timeout 60 $B 0 d256 2>&1 | head -20
