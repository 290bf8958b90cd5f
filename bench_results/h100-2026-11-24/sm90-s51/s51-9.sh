#!/usr/bin/env bash
# s51-9: the 1-grid tail at d256 1k in production: against the 2-grid rule (paired), the d256 causal tests, peers at d256.
set -uo pipefail
export OUT
bash scripts/device-sm90.sh build 2>&1 | grep -E "build:|C75" | head
B=build-h100/libflash/cuda/sm90/sm90_dev
ninja -C build-h100 sm90_dev > $OUT/build-dev.log 2>&1 || { grep -A8 error $OUT/build-dev.log | head -30; exit 1; }
SM90_DEV_ONLY="t2 (s50)" SM90_DEV_REF="(prod)" SM90_DEV_PROBLEMS="1024,2048" timeout 200 $B 60 d256 2>&1 | tee $OUT/dev-d256-tail-prod.txt | grep -v " dense "
GTEST_FILTER='*D256DiagonalSkip*/sm90:GpuSmallGrid.Sm90D256CausalSkip:Random/GpuSweep.MatchesReference/sm90_*:*LongSequenceCausal*/sm90:*TilesThatSeeNoKey*/sm90' bash scripts/device-sm90.sh testf 2>&1 | tail -4
export PYTHONPATH=bindings/python LIBFLASH_PATH=build-h100 PYTHONUNBUFFERED=1
for r in 1 2; do
timeout 200 python3 scripts/interleaved_peers.py --icache warm --reps 30 --hdims 256 --seqlens 1024,2048 --json $OUT/peers-d256-$r.json > $OUT/peers-d256-$r.txt 2>&1
tail -5 $OUT/peers-d256-$r.txt
done
