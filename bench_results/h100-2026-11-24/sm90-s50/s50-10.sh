#!/usr/bin/env bash
# session 50, s50-10: the causal order's full groups in a zigzag (fewer heads' K/V in flight), d256 and d128 causal
set -uo pipefail
bash scripts/device-sm90.sh build-dev > $OUT/build-dev.txt 2>&1; tail -1 $OUT/build-dev.txt
B=build-h100/libflash/cuda/sm90/sm90_dev
SM90_DEV_ONLY="zigzag,12MB" SM90_DEV_PROBLEMS=1024,2048,4096,16384 timeout 200 $B 40 causal > $OUT/s50-10-causal.txt 2>&1; echo "exit $?"
grep -E "d128|d256" $OUT/s50-10-causal.txt
