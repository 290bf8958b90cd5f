#!/usr/bin/env bash
# s52-7: the final revision: issue 9's peers interleaved (warm, 30 reps) on every cell, then the fast sm90 tests.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
bash scripts/device-sm90.sh build 2>&1 | grep -E "phase build|C75" | head
export PYTHONPATH=bindings/python:scripts LIBFLASH_PATH=build-h100 PYTHONUNBUFFERED=1
timeout 260 python3 scripts/interleaved_peers.py --icache warm --reps 30 --json $OUT/peers-warm-s52-7.json > $OUT/peers-warm-s52-7.txt 2>&1
tail -31 $OUT/peers-warm-s52-7.txt
echo "peers done at $(( $(date +%s) - t0 )) s"
left=$(( 575 - ($(date +%s) - t0) ))
timeout $(( left > 40 ? left - 10 : 30 )) build-h100/tests/flash_gpu_tests --gtest_filter='*sm90*:GpuAuto*:GpuWorkspace*-*GpuTailSplit*:*LongKeyRangesD128*:GpuSmallGrid*:*GpuBackward*:*TwoRings*:*D64Windows*' \
  > "$OUT/gpu-tests-sm90-fast-s52-7.log" 2>&1
echo "testfast: exit $? ($(grep -c '\[       OK \]' "$OUT/gpu-tests-sm90-fast-s52-7.log") ok, $(grep -c '\[  FAILED  \]' "$OUT/gpu-tests-sm90-fast-s52-7.log") failed lines)"; grep -E "PASSED|tests ran" "$OUT/gpu-tests-sm90-fast-s52-7.log" | tail -3
echo "end at $(( $(date +%s) - t0 )) s"
