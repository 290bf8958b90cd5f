#!/bin/bash
# One device call: build for sm_90a, run the sm80 backward GPU tests, time fwd_bwd on the standard grid.
# Usage (repo root): libflash/cuda/sm80_bwd/dev/h100.sh [test-filter] [bench-seconds]
export PATH=/usr/local/cuda/bin:$PATH
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
FILTER=${1:-'*Backward*sm80*:*GpuBackward*/sm80'}
start=$(date +%s)
cmake -S . -B build-h100 -G Ninja -DFLASH_CUDA_ARCHS=90a -DFLASH_CUDA_PTX=OFF -DFLASH_PTXAS_VERBOSE=ON > $OUT/cmake.log 2>&1
ninja -C build-h100 -j16 flash_gpu_tests fa-bench > $OUT/build.log 2>&1 || { tail -50 $OUT/build.log; exit 1; }
echo "build: $(( $(date +%s) - start )) s"
grep -A2 "bwd_main" $OUT/build.log | grep -E "spill|registers" | sort | uniq -c
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
timeout ${TEST_TIMEOUT:-150} build-h100/tests/flash_gpu_tests --gtest_filter="$FILTER" > $OUT/tests.log 2>&1
echo "tests rc=$?"; grep -E "FAILED|PASSED|SKIPPED \]|Failure|error|worst" $OUT/tests.log | head -40
tail -3 $OUT/tests.log
for v in 0; do for c in "" "--causal"; do
  timeout ${BENCH_TIMEOUT:-90} build-h100/cli/fa-bench run --grid standard --mode ${MODES:-fwd,bwd,fwd_bwd} --algo sm80 --dtype bf16 --head-dim 64,128 $c --no-progress --warmup 3 --reps 10 > $OUT/bench_v$v$c.log 2>&1
  echo "== variant $v $c"; grep -E "^(fwd|bwd)" $OUT/bench_v$v$c.log | awk '{print $1, $5, $8, $9, $10, $13}'
done; done
