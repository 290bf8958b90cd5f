#!/usr/bin/env bash
# s51-3: production with kSkipDiag 2: the sanitizers on the skip (2 CTAs) and the top rows, then the peers interleaved.
set -uo pipefail
export OUT
bash scripts/device-sm90.sh build 2>&1 | grep -E "build:|C75" | head
GTEST_FILTER='GpuSmallGrid.Sm90D256CausalSkip:GpuSmallGrid.Sm90D64CausalTopRows' bash scripts/device-sm90.sh testf 2>&1 | tail -4
GTEST_FILTER='GpuSmallGrid.Sm90D256CausalSkip:GpuSmallGrid.Sm90D64CausalTopRows' timeout 200 bash scripts/device-sm90.sh sanitize-f 2>&1 | tail -9
echo "== peers warm"
export PYTHONPATH=bindings/python LIBFLASH_PATH=build-h100 PYTHONUNBUFFERED=1
timeout 330 python3 scripts/interleaved_peers.py --icache warm --reps 30 --json $OUT/peers-warm.json > $OUT/peers-warm.txt 2>&1
tail -34 $OUT/peers-warm.txt
