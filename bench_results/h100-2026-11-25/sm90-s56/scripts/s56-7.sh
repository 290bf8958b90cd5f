#!/usr/bin/env bash
# s56-7: d64 causal 1k-2k on fewer persistent CTAs (LIBFLASH_SM90_MAX_CTAS; v83 found equal-tile rounds faster on fewer
# SMs on this power-limited GPU): interleaved against cuDNN, 60 reps, each grid twice, in alternating order.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
bash scripts/device-sm90.sh build 2>&1 | grep -E "phase build|build:" | head -3
export PYTHONPATH=bindings/python:scripts LIBFLASH_PATH=build-h100 PYTHONUNBUFFERED=1
for round in 1 2; do
  for c in 132 128 120 112; do
    if [ $c = 132 ]; then unset LIBFLASH_SM90_MAX_CTAS; else export LIBFLASH_SM90_MAX_CTAS=$c; fi
    timeout 60 python3 scripts/interleaved_peers.py --icache warm --reps 60 --hdims 64 --seqlens 1024,2048 --causal 1 \
      --peers cudnn --json $OUT/ctas-$c-r$round.json > $OUT/ctas-$c-r$round.txt 2>&1
    echo "ctas $c round $round (exit $?, $(( $(date +%s) - t0 )) s):"; grep -E "^ +64" $OUT/ctas-$c-r$round.txt
  done
done
unset LIBFLASH_SM90_MAX_CTAS
echo "end at $(( $(date +%s) - t0 )) s"
