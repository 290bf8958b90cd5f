#!/usr/bin/env bash
# scripts/device-sm90.sh PHASE... -- the Hopper forward's (issue 9) device runs. Results land in $OUT.
#   build   configure + build (sm_90a only), ptxas report of the sm90 kernels (registers, spills, C75xx)
#   test    GPU forward tests for sm90 (+ AUTO), with a hang guard; test-bwd  the backward's GPU tests on sm90
#   testfast  the same without the long ones (split, long d128, small grid, backward, two rings, d64 windows): ~60 s
#   sanitize compute-sanitizer memcheck/racecheck/synccheck on a reduced sm90 sweep
#   sanitize-split  the same on the tail split's kernels on a 6-CTA grid (GpuSmallGrid)
#   testsmall  that test alone
#   testf   the GPU tests matching $GTEST_FILTER (sanitize-f: the three sanitizers on them)
#   ncu-cudnn-sass  cuDNN's and our kernel on one problem ($NCU_PROBLEM, d64n4096): opcode mix, SASS with stall samples
#   ncu-cudnn  cuDNN's kernels on the short problems under ncu: tile name, grid, registers, occupancy
#   sanitize-listed  the same on the d64 windows that run on the block-sparse instantiation
#   testlisted  the d64 window and edge tests one by one, with their times
#   testsparse  the block-sparse tests (and the d64 window ones) on sm90
#   sass-rings  the d64 two-ring block-sparse kernel's SASS and where its spills sit
#   sanitize-rings  compute-sanitizer on the two-ring kernel's test
#   bench   fa-bench standard grid, sm90 and sm80, d 64/128/256, causal and not; PyTorch SDPA peers
#   masks   issue 7's mask figures for sm90
#   masks-runs  the masks and masks-std phases $MASKS_RUNS times (default 2), each run's JSON, logs, masks_table.py's
#           tables (the batch-2 grid; the standard grid, --tokens 16384) and, on an H100, floor_table.py's in
#           $OUT/masks-$TAG-runN/, then all of them in one $OUT/$TAG-results.tgz ($TAG: default "masks");
#           floor_table.py reads the H100's io_floor grid $FLOOR_GRID (default session 67's s67-2, on fa-bench's maps)
#   masks-std  issue 7's masks on the standard grid (fa-bench --grid standard, anchors.md: batch x seqlen = 16384,
#           hidden 2048; 4k batch 4, 8k batch 2, 16k batch 1)
#   dev     sm90_dev: candidate tile shapes, checked against the production one and timed
#   build-dev  configure and build sm90_dev alone
#   dev-dNNN / prof-NAME  sm90_dev's head-dim-NNN candidates on the dense and causal problems / the profile cases named NAME
#   dev-causal / dev-sparse  the same on the causal problems / issue 7's block-sparse grid only
#   dev-partial  d64 causal with and without each head's first seqlen_q mod 192 rows (the partial tiles' cost)
#   ctatimes  how evenly the persistent CTAs finish: each CTA's start and end (sm90_dev ctatimes, Traits::kDevCtaTimes)
#   dev-listed  the same on d64's causal, dense 1k and sliding-window problems (the listed kernel, perf-log v37)
#   fwdbwd  fa-bench fwd_bwd with the sm90 forward (issue 8) and the peers' fwd_bwd
#   sass    SFU vs FMA-pipe instruction counts of the d64/d128 kernels
#   ncu     Nsight Compute pipe utilisation and warp stalls of three sm90 problems
#   racecheck-repro  racecheck on a minimal mbarrier hand-over (dev/racecheck_mbarrier.cu)
#   sass-dev  where each sm90_dev kernel's softmax sits against the P V wait
#   ncu-l2   DRAM bytes and L2 hit rate of the causal 1k problems (and d256 dense 1k)
#   ncu-src  per-instruction stall samples of the problems in $NCU_SRC (default: d64 two-ring and dense at 8k)
#   ncu-d64  stall reasons, SASS and per-instruction stall samples of the d64 block-sparse kernel
#   ncu-sparse  Nsight Compute on a d128 4k block-sparse problem (s = 0.1) and its dense twin
#   prof    clock64 phase profile of the sm90 forward's tiles (sm90_dev profile)
#   sass-d64 / sass-d128 / sass-d256 / sass-long  a dense kernel's SASS, and where its spills sit
#   sass-dev-rings  where the spills sit in each of sm90_dev's two-ring kernels (scripts/sass_marks.py)
#   sass-marks  the same for the sm90_dev kernels whose mangled name holds $SASS_NAME
#   clocks  d128 dense 8k/16k twice each with the SM clock, power and clock event reasons sampled
#   interleaved  sm90 against cuDNN and FA2 timed interleaved in one process (scripts/interleaved_peers.py)
#   masks-interleaved  issue 7's ratios with every mask timed interleaved in one process (scripts/interleaved_masks.py;
#           FLUSH=clean: L2 left clean before each call instead of holding the flush write's dirty lines)
#   ncu-dram  sm90_dev's block-sparse production kernels under ncu at 4k (and 16k s = .1): DRAM bytes and throughput, L2
#   wgmma-issue  dev/wgmma_issue.cu: a d64 loop block's wgmma issue timed on 1-3 warpgroups, orders and turns (v68)
#   diag-rounds  d64 4k: fa-bench at 64 and 60 heads x batch (11 and 10 tile rounds), ncu duration/clock/L2 per kernel
#   diag-ctas  $DIAG_PROBLEMS (default issue 9's short ones) on 132 and 66 CTAs under ncu: cycles, L2 and DRAM throughput
#   diag-stalls  the same with the warp stall ratios (default: the two-ring kernel at 3840 keys, s = .1 and .5)
#   diag-fixed  d64 3840 keys on 5-20 whole rounds, dense and block-sparse: a launch's fixed cost (intercept)
#   pack    everything in $OUT into results.tgz
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/device-out}
mkdir -p "$OUT"
BUILD=build-h100
export PATH=/usr/local/cuda/bin:$PATH PYTHONUNBUFFERED=1
# compute-sanitizer's racecheck, memcheck and synccheck on the GPU tests matching FILTER (logs sanitizer-NAME-TOOL.log).
sanitize_tests() {
  local name=$1 limit=$2 filter=$3 tool
  for tool in racecheck memcheck synccheck; do
    timeout "$limit" compute-sanitizer --tool $tool --error-exitcode 9 $BUILD/tests/flash_gpu_tests --gtest_brief=1 \
      --gtest_filter="$filter" > "$OUT/sanitizer-$name-$tool.log" 2>&1
    echo "compute-sanitizer $tool ($name): exit $? ($(grep -cE 'ERROR SUMMARY: 0 errors|RACECHECK SUMMARY: 0 hazards' "$OUT/sanitizer-$name-$tool.log") clean summaries)"
    tail -2 "$OUT/sanitizer-$name-$tool.log"
  done
}
for phase in "$@"; do
  phase_start=$(date +%s)
  case "$phase" in
    build)
      nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv > "$OUT/nvidia-smi.csv" 2>&1
      start=$(date +%s)
      # The device's copy of the tree carries a stale .git: the revision comes from .devcarry/REVISION, written before
      # the call (git rev-parse --short=12 HEAD, "-dirty" with uncommitted changes).
      cmake -S . -B $BUILD -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASH_CUDA_ARCHS=90a -DFLASH_CUDA_PTX=OFF \
            -DFLASH_PTXAS_VERBOSE=ON -DFLASH_REVISION="$(cat .devcarry/REVISION 2>/dev/null)" > "$OUT/build.log" 2>&1
      if ! ninja -C $BUILD -j16 >> "$OUT/build.log" 2>&1; then
        # Another engineer's files mid-edit: build with the committed versions of theirs.
        if [ -d .devcarry/head ]; then
          echo "build failed; retrying with the committed sm80/sm80_bwd sources"; grep -m5 "error" "$OUT/build.log"
          cp -r .devcarry/head/libflash/cuda/sm80/. libflash/cuda/sm80/
          cp -r .devcarry/head/libflash/cuda/sm80_bwd/. libflash/cuda/sm80_bwd/
          ninja -C $BUILD -j16 >> "$OUT/build.log" 2>&1 || { grep -B2 -A8 "error" "$OUT/build.log" | head -60; exit 1; }
        else
          grep -B2 -A8 "error" "$OUT/build.log" | head -60; exit 1
        fi
      fi
      echo "build: $(( $(date +%s) - start )) s on 16 cores"
      grep -A3 "Compiling entry function '_ZN5flash4sm90" "$OUT/build.log" | grep -E "registers|spill|C75" | sort | uniq -c
      grep -E "C75[0-9][0-9]" "$OUT/build.log" | sort | uniq -c | head
      ;;
    test)
      # The sm90 forward's tests (~530 s since session 67; with the backward's sm90 tests the suite outgrew one device call
      # with its build: s67-7 stopped at 550 s in the last one), then test-bwd for the backward's.
      timeout 550 $BUILD/tests/flash_gpu_tests --gtest_filter='*sm90*:GpuAuto*:*GpuTailSplit*:GpuSmallGrid*:GpuWorkspace*-*GpuBackward*' 2>&1 | tee "$OUT/gpu-tests-sm90.log" | grep -E 'FAILED|PASSED|Failure|tests ran' | tail -40
      echo "gpu tests (sm90): exit ${PIPESTATUS[0]}"
      ;;
    test-bwd)
      # The backward's GPU tests on sm90 (~65 s).
      timeout 300 $BUILD/tests/flash_gpu_tests --gtest_filter='*GpuBackward*sm90*' 2>&1 | tee "$OUT/gpu-tests-sm90-bwd.log" | grep -E 'FAILED|PASSED|Failure|tests ran' | tail -20
      echo "gpu tests (sm90 backward): exit ${PIPESTATUS[0]}"
      ;;
    testfast)
      # The sm90 forward tests but the long ones (~60 s against the whole phase's ~470 s): the tail split, d128's long key
      # ranges, the 6-CTA grid, the backward, the two-ring and d64 window kernels. For a change confined to d64 dense,
      # d128's 128-key or d256's dense instantiations.
      timeout 300 $BUILD/tests/flash_gpu_tests --gtest_filter='*sm90*:GpuAuto*:GpuWorkspace*-*GpuTailSplit*:*LongKeyRangesD128*:GpuSmallGrid*:*GpuBackward*:*TwoRings*:*D64Windows*' 2>&1 | tee "$OUT/gpu-tests-sm90-fast.log" | grep -E 'FAILED|PASSED|Failure|tests ran' | tail -20
      echo "gpu tests (sm90, fast): exit ${PIPESTATUS[0]}"
      ;;
    testlisted)
      # The d64 window / edge tests one by one with their times (a hang shows which), before the whole suite.
      timeout 200 $BUILD/tests/flash_gpu_tests --gtest_filter='Algorithms/GpuEdges.D64Windows*/sm90:Algorithms/GpuEdges.SlidingWindows/sm90:Algorithms/GpuEdges.TilesThatSeeNoKey/sm90:Algorithms/GpuEdges.ShortLastTiles/sm90:Algorithms/GpuEdges.EmptyRowsAndAlignments/sm90' 2>&1 | tee "$OUT/gpu-tests-listed.log" | grep -E 'OK|FAILED|PASSED|Failure' | tail -20
      echo "gpu tests (listed): exit ${PIPESTATUS[0]}"
      ;;
    testsparse)
      # The block-sparse tests alone, on sm90 (the two-ring kernel's first call).
      timeout 300 $BUILD/tests/flash_gpu_tests --gtest_filter='*BlockSparse*/sm90:*D64Windows*/sm90:*BlockSparseD64TwoRings*' 2>&1 | tee "$OUT/gpu-tests-sparse.log" | grep -E 'OK|FAILED|PASSED|Failure' | tail -20
      echo "gpu tests (sparse): exit ${PIPESTATUS[0]}"
      ;;
    testsmall)
      # The small-grid test alone (LIBFLASH_SM90_MAX_CTAS; the split and the 192-key kernel on 6 CTAs).
      timeout 200 $BUILD/tests/flash_gpu_tests --gtest_filter='GpuSmallGrid*' 2>&1 | tee "$OUT/gpu-tests-small.log" | grep -E 'OK|FAILED|PASSED|Failure' | tail -10
      echo "gpu tests (small grid): exit ${PIPESTATUS[0]}"
      ;;
    testf)
      # The GPU tests matching $GTEST_FILTER, each with its time.
      timeout 400 $BUILD/tests/flash_gpu_tests --gtest_filter="${GTEST_FILTER:?}" 2>&1 | tee "$OUT/gpu-tests-filter.log" | grep -E 'OK|FAILED|PASSED|Failure' | tail -30
      echo "gpu tests ($GTEST_FILTER): exit ${PIPESTATUS[0]}"
      ;;
    sanitize-f)
      # compute-sanitizer's three tools on the GPU tests matching $GTEST_FILTER.
      sanitize_tests filter 300 "${GTEST_FILTER:?}"
      ;;
    testquick)
      # The workspace / fallback tests alone (a short regression call).
      timeout 200 $BUILD/tests/flash_gpu_tests --gtest_brief=1 --gtest_filter='GpuWorkspace*:GpuAuto*:*NegativeScale*:GpuErrors*' 2>&1 | tee "$OUT/gpu-tests-quick.log" | tail -15
      echo "gpu tests (quick): exit ${PIPESTATUS[0]}"
      ;;
    testall)
      timeout 560 $BUILD/tests/flash_gpu_tests --gtest_brief=1 2>&1 | tee "$OUT/gpu-tests.log" | tail -25
      echo "gpu tests (all): exit ${PIPESTATUS[0]}"
      ;;
    sanitize)
      for tool in memcheck racecheck synccheck; do
        timeout 120 compute-sanitizer --tool $tool --error-exitcode 9 $BUILD/tests/flash_gpu_tests --gtest_brief=1 \
          --gtest_filter='Random/GpuSweep.MatchesReference/sm90_1:Random/GpuSweep.MatchesReference/sm90_2:Random/GpuSweep.MatchesReference/sm90_3:Algorithms/GpuEdges.EmptyRowsAndAlignments/sm90:Algorithms/GpuEdges.SlidingWindows/sm90:Algorithms/GpuEdges.TilesThatSeeNoKey/sm90' \
          > "$OUT/sanitizer-$tool.log" 2>&1
        echo "compute-sanitizer $tool: exit $? ($(grep -cE 'ERROR SUMMARY: 0 errors|RACECHECK SUMMARY: 0 hazards' "$OUT/sanitizer-$tool.log") clean summaries)"
        tail -2 "$OUT/sanitizer-$tool.log"
      done
      ;;
    sanitize-sparse)
      # The block-sparse instantiations (schedules in shared memory handed over through q_full/q_empty).
      sanitize_tests sparse 300 'Algorithms/GpuEdges.BlockSparse*/sm90'
      ;;
    sanitize-split)
      # The three sanitizers on the tail split's kernels (perf-log v41): the 192-key d128 kernel (split dense, and causal
      # long ranges) and d256 split, on a persistent grid of 6 CTAs (GpuSmallGrid; GpuTailSplit's 8k-key problems on
      # 132 CTAs did not finish under racecheck in 240 s, run s23-8).
      sanitize_tests split 240 'GpuSmallGrid*'
      ;;
    sanitize-rings)
      # The d64 two-ring block-sparse instantiation (perf-log v39).
      sanitize_tests rings 180 'Algorithms/GpuEdges.BlockSparseD64TwoRings/sm90'
      ;;
    sanitize-listed)
      # The block-sparse instantiation running d64 windows with every block listed (perf-log v37).
      sanitize_tests listed 240 'Algorithms/GpuEdges.D64Windows*/sm90:Algorithms/GpuEdges.SlidingWindows/sm90'
      ;;
    racecheck-repro)
      # Does racecheck follow an mbarrier hand-over of plain shared stores? (dev/racecheck_mbarrier.cu)
      nvcc -arch=sm_90a -o /tmp/rc libflash/cuda/sm90/dev/racecheck_mbarrier.cu
      for m in mbarrier mbarrier-tx syncthreads none; do
        compute-sanitizer --tool racecheck /tmp/rc $m > "$OUT/racecheck-repro-$m.log" 2>&1
        echo "racecheck repro $m: exit $?; $(grep -E 'RACECHECK SUMMARY|values wrong' "$OUT/racecheck-repro-$m.log" | tr '\n' ' ')"
      done
      ;;
    bench)
      B=$BUILD/cli/fa-bench
      $B devices > "$OUT/devices.txt" 2>&1
      timeout 400 $B run --grid standard --dtype bf16 --head-dim 64,128,256 --algo sm90 --mask "none;causal" --check \
         --warmup 5 --reps 30 --no-progress --json "$OUT/fa-bench-h100-sm90.json" > "$OUT/fa-bench-sm90.txt" 2>&1
      echo "fa-bench sm90: exit $?"; tail -4 "$OUT/fa-bench-sm90.txt"
      ;;
    peers)
      if [ -f .devcarry/torch_sdpa.py ]; then
        timeout 300 python3 .devcarry/torch_sdpa.py --hdims 64,128,256 --modes fwd --backends flash,cudnn \
          --json "$OUT/torch-sdpa-h100.json" > "$OUT/torch-sdpa.log" 2>&1
        echo "torch_sdpa: exit $?"; tail -3 "$OUT/torch-sdpa.log"
      fi
      ;;
    table)
      python3 scripts/sm90_table.py "$OUT/fa-bench-h100-sm90.json" "$OUT/torch-sdpa-h100.json" | tee "$OUT/table.txt"
      ;;
    masks-runs)
      # (Sessions 61-63 wrote this loop into each call's script; the device returns few files, hence the tarball.)
      tag=${TAG:-masks}
      for r in $(seq 1 "${MASKS_RUNS:-2}"); do
        bash "$0" masks masks-std > /dev/null 2>&1
        dir="$OUT/masks-$tag-run$r"
        mkdir -p "$dir" && mv "$OUT"/fa-bench-*masks* "$dir/"
        python3 scripts/masks_table.py "$dir/fa-bench-h100-sm90-masks-d64.json" "$dir/fa-bench-h100-sm90-masks-d128.json" \
          > "$dir/masks-table.txt" 2>&1
        python3 scripts/masks_table.py "$dir"/fa-bench-h100-sm90-masks-std-d{64,128}.json > "$dir/masks-table-std.txt" 2>&1
        # The floor grid was measured on the H100 (sessions 62-67): on another GPU its bytes' times do not apply.
        if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H100; then
          python3 scripts/floor_table.py "${FLOOR_GRID:-bench_results/h100-2026-11-25/sm90-s67/final/io-floor-grid-s67-2.txt}" \
            "$dir"/fa-bench-h100-sm90-masks-d{64,128}.json > "$dir/floor-table.txt" 2>&1
        fi
        echo "masks run $r (batch 2):"; cat "$dir/masks-table.txt"
        echo "masks run $r (standard grid):"; cat "$dir/masks-table-std.txt"
      done
      (cd "$OUT" && tar czf "$tag-results.tgz" masks-"$tag"-run* && rm -rf masks-"$tag"-run*)
      ;;
    masks)
      B=$BUILD/cli/fa-bench
      for d in 64 128; do
        timeout 200 $B run --dtype bf16 --head-dim $d --heads $((2048 / d)) --batch 2 --seqlen 4096,8192,16384 --algo sm90 --check \
           --mask "none;causal;window:256,0;block-sparse:0.1:128;block-sparse:0.25:128;block-sparse:0.5:128" \
           --warmup 5 --reps 30 --no-progress --json "$OUT/fa-bench-h100-sm90-masks-d$d.json" > "$OUT/fa-bench-sm90-masks-d$d.txt" 2>&1
        echo "fa-bench masks d$d: exit $?"
      done
      ;;
    masks-std)
      B=$BUILD/cli/fa-bench
      for d in 64 128; do
        timeout 200 $B run --grid standard --dtype bf16 --head-dim $d --seqlen 4096,8192,16384 --algo sm90 --check \
           --mask "none;causal;window:256,0;block-sparse:0.1:128;block-sparse:0.25:128;block-sparse:0.5:128" \
           --warmup 5 --reps 30 --no-progress --json "$OUT/fa-bench-h100-sm90-masks-std-d$d.json" \
           > "$OUT/fa-bench-sm90-masks-std-d$d.txt" 2>&1
        echo "fa-bench masks-std d$d: exit $?"
      done
      ;;
    fwdbwd)
      # Issue 8 with the Hopper forward: sm90 fwd + the sm90 (wgmma) backward, against the peers' fwd_bwd.
      timeout 300 $BUILD/cli/fa-bench run --grid standard --dtype bf16 --head-dim 64,128 --algo sm90 --mode fwd_bwd \
         --mask "none;causal" --warmup 3 --reps 20 --no-progress --json "$OUT/fa-bench-h100-sm90-fwdbwd.json" \
         > "$OUT/fa-bench-sm90-fwdbwd.txt" 2>&1
      echo "fa-bench sm90 fwd_bwd: exit $?"
      if [ -f .devcarry/torch_sdpa.py ]; then
        timeout 300 python3 .devcarry/torch_sdpa.py --hdims 64,128 --modes fwd_bwd --backends flash,cudnn \
          --json "$OUT/torch-sdpa-fwdbwd.json" > "$OUT/torch-sdpa-fwdbwd.log" 2>&1
        echo "torch_sdpa fwd_bwd: exit $?"
      fi
      ;;
    dev)
      ninja -C $BUILD sm90_dev >> "$OUT/build.log" 2>&1 || { grep -B2 -A8 "error" "$OUT/build.log" | tail -30; exit 1; }
      timeout 300 $BUILD/libflash/cuda/sm90/sm90_dev 20 2>&1 | tee "$OUT/sm90-dev.txt"
      ;;
    build-dev)
      # sm90_dev alone (the candidates' timing, no library tests): configure and build that one target.
      start=$(date +%s)
      cmake -S . -B $BUILD -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASH_CUDA_ARCHS=90a -DFLASH_CUDA_PTX=OFF \
            -DFLASH_REVISION="$(cat .devcarry/REVISION 2>/dev/null)" > "$OUT/build.log" 2>&1
      ninja -C $BUILD sm90_dev >> "$OUT/build.log" 2>&1 || { grep -B2 -A8 "error" "$OUT/build.log" | tail -30; exit 1; }
      echo "build-dev: $(( $(date +%s) - start )) s"
      ;;
    dev-d[0-9]*)
      # sm90_dev's candidates of one head dim on the standard grid's dense and causal problems, 8k included (dev-d128).
      ninja -C $BUILD sm90_dev >> "$OUT/build.log" 2>&1 || { grep -B2 -A8 "error" "$OUT/build.log" | tail -30; exit 1; }
      timeout 300 $BUILD/libflash/cuda/sm90/sm90_dev 25 "${phase#dev-}" 2>&1 | tee "$OUT/sm90-$phase.txt"
      ;;
    prof-*)
      # The profile cases whose name holds what follows "prof-" (prof-d128: "d128"; prof-2ring: the two-ring kernels).
      ninja -C $BUILD sm90_dev >> "$OUT/build.log" 2>&1 || { grep -B2 -A8 "error" "$OUT/build.log" | tail -30; exit 1; }
      timeout 200 $BUILD/libflash/cuda/sm90/sm90_dev 10 profile "${phase#prof-}" 2>&1 | tee "$OUT/sm90-$phase.txt"
      ;;
    ctatimes)
      # Session 50 (s50-11): the share of a launch the CTAs idle waiting for the last one (the grid's fill), per kernel.
      ninja -C $BUILD sm90_dev >> "$OUT/build.log" 2>&1 || { grep -B2 -A8 "error" "$OUT/build.log" | tail -30; exit 1; }
      timeout 120 $BUILD/libflash/cuda/sm90/sm90_dev 15 ctatimes 2>&1 | tee "$OUT/sm90-ctatimes.txt"
      ;;
    dev-causal)
      # sm90_dev's candidates on the causal problems only (no profile section).
      ninja -C $BUILD sm90_dev >> "$OUT/build.log" 2>&1 || { grep -B2 -A8 "error" "$OUT/build.log" | tail -30; exit 1; }
      timeout 200 $BUILD/libflash/cuda/sm90/sm90_dev 20 causal 2>&1 | tee "$OUT/sm90-dev-causal.txt"
      ;;
    dev-sparse)
      # sm90_dev's block-sparse candidates on issue 7's mask grid only (no profile section).
      ninja -C $BUILD sm90_dev >> "$OUT/build.log" 2>&1 || { grep -B2 -A8 "error" "$OUT/build.log" | tail -30; exit 1; }
      timeout 300 $BUILD/libflash/cuda/sm90/sm90_dev 20 sparse 2>&1 | tee "$OUT/sm90-dev-sparse.txt"
      ;;
    dev-partial)
      # d64 causal with and without each head's first seqlen_q mod 192 rows (+192): what the partial tiles cost.
      ninja -C $BUILD sm90_dev >> "$OUT/build.log" 2>&1 || { grep -B2 -A8 "error" "$OUT/build.log" | tail -30; exit 1; }
      timeout 200 $BUILD/libflash/cuda/sm90/sm90_dev 30 partial 2>&1 | tee "$OUT/sm90-dev-partial.txt"
      ;;
    dev-listed)
      # d64's short-tile problems (causal 1k-16k, dense 1k, windows (w, 0) at 4k/16k) on each d64 candidate.
      ninja -C $BUILD sm90_dev >> "$OUT/build.log" 2>&1 || { grep -B2 -A8 "error" "$OUT/build.log" | tail -30; exit 1; }
      timeout 300 $BUILD/libflash/cuda/sm90/sm90_dev 20 listed 2>&1 | tee "$OUT/sm90-dev-listed.txt"
      ;;
    prof)
      # Where a tile's time goes: the kernel's Traits::kProfile variant (clock64 phase counters), sm90_dev's profile section.
      ninja -C $BUILD sm90_dev >> "$OUT/build.log" 2>&1 || { grep -B2 -A8 "error" "$OUT/build.log" | tail -30; exit 1; }
      timeout 200 $BUILD/libflash/cuda/sm90/sm90_dev 10 profile 2>&1 | tee "$OUT/sm90-prof.txt"
      ;;
    sass)
      # Instruction mix of the d64/d128 softmax: SFU (MUFU) vs FMA-pipe work per key block.
      for d in 64 128; do
        obj=$(find $BUILD -name "fwd_hdim${d}_bf16.cu.o" -path "*sm90*" | head -1)
        cuobjdump -sass "$obj" > "$OUT/sass-d$d.txt" 2>&1
        echo "d$d: $(grep -c MUFU.EX2 "$OUT/sass-d$d.txt") MUFU.EX2, $(grep -cE 'FFMA|FMUL|FADD' "$OUT/sass-d$d.txt") FFMA/FMUL/FADD"
      done
      ;;
    ncu)
      # Pipe utilisation and stall reasons of the sm90 forward: d64 16k dense (SFU-bound?), d128 1k causal (short tiles).
      B=$BUILD/cli/fa-bench
      M="sm__throughput.avg.pct_of_peak_sustained_elapsed,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__cycles_elapsed.avg.per_second,gpu__time_duration.sum"
      for cfg in "64 32 1 16384 none" "128 16 16 1024 causal" "128 16 16 1024 none"; do
        set -- $cfg
        timeout 120 ncu --clock-control none --kernel-name regex:fwd_kernel --launch-skip 2 --launch-count 1 \
          --metrics "$M" --section WarpStateStats \
          $B run --dtype bf16 --head-dim $1 --heads $2 --batch $3 --seqlen $4 --algo sm90 --mask $5 --warmup 2 --reps 1 \
          --no-progress > "$OUT/ncu-d$1-$4-$5.txt" 2>&1
        echo "ncu d$1 $4 $5: exit $?"; grep -E "pct|per_second|duration|Stall" "$OUT/ncu-d$1-$4-$5.txt" | head -20
      done
      ;;
    ncu-sparse)
      # Issue 7's short block-sparse tiles: d128 4k, 3 of 32 key blocks per query block, against dense.
      B=$BUILD/cli/fa-bench
      M="sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sector_hit_rate.pct,dram__bytes_read.sum,dram__bytes_write.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,gpu__time_duration.sum"
      for mask in block-sparse:0.1:128 none; do
        timeout 120 ncu --clock-control none --kernel-name regex:fwd_kernel --launch-skip 2 --launch-count 1 \
          --metrics "$M" --section WarpStateStats \
          $B run --dtype bf16 --head-dim 128 --heads 16 --batch 2 --seqlen 4096 --algo sm90 --mask $mask --warmup 2 --reps 1 \
          --no-progress > "$OUT/ncu-sparse-${mask%%:*}.txt" 2>&1
        echo "ncu $mask: exit $?"; grep -E "pct|sum|duration|Stall" "$OUT/ncu-sparse-${mask%%:*}.txt" | head -24
      done
      ;;
    ncu-l2)
      # DRAM traffic of the causal order at 1k (K and V re-read by every query block of a head: do they come from
      # L2?) against the dense twin; the minimum is Q + K + V + O once (bf16: 4 x 67 MB at every d on this grid).
      B=$BUILD/cli/fa-bench
      M="dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,gpu__time_duration.sum"
      for cfg in "256 8 causal" "256 8 none" "128 16 causal" "64 32 causal"; do
        set -- $cfg
        timeout 100 ncu --clock-control none --kernel-name regex:fwd_kernel --launch-skip 2 --launch-count 1 --metrics "$M" \
          $B run --dtype bf16 --head-dim $1 --heads $2 --batch 16 --seqlen 1024 --algo sm90 --mask $3 --warmup 2 --reps 1 \
          --no-progress > "$OUT/ncu-l2-d$1-$3.txt" 2>&1
        echo "ncu-l2 d$1 1k $3: exit $?"; grep -E "dram__|lts__|gmma|duration" "$OUT/ncu-l2-d$1-$3.txt"
      done
      ;;
    sass-dev)
      # Where each sm90_dev kernel's softmax sits against the P V wait (scripts/sass_overlap.py).
      ninja -C $BUILD sm90_dev >> "$OUT/build.log" 2>&1 || { grep -B2 -A8 "error" "$OUT/build.log" | tail -30; exit 1; }
      cuobjdump -sass $BUILD/libflash/cuda/sm90/sm90_dev > /tmp/sass-dev.txt 2>&1
      python3 scripts/sass_overlap.py /tmp/sass-dev.txt | tee "$OUT/sass-overlap.txt"
      ;;
    ncu-d64)
      # Where the d64 block-sparse loop's time goes (its softmax is ~60% of a block, the step profile): stall
      # reasons over the kernel, the SASS, and the per-instruction stall samples of the source page.
      B=$BUILD/cli/fa-bench
      obj=$(find $BUILD -name "fwd_hdim64_sparse_bf16.cu.o" -path "*sm90*" | head -1)
      cuobjdump -sass "$obj" > "$OUT/sass-d64-sparse.txt" 2>&1
      A="--dtype bf16 --head-dim 64 --heads 32 --batch 2 --seqlen 4096 --algo sm90 --mask block-sparse:0.5:128 --warmup 2 --reps 1 --no-progress"
      timeout 150 ncu --clock-control none --kernel-name regex:fwd_kernel --launch-skip 2 --launch-count 1 \
        --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active.ratio,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active" \
        $B run $A > "$OUT/ncu-d64bs-stalls.txt" 2>&1
      echo "ncu stalls: exit $?"; grep -E "ratio|pct" "$OUT/ncu-d64bs-stalls.txt" | sort -k3 -n -r | head -30
      timeout 200 ncu --clock-control none --kernel-name regex:fwd_kernel --launch-skip 2 --launch-count 1 \
        --section SourceCounters --section WarpStateStats --page source --print-source sass --csv \
        $B run $A > "$OUT/ncu-d64bs-source.csv" 2>&1
      echo "ncu source: exit $? $(wc -c < "$OUT/ncu-d64bs-source.csv") bytes"; head -c 600 "$OUT/ncu-d64bs-source.csv"
      ;;
    ncu-src)
      # Per-instruction stall samples (ncu's source page, SASS), gzipped for scripts/ncu_src_summary.py (session 40).
      # $NCU_SRC: space-separated NAME:D:SEQLEN:BATCH:MASK (fa-bench's --mask); the default is session 40's pair, the d64
      # two-ring kernel on issue 7's 8k s = .5 problem and the d64 dense kernel on the same shape.
      B=$BUILD/cli/fa-bench
      for cfg in ${NCU_SRC:-rings:64:8192:2:block-sparse:0.5:128 dense:64:8192:2:none}; do
        IFS=: read -r name d n b mask <<< "$cfg"
        A="--dtype bf16 --head-dim $d --heads $((2048 / d)) --batch $b --seqlen $n --algo sm90 --mask $mask --warmup 2 --reps 1 --no-progress"
        timeout 240 ncu --clock-control none --kernel-name regex:fwd_kernel --launch-skip 2 --launch-count 1 \
          --section SourceCounters --section WarpStateStats --page source --print-source sass --csv \
          $B run $A > "$OUT/ncu-src-$name.csv" 2>&1
        echo "ncu source $name ($A): exit $? $(wc -c < "$OUT/ncu-src-$name.csv") bytes"
        python3 scripts/ncu_src_summary.py "$OUT/ncu-src-$name.csv" | head -80
        gzip -f "$OUT/ncu-src-$name.csv"
      done
      ;;
    diag-rounds)
      # Issue 7's d64 4k cells (session 42): are they the tile rounds or the kernel's rate? fa-bench on 64 heads x batch
      # (1408 two-ring tiles: 11 rounds on 132 SMs) against 60 (1320: 10 rounds exactly), and ncu's duration, SM clock,
      # L2 throughput and bytes of the dense pair and the block-sparse kernels at free clocks (the two-ring kernel loads
      # two K/V rings per 192-row tile: twice dense's L2 -> SMEM bytes per query row).
      B=$BUILD/cli/fa-bench
      for h in ${DIAG_HEADS-32 30}; do
        timeout 200 $B run --dtype bf16 --head-dim 64 --heads $h --batch 2 --seqlen 4096 --algo sm90 \
          --mask "none;block-sparse:0.1:128;block-sparse:0.25:128;block-sparse:0.5:128" --warmup 5 --reps 30 --no-progress \
          --json "$OUT/fa-bench-rounds-h$h.json" > "$OUT/fa-bench-rounds-h$h.txt" 2>&1
        echo "fa-bench d64 4k heads $h: exit $?"; grep -E "sm90" "$OUT/fa-bench-rounds-h$h.txt"
      done
      M="gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,sm__cycles_elapsed.max,lts__t_bytes.sum,lts__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sector_hit_rate.pct,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,l1tex__m_xbar2l1tex_read_bytes.sum"
      for clk in ${DIAG_CLOCKS-none base}; do
        for mask in none block-sparse:0.5:128 block-sparse:0.25:128 block-sparse:0.1:128; do
          # (dense: two kernels a call, the pair; block-sparse: one)
          [ $mask = none ] && skip="--launch-skip 4 --launch-count 2" || skip="--launch-skip 2 --launch-count 1"
          timeout 120 ncu --clock-control $clk --kernel-name regex:fwd_kernel $skip --metrics "$M" \
            $B run --dtype bf16 --head-dim 64 --heads 32 --batch 2 --seqlen 4096 --algo sm90 --mask $mask --warmup 3 --reps 1 \
            --no-progress > "$OUT/ncu-rounds-$clk-${mask%%:128}.txt" 2>&1
          echo "== ncu $clk $mask: exit $?"
          grep -E "fwd_kernel|gpu__|sm__|lts__|dram__|l1tex__" "$OUT/ncu-rounds-$clk-${mask%%:128}.txt" | sed -E 's/^ +//' | cut -c1-150
        done
      done
      ;;
    diag-ctas|diag-stalls)
      # Per-tile cycles on 132 CTAs against 66 (half the L2 and DRAM load, the same per-SM one), under ncu at free clocks
      # (session 42). diag-ctas: the clock, L2 and DRAM throughput; diag-stalls: the warp stall ratios by reason (what
      # the two-ring kernel waits on more on 132 CTAs). $DIAG_PROBLEMS: NAME:D:SEQLEN:HEADS:BATCH:MASK (fa-bench's --mask);
      # diag-ctas defaults to issue 9's short problems, diag-stalls to the two-ring kernel at 3840 keys, 33 heads x 2
      # (whole rounds), s = .1 and .5. Session 42's s42-3 was diag-ctas on
      # DIAG_PROBLEMS="n:64:3840:33:2:none s5:64:3840:33:2:block-sparse:0.5:128 ...".
      B=$BUILD/cli/fa-bench
      if [ $phase = diag-ctas ]; then
        M="gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,sm__cycles_elapsed.max,lts__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed,l1tex__m_xbar2l1tex_read_bytes.sum"
        problems=${DIAG_PROBLEMS:-d128n1k:128:1024:33:8:none d128n2k:128:2048:33:4:none d64c1k:64:1024:32:16:causal d256c1k:256:1024:8:16:causal d64n1k:64:1024:32:16:none}
      else
        M="sm__cycles_elapsed.max,smsp__inst_executed.sum,regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio"
        problems=${DIAG_PROBLEMS:-s1:64:3840:33:2:block-sparse:0.1:128 s5:64:3840:33:2:block-sparse:0.5:128}
      fi
      for cfg in $problems; do
        IFS=: read -r name d n h b mask <<< "$cfg"
        for ctas in 132 66; do
          f="$OUT/ncu-$phase-$name-$ctas.txt"
          LIBFLASH_SM90_MAX_CTAS=$ctas timeout 120 ncu --clock-control none --kernel-name regex:fwd_kernel --launch-skip 4 --launch-count 2 \
            --metrics "$M" $B run --dtype bf16 --head-dim $d --heads $h --batch $b --seqlen $n --algo sm90 --mask $mask \
            --warmup 5 --reps 1 --no-progress > "$f" 2>&1
          echo "== ncu $phase $name ctas $ctas: exit $?"
          grep -E "fwd_kernel|gpu__|sm__|lts__|dram__|l1tex__|smsp__" "$f" | sed -E 's/^ +//;s/\(Args\).*//;s/smsp__average_warps_issue_stalled_//;s/_per_issue_active.ratio//' \
            | awk '!/inst +[0-9.]+$/ || $NF+0 >= 0.05' | cut -c1-110
        done
      done
      ;;
    diag-fixed)
      # A launch's fixed cost (ramp and tail) against its per-round cost (session 42): d64 at 3840 keys, 66 heads x batch
      # per batch step, 1..4 batch steps = 5, 10, 15, 20 rounds of whole 192-row tiles on 132 CTAs; the intercept of time
      # against rounds is what a launch costs beyond its tiles, dense and block-sparse.
      B=$BUILD/cli/fa-bench
      for b in 1 2 3 4; do
        timeout 200 $B run --dtype bf16 --head-dim 64 --heads 33 --batch $b --seqlen 3840 --algo sm90 \
          --mask "none;block-sparse:0.1:128;block-sparse:0.25:128;block-sparse:0.5:128" --warmup 10 --reps 50 --no-progress \
          --json "$OUT/fa-bench-fixed-b$b.json" > "$OUT/fa-bench-fixed-b$b.txt" 2>&1
        echo "fa-bench fixed batch $b: exit $?"; grep sm90 "$OUT/fa-bench-fixed-b$b.txt"
      done
      ;;
    sass-long)
      # The d128 192-key-block kernel's SASS: its LDL/STL against USETMAXREG (consumers above the dealloc, producer below),
      # the HGMMAs and the barriers.
      obj=$(find $BUILD -name "fwd_hdim128_long_bf16.cu.o" -path "*sm90*" | head -1)
      cuobjdump -sass "$obj" > "$OUT/sass-d128-long.txt" 2>&1
      grep -n "LDL\|STL\|USETMAXREG\|HGMMA.*gsb0\|BAR.SYNC\|EXIT" "$OUT/sass-d128-long.txt" | awk -F'/\\*' '{print $1 $2}' | tr -s ' ' | tail -60
      ;;
    sass-d64|sass-d128|sass-d256)
      # The d64 / d256 dense kernel's SASS (where its spills sit: LDL/STL against the loop's HGMMAs and barriers).
      d=${phase#sass-d}
      obj=$(find $BUILD -name "fwd_hdim${d}_bf16.cu.o" -path "*sm90*" | head -1)
      cuobjdump -sass "$obj" > "$OUT/sass-d$d-dense.txt" 2>&1
      grep -n "LDL\|STL\|HGMMA.*gsb0\|BAR.SYNC\|BRA" "$OUT/sass-d$d-dense.txt" | awk -F'/\\*' '{print $1 $2}' | head -150 > "$OUT/sass-d$d-marks.txt"
      grep -n "LDL\|STL" "$OUT/sass-d$d-dense.txt" | head -40
      ;;
    sass-rings)
      # The d64 two-ring block-sparse kernel's SASS (perf-log v39): where its spills sit against the producer's
      # setmaxnreg.dec and the consumers' HGMMAs, MUFUs and barriers.
      obj=$(find $BUILD -name "fwd_hdim64_rings_bf16.cu.o" -path "*sm90*" | head -1)
      cuobjdump -sass "$obj" > "$OUT/sass-d64-rings.txt" 2>&1
      grep -n "LDL\|STL\|USETMAXREG\|HGMMA.*gsb0\|BAR.SYNC\|BAR.ARV\|EXIT\|MUFU.EX2" "$OUT/sass-d64-rings.txt" | awk -F'/\\*' '{print $1 $2}' | head -300 > "$OUT/sass-d64-rings-marks.txt"
      grep -n "LDL\|STL\|USETMAXREG" "$OUT/sass-d64-rings.txt" | head -60
      ;;
    sass-dev-rings|sass-marks)
      # Where the spills sit (scripts/sass_marks.py: one line per LDL/STL, HGMMA group, wait, barrier, mbarrier operation,
      # branch and setmaxnreg, with its address) in every sm90_dev kernel with two rings (block-sparse, three consumers;
      # perf-log v40), or in those whose mangled name holds $SASS_NAME (sass-marks; e.g. a mixin's name).
      ninja -C $BUILD sm90_dev >> "$OUT/build.log" 2>&1 || { grep -B2 -A8 "error" "$OUT/build.log" | tail -30; exit 1; }
      cuobjdump -sass $BUILD/libflash/cuda/sm90/sm90_dev > /tmp/sass-dev.txt 2>&1
      name=$([[ $phase == sass-dev-rings ]] && echo ELb1ELi3E || echo "${SASS_NAME:-}")
      python3 scripts/sass_marks.py /tmp/sass-dev.txt "$name" > "$OUT/$phase-marks.txt"
      grep -B1 "LDL/STL" "$OUT/$phase-marks.txt"
      ;;
    wgmma-issue)
      # How long a warpgroup takes to issue a loop block's wgmmas (perf-log v68): nvcc alone, no CMake.
      mkdir -p $BUILD
      nvcc -std=c++17 -O3 -gencode arch=compute_90a,code=sm_90a -I. -Ilibflash libflash/cuda/sm90/dev/wgmma_issue.cu \
        -o $BUILD/wgmma_issue > "$OUT/wgmma-issue-build.log" 2>&1 || { tail -20 "$OUT/wgmma-issue-build.log"; exit 1; }
      $BUILD/wgmma_issue 4096 2>&1 | tee "$OUT/wgmma-issue.txt"
      ;;
    interleaved)
      # libflash (sm90) against cuDNN and FA2 timed interleaved in one process on the same tensors (scripts/interleaved_peers.py):
      # the ratio with the power cap's drift taken out (session 22).
      PYTHONPATH=bindings/python LIBFLASH_PATH=$BUILD timeout 400 python3 scripts/interleaved_peers.py --icache "${ICACHE:-warm}" \
        --json "$OUT/interleaved-peers.json" 2>&1 | tee "$OUT/interleaved-peers.txt" | tail -40
      ;;
    masks-interleaved)
      # Issue 7's ratios with dense and every mask kind timed in alternating rounds (the power cap falls on all alike).
      PYTHONPATH=bindings/python LIBFLASH_PATH=$BUILD timeout 300 python3 scripts/interleaved_masks.py --flush "${FLUSH:-dirty}" --icache "${ICACHE:-warm}" \
        --json "$OUT/interleaved-masks.json" 2>&1 | tee "$OUT/interleaved-masks.txt" | tail -20
      ;;
    ncu-dram)
      # Session 44 (s44-3): are the short lists' K and V read from DRAM more than once, and how near DRAM's peak do they run?
      # One launch per candidate and round (reps 1), ncu's cache control (L2 flushed clean before each launch).
      ninja -C $BUILD sm90_dev >> "$OUT/build.log" 2>&1 || { grep -B2 -A8 "error" "$OUT/build.log" | tail -30; exit 1; }
      M="dram__bytes_read.sum,dram__bytes_write.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sector_hit_rate.pct,lts__t_bytes.sum,gpu__time_duration.sum,sm__cycles_active.avg"
      SM90_DEV_ONLY="3wg 2 rings" SM90_DEV_PROBLEMS="4096:0,4096:0.1,4096:0.25,4096:0.5,16384:0.1" timeout 400 \
        ncu --clock-control none --kernel-name regex:fwd_kernel --metrics "$M" $BUILD/libflash/cuda/sm90/sm90_dev 1 sparse 2>&1 |
        grep -v "==PROF==" > "$OUT/ncu-dram.txt"
      echo "ncu-dram: exit $?"
      ;;
    clocks)
      # d128 dense 8k (batch 2) and 16k (batch 1) twice each, with nvidia-smi sampling the SM clock, power and the clock
      # event reasons every 50 ms (session 22: is the 16k median's spread the kernel's or the power cap's?).
      B=$BUILD/cli/fa-bench
      nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active \
        --format=csv,nounits -lms 50 > "$OUT/smi.csv" 2>&1 &
      smi=$!
      sleep 1
      for run in "2 8192" "1 16384" "2 8192" "1 16384"; do
        set -- $run
        echo "start b=$1 n=$2 $(date +%H:%M:%S.%N)" >> "$OUT/marks.txt"
        $B run --dtype bf16 --head-dim 128 --heads 16 --batch $1 --seqlen $2 --algo sm90 --warmup 5 --reps 30 --no-progress >> "$OUT/fa-bench-clocks.txt" 2>&1
        echo "end b=$1 n=$2 $(date +%H:%M:%S.%N)" >> "$OUT/marks.txt"
        sleep 1
      done
      kill $smi
      cat "$OUT/marks.txt"; grep sm90 "$OUT/fa-bench-clocks.txt"
      ;;
    ncu-cudnn)
      # cuDNN's kernels (SDPA) on the short problems: name (tile), grid, block, registers, shared memory, occupancy.
      timeout 300 ncu --profile-from-start off --section LaunchStats --section Occupancy --section SpeedOfLight \
        --section WarpStateStats python3 scripts/ncu_cudnn_shapes.py ${NCU_PROBLEMS:-d64c1024 d64n1024 d128n1024 d256c1024 d64c16384} \
        > "$OUT/ncu-cudnn.txt" 2>&1
      grep -E "cudnn|cuDNN median|Grid Size|Block Size|Registers Per|Dynamic Shared|Theoretical Occ|Duration|Achieved Occ" "$OUT/ncu-cudnn.txt" | head -80
      ;;
    ncu-cudnn-sass)
      # cuDNN's d64 dense 4k kernel (two consumer warpgroups, 128-row tiles: 18% faster per key block than ours on two)
      # against our three-warpgroup d64 dense kernel on the same problem: the executed instructions per opcode and the
      # SASS with per-instruction executions and stall samples (the source page).
      P=${NCU_PROBLEM:-d64n4096}
      timeout 200 ncu --profile-from-start off --section InstructionStats --section WarpStateStats --section ComputeWorkloadAnalysis \
        --metrics sass__inst_executed_per_opcode --print-metric-instances values python3 scripts/ncu_cudnn_shapes.py $P \
        > "$OUT/ncu-cudnn-$P-mix.txt" 2>&1
      echo "cudnn mix: exit $?"; grep -E "sass__inst_executed_per_opcode|Executed Instructions|Issue Slots|Warp Cycles Per Issued" "$OUT/ncu-cudnn-$P-mix.txt" | head
      timeout 200 ncu --profile-from-start off --section SourceCounters --section WarpStateStats --page source --print-source sass --csv \
        python3 scripts/ncu_cudnn_shapes.py $P > "$OUT/ncu-cudnn-$P-source.csv" 2>&1
      echo "cudnn source: exit $? $(wc -c < "$OUT/ncu-cudnn-$P-source.csv") bytes"
      d=${P#d}; d=${d%%[cn]*}; n=${P##*[cn]}; mask=$([[ $P == *c* ]] && echo "--mask causal" || echo "")
      A="--dtype bf16 --head-dim $d --heads $((2048 / d)) --batch $((16384 / n)) --seqlen $n --algo sm90 $mask --warmup 2 --reps 1 --no-progress"
      timeout 200 ncu --clock-control none --kernel-name regex:fwd_kernel --launch-skip 2 --launch-count 1 --section InstructionStats \
        --section WarpStateStats --section ComputeWorkloadAnalysis --metrics sass__inst_executed_per_opcode --print-metric-instances values \
        $BUILD/cli/fa-bench run $A > "$OUT/ncu-ours-$P-mix.txt" 2>&1
      echo "ours mix: exit $?"
      timeout 200 ncu --clock-control none --kernel-name regex:fwd_kernel --launch-skip 2 --launch-count 1 \
        --section SourceCounters --section WarpStateStats --page source --print-source sass --csv \
        $BUILD/cli/fa-bench run $A > "$OUT/ncu-ours-$P-source.csv" 2>&1
      echo "ours source: exit $? $(wc -c < "$OUT/ncu-ours-$P-source.csv") bytes"
      for f in "$OUT/ncu-cudnn-$P-source.csv" "$OUT/ncu-ours-$P-source.csv"; do
        python3 scripts/ncu_src_summary.py "$f" --top 30 | head -70
        gzip -f "$f"
      done
      ;;
    pack)
      tar czf /tmp/out.tgz -C "$OUT" . && rm -rf "${OUT:?}"/* && mv /tmp/out.tgz "$OUT/results.tgz"
      ;;
  esac
  echo "== phase $phase: $(( $(date +%s) - phase_start )) s"
done
