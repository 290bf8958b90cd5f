#!/usr/bin/env bash
# s57-7: issue 9's peers interleaved twice more (warm, 30 reps, the whole grid), v85's production kernels; and issue 7's
# 4k masks once more (fa-bench, d64 and d128).
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
bash scripts/device-sm90.sh build 2>&1 | grep -E "phase build|build:" | head -3
export PYTHONPATH=bindings/python:scripts LIBFLASH_PATH=build-h100 PYTHONUNBUFFERED=1
for r in 1 2; do
  timeout 150 python3 scripts/interleaved_peers.py --icache warm --reps 30 --json $OUT/peers-warm-s57-7-run$r.json > $OUT/peers-warm-s57-7-run$r.txt 2>&1
  echo "peers run $r exit $? at $(( $(date +%s) - t0 )) s"; grep -E "^ +(64|128|256) " $OUT/peers-warm-s57-7-run$r.txt | awk '{print $1, $2, $3, $6}' | tr '\n' ';'; echo
done
echo "end at $(( $(date +%s) - t0 )) s"
