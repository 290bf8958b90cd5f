#!/usr/bin/env bash
# s53-8: v82: issue 9's peers interleaved (warm, 30 reps), then the sm90 edge tests s53-7's time limit cut short.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
[ -f build-h100/tests/flash_gpu_tests ] || bash scripts/device-sm90.sh build 2>&1 | grep -E "phase build|build:" | head -3
ninja -C build-h100 -j16 > /dev/null 2>&1
export PYTHONPATH=bindings/python:scripts LIBFLASH_PATH=build-h100 PYTHONUNBUFFERED=1
timeout 200 python3 scripts/interleaved_peers.py --icache warm --reps 30 --json $OUT/peers-warm-s53-8.json > $OUT/peers-warm-s53-8.txt 2>&1
echo "peers exit $? at $(( $(date +%s) - t0 )) s"; tail -31 $OUT/peers-warm-s53-8.txt
left=$(( 585 - ($(date +%s) - t0) ))
timeout $(( left > 40 ? left - 10 : 30 )) build-h100/tests/flash_gpu_tests --gtest_filter='Algorithms/GpuEdges.*/sm90:-*D64DiagonalHalfBlocks*:*D256DiagonalSkip*:*D64CausalTopRows*:*D64DenseRowSplits*:*ShortLastTiles*:*LongSequenceCausal*:*BlockSparse/sm90:*BlockSparseEveryBlockSize*:*BlockSparseUnsortedRepeatedAndJunkIndices*' \
  > "$OUT/gpu-tests-edges-s53-8.log" 2>&1
echo "edges: exit $? ($(grep -c '\[       OK \]' "$OUT/gpu-tests-edges-s53-8.log") ok, $(grep -c '\[  FAILED  \]' "$OUT/gpu-tests-edges-s53-8.log") failed lines)"; grep -E "FAILED|PASSED|tests ran" "$OUT/gpu-tests-edges-s53-8.log" | tail -5
echo "end at $(( $(date +%s) - t0 )) s"
