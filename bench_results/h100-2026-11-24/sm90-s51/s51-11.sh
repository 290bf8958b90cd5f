#!/usr/bin/env bash
# s51-11: the final revision: the fast sm90 tests, and the peers interleaved (warm, 30 reps) on every cell.
set -uo pipefail
export OUT
bash scripts/device-sm90.sh build 2>&1 | grep -E "build:|C75" | head
bash scripts/device-sm90.sh testfast 2>&1 | tail -3
export PYTHONPATH=bindings/python LIBFLASH_PATH=build-h100 PYTHONUNBUFFERED=1
timeout 200 python3 scripts/interleaved_peers.py --icache warm --reps 30 --json $OUT/peers-warm-final.json > $OUT/peers-warm-final.txt 2>&1
tail -31 $OUT/peers-warm-final.txt
