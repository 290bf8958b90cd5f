#!/usr/bin/env bash
# session 50, s50-12: the two-ring kernel's last S tiles handed out as pair-only and single-only halves
set -uo pipefail
bash scripts/device-sm90.sh build-dev > $OUT/build-dev.txt 2>&1; tail -1 $OUT/build-dev.txt
B=build-h100/libflash/cuda/sm90/sm90_dev
SM90_DEV_ONLY="3wg 2 rings,halves" SM90_DEV_REF="3wg 2 rings" SM90_DEV_PROBLEMS="4096:0,4096:0.1,4096:0.25,4096:0.5,8192:0,8192:0.5,16384:0,16384:0.25" timeout 200 $B 60 sparse > $OUT/s50-12-halves.txt 2>&1; echo "exit $?"
grep -E "2 rings|dense" $OUT/s50-12-halves.txt
timeout 100 $B 15 ctatimes 2>&1 | tee $OUT/s50-12-ctatimes.txt | grep -E "case|2ring|halves"
