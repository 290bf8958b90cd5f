#!/usr/bin/env bash
# scripts/device-run.sh PHASE -- what we run on the lent H100 (CI has no GPU). Results land in $OUT
# (or ./device-out) and are committed under bench_results/.
#   build   configure + build for sm_90a only (fast), print ptxas resource usage of the kernels
#   test    GPU test suite (+ compute-sanitizer memcheck/racecheck on a reduced sweep)
#   bench   fa-bench standard grid (flash vs naive) + PyTorch SDPA peers in the same run
#   python  the Python binding's GPU tests
# Phases can be combined: scripts/device-run.sh build test
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/device-out}
mkdir -p "$OUT"
BUILD=build-h100
export PATH=/usr/local/cuda/bin:$PATH PYTHONUNBUFFERED=1
for phase in "$@"; do
  case "$phase" in
    build)
      nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv > "$OUT/nvidia-smi.csv" 2>&1
      start=$(date +%s)
      cmake -S . -B $BUILD -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASH_CUDA_ARCHS=90a -DFLASH_CUDA_PTX=OFF \
            -DFLASH_PTXAS_VERBOSE=ON > "$OUT/build.log" 2>&1 &&
      ninja -C $BUILD -j16 >> "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
      echo "build: $(( $(date +%s) - start )) s on 16 cores"
      grep -E "Compiling entry|Used [0-9]+ registers|spill" "$OUT/build.log" | grep -B1 -E "spill stores [1-9]|bytes stack frame, [1-9]" | head -20
      ;;
    test)
      $BUILD/tests/flash_gpu_tests --gtest_brief=1 2>&1 | tee "$OUT/gpu-tests.log" | tail -15
      $BUILD/tests/flash_tests --gtest_brief=1 2>&1 | tail -3
      ;;
    sanitize)
      # Reduced sweep under the sanitizers (slow: a handful of cases per algorithm).
      for tool in memcheck racecheck synccheck; do
        compute-sanitizer --tool $tool --error-exitcode 9 $BUILD/tests/flash_gpu_tests --gtest_brief=1 \
          --gtest_filter='Random/GpuSweep.MatchesReference/sm80_1:Random/GpuSweep.MatchesReference/sm80_2:Random/GpuSweep.MatchesReference/sm80_3:Random/GpuSweep.MatchesReference/naive_1:Algorithms/GpuEdges.EmptyRowsAndAlignments/sm80:Algorithms/GpuEdges.SlidingWindows/sm80:Random/GpuBackwardSweep.MatchesReference/sm80_1:Random/GpuBackwardSweep.MatchesReference/sm80_2' \
          > "$OUT/sanitizer-$tool.log" 2>&1
        echo "compute-sanitizer $tool: exit $? ($(grep -c 'ERROR SUMMARY: 0 errors' "$OUT/sanitizer-$tool.log") clean summaries)"
        tail -2 "$OUT/sanitizer-$tool.log"
      done
      ;;
    bench)
      B=$BUILD/cli/fa-bench
      $B devices | tee "$OUT/devices.txt"
      # The papers' grid, flash vs naive, dense and causal, with error checks.
      $B run --grid standard --dtype bf16 --head-dim 64,128 --algo sm80,naive --mask "none;causal" --check \
         --warmup 5 --reps 30 --no-progress --json "$OUT/fa-bench-h100-grid.json" > "$OUT/fa-bench-grid.txt" 2>&1
      echo "fa-bench grid: exit $?"; tail -12 "$OUT/fa-bench-grid.txt"
      ;;
    grid80)
      # The papers' grid for the fused kernel alone (no naive, no check): quick before/after timing.
      $BUILD/cli/fa-bench run --grid standard --dtype bf16 --head-dim 64,128 --algo sm80 --mask "none;causal" \
         --warmup 5 --reps 30 --no-progress --json "$OUT/fa-bench-h100-grid-sm80.json" > "$OUT/fa-bench-grid-sm80.txt" 2>&1
      echo "fa-bench grid80: exit $?"; tail -6 "$OUT/fa-bench-grid-sm80.txt"
      ;;
    bwd)
      # Issue 8: forward+backward on the papers' grid (sm80), against the peers' fwd_bwd in the same run.
      B=$BUILD/cli/fa-bench
      $B run --grid standard --dtype bf16 --head-dim 64,128 --algo sm80 --mode fwd_bwd,bwd --mask "none;causal" \
         --warmup 3 --reps 20 --no-progress --json "$OUT/fa-bench-h100-bwd.json" > "$OUT/fa-bench-bwd.txt" 2>&1
      echo "fa-bench bwd: exit $?"; tail -10 "$OUT/fa-bench-bwd.txt"
      ;;
    masks)
      # Issue 7's figures: block-sparse vs dense, causal vs dense, sliding window vs dense causal.
      B=$BUILD/cli/fa-bench
      for d in 64 128; do
        $B run --dtype bf16 --head-dim $d --heads $((2048 / d)) --batch 2 --seqlen 4096,8192,16384 --algo sm80 \
           --mask "none;causal;window:256,0;block-sparse:0.1:128;block-sparse:0.25:128;block-sparse:0.5:128" \
           --warmup 5 --reps 30 --no-progress --json "$OUT/fa-bench-h100-masks-d$d.json" > "$OUT/fa-bench-masks-d$d.txt" 2>&1
        echo "fa-bench masks d$d: exit $?"; tail -20 "$OUT/fa-bench-masks-d$d.txt"
      done
      ;;
    peers)
      if [ -f .devcarry/torch_sdpa.py ]; then
        python3 .devcarry/torch_sdpa.py --hdims 64,128 --modes fwd,fwd_bwd --backends flash,cudnn \
          --json "$OUT/torch-sdpa-h100.json" > "$OUT/torch-sdpa.log" 2>&1
        echo "torch_sdpa: exit $?"; tail -3 "$OUT/torch-sdpa.log"
      fi
      ;;
    python)
      LIBFLASH_PATH=$PWD/$BUILD/libflash.so PYTHONPATH=$PWD/bindings/python python3 -m pytest -q bindings/python/tests \
        2>&1 | tee "$OUT/pytest-gpu.log" | tail -8
      ;;
  esac
done
