#!/usr/bin/env bash
# s64-10: s64-9 again with L2_64B too and 80 reps: the TMA maps' L2 promotion, four builds timed interleaved.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
bash scripts/device-sm90.sh build 2>&1 | grep -E "build:" | head -2
mkdir -p /tmp/libs/prod /tmp/libs/p128 /tmp/libs/pnone /tmp/libs/p64
cp -L build-h100/libflash.so /tmp/libs/prod/libflash.so
for v in L2_128B:p128 NONE:pnone L2_64B:p64; do
  sed -E -i "s/CU_TENSOR_MAP_L2_PROMOTION_(L2_[0-9]+B|NONE)/CU_TENSOR_MAP_L2_PROMOTION_${v%%:*}/" libflash/cuda/sm90/tma.cpp
  grep -o "CU_TENSOR_MAP_L2_PROMOTION_[0-9A-Z_]*" libflash/cuda/sm90/tma.cpp
  ninja -C build-h100 flash > /dev/null 2>&1 || { echo "rebuild failed"; exit 1; }
  cp -L build-h100/libflash.so /tmp/libs/${v##*:}/libflash.so
done
export PYTHONPATH=bindings/python:scripts
P="d128-4k-none=128:4096:2:16:none,d128-4k-bs.1=128:4096:2:16:0.1,d128-4k-bs.25=128:4096:2:16:0.25,d128-4k-bs.5=128:4096:2:16:0.5,d64-4k-none=64:4096:2:32:none,d64-4k-bs.1=64:4096:2:32:0.1,d128-8k-bs.1=128:8192:2:16:0.1"
LIBFLASH_PATH=/tmp/libs/prod/libflash.so timeout 400 python3 scripts/interleaved_libs.py --base p128=/tmp/libs/p128/libflash.so \
  --base none=/tmp/libs/pnone/libflash.so --base p64=/tmp/libs/p64/libflash.so --reps 80 --problems "$P" --json $OUT/l2promo-s64-10.json 2>&1 | tee $OUT/l2promo-s64-10.txt
