#!/usr/bin/env bash
# session 50, s50-8: d128 dense on cluster pairs sharing K/V by TMA multicast (sm90_dev ClusterPair), against production
set -uo pipefail
bash scripts/device-sm90.sh build-dev > $OUT/build-dev.txt 2>&1; tail -1 $OUT/build-dev.txt
B=build-h100/libflash/cuda/sm90/sm90_dev
SM90_DEV_ONLY="cluster" SM90_DEV_PROBLEMS=1024,2048,16384 timeout 150 $B 30 d128 | grep -v causal > $OUT/s50-8-a.txt 2>&1; echo "exit $?"
cat $OUT/s50-8-a.txt
true

