#!/usr/bin/env bash
# session 50, s50-11: how evenly the persistent CTAs finish (sm90_dev ctatimes, %globaltimer per CTA, median of 15 launches)
set -uo pipefail
bash scripts/device-sm90.sh build-dev > $OUT/build-dev.txt 2>&1; tail -1 $OUT/build-dev.txt
timeout 120 build-h100/libflash/cuda/sm90/sm90_dev 15 ctatimes 2>&1 | tee $OUT/s50-11-ctatimes.txt
