#!/usr/bin/env bash
set -uo pipefail
export PYTHONPATH=bindings/python LIBFLASH_PATH=build-h100 PYTHONUNBUFFERED=1
[ -f build-h100/libflash/libflash.so ] || ls build-h100 | head
echo "== peers warm"
timeout 330 python3 scripts/interleaved_peers.py --icache warm --reps 30 --json $OUT/peers-warm.json > $OUT/peers-warm.txt 2>&1
tail -32 $OUT/peers-warm.txt
