#!/usr/bin/env bash
# scripts/device.sh PHASE... -- what a maintainer runs on a GPU machine: build, the GPU tests, the sanitizers, the
# benchmarks and the peer comparison. Phases run in the order given; results land under ${OUT:-out}/PHASE/.
#
#   build     configure and build (Release, CUDA on) into $BUILD; ptxas' register and spill report of the kernels
#   test      the GPU test suite (flash_gpu_tests: forward and backward, every algorithm) in TEST_JOBS gtest shards
#   sanitize  compute-sanitizer memcheck, racecheck and synccheck on a reduced sm90 sweep ($SANITIZE_FILTER), the
#             persistent grid capped at $SANITIZE_MAX_CTAS CTAs (LIBFLASH_MAX_CTAS) so racecheck finishes
#   bench     fa-bench with --check: the standard grid (bf16, d 64/128/256, no mask and causal), forward and
#             forward+backward, and the masks grid (d 64/128, 4k-16k: causal, a (256, 0) window, block-sparse at
#             s = .1/.25/.5); JSON in $OUT/bench/fa-bench-{fwd,fwd_bwd,masks}.json
#   peers     scripts/interleaved_peers.py: libflash (its fastest algorithm) against PyTorch SDPA's cuDNN and
#             FlashAttention-2, interleaved in one process (needs torch with CUDA); $OUT/peers/peers.json
#   varlen    the same script's --mode varlen: packed variable-length batches (64k tokens, lengths uniform in
#             [128, 8192] and [16, 512]) against FlashAttention-2's varlen kernel and libflash's dense call at the
#             mean length, forward and forward+backward; $OUT/varlen/varlen.json
#   train     the same script's --mode train: forward+backward and the backward alone against SDPA cuDNN and
#             FlashAttention-2 (standard grid, causal and not, and the Llama-8B shape 32/8 d128 causal 4k-32k), libflash
#             also deterministic; $OUT/train/train.json
#   decode    the same script's --mode decode: KV-cache decode (one token, heads 32/8, d128; contiguous and paged
#             caches) against SDPA on the same cache, GB/s and the fraction of copy bandwidth; $OUT/decode/decode.json
#
# Usage (from anywhere in the repository):
#   bash scripts/device.sh build test sanitize bench peers decode
#   OUT=/tmp/run bash scripts/device.sh bench
# The bench and peers JSON are what bench_results/<gpu>/ keeps (bench_results/README.md, "Layout"):
#   cp $OUT/bench/fa-bench-*.json $OUT/peers/peers.json bench_results/h200/
#
# Environment:
#   OUT               results directory (default: out; a relative path is taken from the repository root)
#   BUILD             build directory (default: build-device, from the repository root)
#   FLASH_CUDA_ARCHS  GPU targets (default: the first GPU's: 90a on Hopper, else 80)
#   FLASH_REVISION    the revision the library and fa-bench report (for a copied tree whose .git is not the one
#                     built; default: git's HEAD)
#   JOBS              build jobs (default: nproc)
#   TEST_JOBS         gtest shards run side by side in the test phase (default 8; the fp64 reference runs on the host)
#   LIBFLASH_NUM_THREADS  the host threads of each test shard (the fp64 reference and the CPU forward run on libflash's
#                     thread pool, libflash/cpu/parallel.h, which otherwise takes every core in each shard); default in
#                     the test phase: max(1, nproc / TEST_JOBS), so the shards share the cores instead of
#                     oversubscribing them TEST_JOBS times over. Set, it is passed to every shard as given.
#   TEST_TIMEOUT      seconds a shard may take (default 900)
#   SANITIZE_FILTER   gtest filter of the sanitize phase (default below)
#   SANITIZE_MAX_CTAS the persistent grid's CTAs under the sanitizers (default 8: several tiles a CTA; 0: one per SM)
#   SANITIZE_TIMEOUT  seconds per sanitizer (default 900)
#   SANITIZE_TOOLS    the compute-sanitizer tools run (default: memcheck racecheck synccheck)
#   BENCH_ALGOS       fa-bench's --algo in the bench phase (default: sm90,naive on Hopper, else sm80,naive)
#   BENCH_REPS        timed calls per row (default 30, after 5 untimed)
#   PEERS_ARGS        extra arguments of interleaved_peers.py (e.g. "--hdims 128 --reps 50")
#   DECODE_ARGS       extra arguments of its decode mode (e.g. "--hdims 64,128,256 --heads 32,32")
#   VARLEN_ARGS       extra arguments of its varlen mode (e.g. "--hdims 128 --varlen-modes fwd --reps 10")
#   TRAIN_ARGS        extra arguments of its train mode (e.g. "--hdims 64,128 --reps 10")
# Exit status: 0 when every phase passed, else 1 (the phases after a failed one still run, except after build).
set -uo pipefail
[ $# -gt 0 ] || { awk 'NR > 1 && /^#/ { print; next } NR > 1 { exit }' "$0"; exit 2; }
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=$(mkdir -p "${OUT:-out}" && cd "${OUT:-out}" && pwd)
BUILD=${BUILD:-build-device}
case "$BUILD" in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
export PATH=/usr/local/cuda/bin:$PATH PYTHONUNBUFFERED=1
[ -n "${FLASH_REVISION:-}" ] && export FA_BENCH_GIT_REVISION=$FLASH_REVISION
FB=$BUILD/cli/fa-bench
MASKS="none;causal;window:256,0;block-sparse:0.1:128;block-sparse:0.25:128;block-sparse:0.5:128"
# The reduced sm90 sweep: random problems with masks, the edge cases that have tiles see no key, windows and
# block-sparse schedules, and the small-grid tests (the tail split and the dynamic tile order on a few CTAs); and
# the KV-cache kernels with garbage device index arrays, empty sequences, chunked prefill, and the combine; one random
# forward sweep of sm80 and naive and one backward of sm80; garbage device block masks on every algorithm.
SANITIZE_FILTER_DEFAULT='Random/GpuSweep.MatchesReference/sm90_1:Random/GpuSweep.MatchesReference/sm90_2'\
':Random/GpuSweep.MatchesReference/sm90_3:Algorithms/GpuEdges.EmptyRowsAndAlignments/sm90'\
':Algorithms/GpuEdges.SlidingWindows/sm90:Algorithms/GpuEdges.TilesThatSeeNoKey/sm90'\
':Algorithms/GpuEdges.BlockSparse/sm90:GpuSmallGrid.*:Random/GpuBackwardSweep.MatchesReference/sm90_1'\
':KvcacheGpu.GarbageDeviceIndices:KvcacheGpu.SeqlensZeroAndOne:KvcacheGpu.ChunkedPrefill200:CombineGpu.*'\
':Random/GpuSweep.MatchesReference/sm80_1:Random/GpuSweep.MatchesReference/naive_1'\
':Random/GpuBackwardSweep.MatchesReference/sm80_1:Algorithms/GpuReliability.GarbageDeviceBlockMaskStaysInBounds/*'

status=0
fail() { echo "FAILED: $*"; status=1; }
# The first GPU's compute capability (9.0 on Hopper); empty without nvidia-smi.
gpu_cap() { nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1; }

for phase in "$@"; do
  start=$(date +%s)
  dir="$OUT/$phase"
  mkdir -p "$dir"
  echo "== $phase"
  case "$phase" in
    build)
      nvidia-smi --query-gpu=name,driver_version,compute_cap,clocks.max.sm,power.limit,memory.total --format=csv \
        > "$dir/nvidia-smi.csv" 2>&1
      cat "$dir/nvidia-smi.csv"
      archs=${FLASH_CUDA_ARCHS:-}
      if [ -z "$archs" ]; then
        case "$(gpu_cap)" in 9.0) archs=90a ;; *) archs=80 ;; esac
      fi
      if ! cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASH_WITH_CUDA=ON -DFLASH_CUDA_ARCHS="$archs" \
             -DFLASH_CUDA_PTX=OFF -DFLASH_PTXAS_VERBOSE=ON -DFLASH_REVISION="${FLASH_REVISION:-}" > "$dir/build.log" 2>&1 ||
         ! cmake --build "$BUILD" -j "${JOBS:-$(nproc)}" >> "$dir/build.log" 2>&1; then
        grep -B2 -A8 -m5 "error" "$dir/build.log" | head -60
        echo "FAILED: build (log: $dir/build.log)"
        exit 1
      fi
      echo "build ($archs): $(( $(date +%s) - start )) s on ${JOBS:-$(nproc)} jobs"
      # Registers and spills of every kernel, counted by kind (a kernel that starts to spill shows here).
      grep -E "Used [0-9]+ registers|spill stores" "$dir/build.log" | sed 's/ptxas info *: //' | sort | uniq -c | sort -rn \
        | tee "$dir/ptxas-summary.txt" | head -20
      ;;
    test)
      # The GPU test binary in TEST_JOBS shards run side by side (gtest's own sharding: the fp64 reference runs on the
      # host, so the shards use the cores while they share the GPU); one log a shard.
      # Each shard's host threads: its share of the cores (LIBFLASH_NUM_THREADS, when set, as given).
      n=${TEST_JOBS:-8}
      threads=${LIBFLASH_NUM_THREADS:-$(( $(nproc) / n > 1 ? $(nproc) / n : 1 ))}
      echo "GPU tests: $n shards, LIBFLASH_NUM_THREADS=$threads each"
      pids=()
      for i in $(seq 0 $((n - 1))); do
        LIBFLASH_NUM_THREADS=$threads GTEST_TOTAL_SHARDS=$n GTEST_SHARD_INDEX=$i timeout "${TEST_TIMEOUT:-900}" \
          "$BUILD/tests/flash_gpu_tests" --gtest_brief=1 > "$dir/shard$i.log" 2>&1 &
        pids+=($!)
      done
      for i in "${!pids[@]}"; do wait "${pids[$i]}" || fail "GPU tests, shard $i (log: $dir/shard$i.log)"; done
      echo "GPU tests: $(cat "$dir"/shard*.log | grep -cE '^\[       OK \]|^\[  PASSED  \]' ) lines OK/PASSED," \
           "$(cat "$dir"/shard*.log | grep -cE '^\[  FAILED  \]') FAILED lines," \
           "$(cat "$dir"/shard*.log | grep -E 'tests? from .* ran' | awk '{s += $2} END {print s}') tests ran in $n shards"
      grep -h -E '^\[  FAILED  \]' "$dir"/shard*.log | sort -u | head -20
      ;;
    sanitize)
      for tool in ${SANITIZE_TOOLS:-memcheck racecheck synccheck}; do
        LIBFLASH_MAX_CTAS=${SANITIZE_MAX_CTAS:-8} timeout "${SANITIZE_TIMEOUT:-900}" \
          compute-sanitizer --tool $tool --error-exitcode 9 "$BUILD/tests/flash_gpu_tests" --gtest_brief=1 \
          --gtest_filter="${SANITIZE_FILTER:-$SANITIZE_FILTER_DEFAULT}" > "$dir/$tool.log" 2>&1
        rc=$?
        echo "compute-sanitizer $tool: exit $rc; $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$dir/$tool.log" | tail -1)"
        [ $rc -eq 0 ] || fail "compute-sanitizer $tool (log: $dir/$tool.log)"
      done
      ;;
    bench)
      "$FB" devices > "$dir/devices.txt" 2>&1
      # The fused kernel of this GPU against naive (materialised attention; its 16k rows may be out-of-memory rows).
      case "$(gpu_cap)" in 9.0) fused=sm90 ;; *) fused=sm80 ;; esac
      algos=${BENCH_ALGOS:-$fused,naive}
      common=(--dtype bf16 --algo "$algos" --check --warmup 5 --reps "${BENCH_REPS:-30}" --no-progress)
      for mode in fwd fwd_bwd; do
        "$FB" run --grid standard --mode $mode --head-dim 64,128,256 --mask "none;causal" "${common[@]}" \
          --json "$dir/fa-bench-$mode.json" > "$dir/fa-bench-$mode.txt" 2>&1 || fail "fa-bench $mode"
        echo "fa-bench $mode: $(grep -c '"check_passed": true' "$dir/fa-bench-$mode.json" 2>/dev/null) rows checked"
      done
      # The masks grid on the standard grid's tokens (batch x seqlen = 16384, heads = 2048 / d), 4k to 16k.
      "$FB" run --grid standard --mode fwd --head-dim 64,128 --seqlen 4096,8192,16384 --mask "$MASKS" "${common[@]}" \
        --json "$dir/fa-bench-masks.json" > "$dir/fa-bench-masks.txt" 2>&1 || fail "fa-bench masks"
      echo "fa-bench masks: $(grep -c '"check_passed": true' "$dir/fa-bench-masks.json" 2>/dev/null) rows checked"
      if grep -q '"check_passed": false' "$dir"/fa-bench-*.json; then fail "fa-bench --check (a row's error is past its bound)"; fi
      ;;
    peers)
      # shellcheck disable=SC2086  # PEERS_ARGS is a list of arguments
      PYTHONPATH=$ROOT/bindings/python${PYTHONPATH:+:$PYTHONPATH} LIBFLASH_PATH=$BUILD \
        python3 scripts/interleaved_peers.py ${PEERS_ARGS:-} --json "$dir/peers.json" > "$dir/peers.txt" 2>&1 ||
        fail "interleaved_peers.py (log: $dir/peers.txt)"
      tail -32 "$dir/peers.txt"
      ;;
    decode | varlen | train)
      # The peer script's other modes; their extra arguments in DECODE_ARGS, VARLEN_ARGS, TRAIN_ARGS.
      extra_var="$(echo "$phase" | tr '[:lower:]' '[:upper:]')_ARGS"
      # shellcheck disable=SC2086  # the *_ARGS are lists of arguments
      PYTHONPATH=$ROOT/bindings/python${PYTHONPATH:+:$PYTHONPATH} LIBFLASH_PATH=$BUILD \
        python3 scripts/interleaved_peers.py --mode "$phase" ${!extra_var:-} --json "$dir/$phase.json" > "$dir/$phase.txt" 2>&1 ||
        fail "interleaved_peers.py --mode $phase (log: $dir/$phase.txt)"
      tail -40 "$dir/$phase.txt"
      ;;
    *)
      echo "unknown phase '$phase' (build, test, sanitize, bench, peers, decode, varlen, train)"
      exit 2
      ;;
  esac
  echo "== $phase: $(( $(date +%s) - start )) s"
done
exit $status
