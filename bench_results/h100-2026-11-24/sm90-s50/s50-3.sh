#!/usr/bin/env bash
# session 50, s50-3: what a cold instruction cache costs each production kernel (SM90_DEV_EVICT: "(prod)" after a
# 131 KB-code kernel on every SM, "(prod again)" right after it)
set -uo pipefail
bash scripts/device-sm90.sh build-dev > $OUT/build-dev.txt 2>&1; tail -1 $OUT/build-dev.txt
B=build-h100/libflash/cuda/sm90/sm90_dev
export SM90_DEV_EVICT=1 SM90_DEV_SPIN=200000
for mode in evict evictflush; do
  [ $mode = evictflush ] && export SM90_DEV_FLUSH=256
  SM90_DEV_ONLY="3wg 2 rings" SM90_DEV_REF="3wg 2 rings" SM90_DEV_PROBLEMS="4096:0,4096:0.1,4096:0.25,4096:0.5" timeout 100 $B 50 sparse > $OUT/s50-3-$mode-sparse.txt 2>&1
  for d in d64 d128 d256; do
    SM90_DEV_ONLY=zzz SM90_DEV_PROBLEMS=1024,2048 timeout 100 $B 30 $d > $OUT/s50-3-$mode-$d.txt 2>&1
  done
  echo "== $mode"; cat $OUT/s50-3-$mode-*.txt | grep -v "^candidate" | grep -v "^ *$" | grep -E "prod|2 rings" | grep -v "dense     4096" | cut -c1-60,88-
done
