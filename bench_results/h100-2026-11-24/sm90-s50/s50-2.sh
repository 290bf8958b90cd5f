#!/usr/bin/env bash
# session 50, s50-2: the "again" copy's bias in sm90_dev -- host overhead (SPIN) or a cold GPU (FLUSH)?
set -uo pipefail
bash scripts/device-sm90.sh build-dev > $OUT/build-dev.txt 2>&1; tail -2 $OUT/build-dev.txt
B=build-h100/libflash/cuda/sm90/sm90_dev
for mode in none spin flush; do
  unset SM90_DEV_SPIN SM90_DEV_FLUSH
  [ $mode != none ] && export SM90_DEV_SPIN=200000
  [ $mode = flush ] && export SM90_DEV_FLUSH=256
  SM90_DEV_ONLY="3wg 2 rings" SM90_DEV_REF="3wg 2 rings" SM90_DEV_PROBLEMS="4096:0,4096:0.1,4096:0.25,4096:0.5" timeout 120 $B 60 sparse > $OUT/s50-2-$mode-sparse.txt 2>&1
  for d in d64 d128 d256; do
    SM90_DEV_ONLY=zzz SM90_DEV_PROBLEMS=1024,2048 timeout 120 $B 40 $d > $OUT/s50-2-$mode-$d.txt 2>&1
  done
  echo "== $mode"; cat $OUT/s50-2-$mode-*.txt | grep -v "^candidate" | grep -v "^ *$" | grep -E "prod|2 rings"
done
