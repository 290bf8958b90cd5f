#!/bin/bash
# One device call for the sm80 backward (docs/perf-log.md "sm80 backward"): build for sm_90a, run the
# backward GPU tests, time fa-bench and PyTorch SDPA's FLASH backend (FlashAttention-2) in the same run.
# Results (tarred: the device returns 8 files) in $OUT/r.tgz; a short table last on stdout.
# Usage (repo root, on the device, with .devcarry carried): [ENV...] scripts/device-bwd.sh
# PHASES (default "build tests bench peers table"):
#   build   cmake + ninja (sm_90a), ptxas lines of the backward main kernels
#   tests   the sm80 backward GPU tests (TEST_FILTER), once per TEST_VARIANTS entry (default "0"), the
#           entries (and TEST_SHARDS gtest shards of each, default 4) run concurrently
#           (LIBFLASH_BWD_SM90_VARIANT=v; 0 = the default kernels)
#   bench   fa-bench --mode ${MODES:-fwd,fwd_bwd,bwd} --algo sm80 on the standard grid (d64/d128, causal and not),
#           (MODES=none: skipped), then --mode bwd once per VARIANTS entry (LIBFLASH_BWD_SM90_VARIANT=v; 'v.x' names a
#           repeat), back to back
#   fwdbwd  issue 8's figure: fa-bench --mode fwd_bwd --algo sm90 (Hopper forward + this backward)
#   peers   PyTorch SDPA flash fwd_bwd (and fwd) in the same run
#   ncu     Nsight Compute of the d64 main kernel (seqlen 4096, batch 4, 32 heads), once per NCU_VARIANTS entry;
#           SASS of the d64 bf16 object (cuobjdump)
#   table   the tables (fwdbwd_table.py when fwdbwd and peers ran; bwd per variant)
# Env: OLD=1 (bench also times the mma.sync main kernel: LIBFLASH_BWD_WGMMA=0), TEST_FILTER (default: the sm80
# backward tests; '*Backward*' also runs naive's GPU backward tests, which alone outlast 150 s).
export PATH=/usr/local/cuda/bin:$PATH PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p $OUT/r
R=$OUT/r
PHASES=${PHASES:-build tests bench peers table}
start=$(date +%s)
t() { echo "[$(( $(date +%s) - start )) s] $*"; }
B="build-h100/cli/fa-bench run --grid standard --dtype bf16 --mask none;causal --warmup 3 --reps 20 --no-progress"
for phase in $PHASES; do
  case $phase in
    build)
      cmake -S . -B build-h100 -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASH_CUDA_ARCHS=90a -DFLASH_CUDA_PTX=OFF \
        -DFLASH_PTXAS_VERBOSE=ON > $R/cmake.log 2>&1
      ninja -C build-h100 -j16 > $R/build.log 2>&1 || { grep -B2 -A10 "error" $R/build.log | head -60; tar -C $OUT -czf $OUT/r.tgz r; exit 1; }
      t build done
      grep -A2 "Compiling entry function '_ZN5flash8sm80_bwd13bwd_main" $R/build.log | grep -E "Compiling|spill|Used" |
        sed 's/ptxas info    : //; s/Compiling entry function .*bwd_main/bwd_main/; s/NS_9BwdParams.*//' | paste - - - | cut -c1-200 | sort | uniq
      nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv,noheader
      ;;
    tests)
      # (each variant's tests in TEST_SHARDS concurrent gtest shards: the fp64 CPU reference dominates)
      n=${TEST_SHARDS:-4}
      for v in ${TEST_VARIANTS:-0}; do
        for k in $(seq 0 $((n - 1))); do
          GTEST_TOTAL_SHARDS=$n GTEST_SHARD_INDEX=$k LIBFLASH_BWD_SM90_VARIANT=$v timeout ${TEST_TIMEOUT:-200} \
            build-h100/tests/flash_gpu_tests --gtest_brief=1 \
            --gtest_filter="${TEST_FILTER:-*Backward*sm80*:*GpuBackward*/sm80}" > $R/tests-v$v-s$k.log 2>&1 &
        done
      done
      wait
      for v in ${TEST_VARIANTS:-0}; do
        cat $R/tests-v$v-s*.log > $R/tests-v$v.log && rm $R/tests-v$v-s*.log
        echo "tests variant $v ($n shards): $(grep -E '^\[  (PASSED|FAILED) ' $R/tests-v$v.log | tr '\n' ' ')"
        grep -E "^\[  FAILED|Failure" $R/tests-v$v.log | head -8
      done
      t tests done
      ;;
    bench)
      if [ "${MODES:-}" != none ]; then
        timeout 150 $B --head-dim 64,128 --algo sm80 --mode ${MODES:-fwd,fwd_bwd,bwd} --json $R/fa-bench-h100-bwd.json > $R/bench.log 2>&1
        echo "bench rc=$?"
      fi
      for v in $VARIANTS; do
        hd=${VAR_HDIMS:-64,128}
        LIBFLASH_BWD_SM90_VARIANT=${v%%.*} timeout 90 $B --head-dim $hd --algo sm80 --mode bwd \
          --json $R/fa-bench-h100-bwd-x$v.json > $R/bench-x$v.log 2>&1
        echo "bench x$v rc=$? ($(( $(date +%s) - start )) s)"
      done
      if [ -n "$OLD" ]; then
        LIBFLASH_BWD_WGMMA=0 timeout 90 $B --head-dim 64,128 --algo sm80 --mode bwd --json $R/fa-bench-h100-bwd-mmasync.json > $R/bench-old.log 2>&1
        echo "bench old rc=$?"
      fi
      t bench done
      ;;
    fwdbwd)
      LIBFLASH_BWD_SM90_VARIANT=${FWDBWD_VARIANT:-0} timeout 200 $B --head-dim 64,128 --algo sm90 --mode fwd_bwd \
        --json $R/fa-bench-h100-sm90-fwdbwd.json > $R/fa-bench-sm90-fwdbwd.log 2>&1
      echo "fwdbwd rc=$?"
      t fwdbwd done
      ;;
    peers)
      timeout 200 python3 .devcarry/torch_sdpa.py --hdims 64,128 --modes ${PEER_MODES:-fwd,fwd_bwd} --backends flash \
        --json $R/torch-sdpa-h100.json > $R/peers.log 2>&1; echo "peers rc=$?"
      t peers done
      ;;
    ncu)
      obj=$(find build-h100 -name "bwd_sm90_hdim64_bf16.cu.o" | head -1)
      cuobjdump -sass "$obj" > $R/sass-bwd-sm90-d64-bf16.txt 2>&1
      M="sm__throughput.avg.pct_of_peak_sustained_elapsed,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active,l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed,lts__t_sectors_op_red.sum,lts__throughput.avg.pct_of_peak_sustained_elapsed,sm__cycles_elapsed.avg.per_second,gpu__time_duration.sum"
      for v in ${NCU_VARIANTS:-0}; do
        LIBFLASH_BWD_SM90_VARIANT=$v timeout 150 ncu --clock-control none --kernel-name regex:bwd_main_sm90 --launch-skip 1 \
          --launch-count 1 --metrics "$M" --section WarpStateStats --section SourceCounters --section SpeedOfLight \
          --section InstructionStats --export $R/ncu-v$v --force-overwrite \
          build-h100/cli/fa-bench run --dtype bf16 --head-dim 64 --heads 32 --batch 4 --seqlen 4096 --algo sm80 --mode bwd \
          --mask none --warmup 1 --reps 1 --no-progress > $R/ncu-v$v.txt 2>&1
        echo "ncu v$v: exit $?"; grep -E "pct|per_second|duration|red.sum|Stall|Warp Cycles|Issued" $R/ncu-v$v.txt | head -24
        ncu --import $R/ncu-v$v.ncu-rep --page source --csv --print-source sass > $R/ncu-v$v-source.csv 2> $R/ncu-v$v-source.err
        echo "source page: $(wc -l < $R/ncu-v$v-source.csv) lines; $(head -c 300 $R/ncu-v$v-source.err)"
        ncu --import $R/ncu-v$v.ncu-rep --page details > $R/ncu-v$v-details.txt 2>&1
      done
      t ncu done
      ;;
    table)
      [ -f $R/fa-bench-h100-sm90-fwdbwd.json ] && [ -f $R/torch-sdpa-h100.json ] &&
        python3 scripts/fwdbwd_table.py $R/fa-bench-h100-sm90-fwdbwd.json $R/torch-sdpa-h100.json | tee $R/fwdbwd-table.txt
      python3 - "$R" $VARIANTS <<'PY'
import json, os, sys
R = sys.argv[1]; vs = sys.argv[2:]
def tab(n):
    try: js = json.load(open(os.path.join(R, n)))
    except Exception: return {}
    return {(r["mode"], r["head_dim"], r["seqlen_q"], r["mask"] == "causal"): r.get("tflops") for r in js.get("results", []) if not r.get("error")}
o = tab("fa-bench-h100-bwd.json"); xs = {v: tab(f"fa-bench-h100-bwd-x{v}.json") for v in vs}; old = tab("fa-bench-h100-bwd-mmasync.json")
f = lambda x: f"{x:.0f}" if x else "-"
print("bwd TFLOP/s: d causal n | default " + " ".join(f"x{v}" for v in vs) + (" mma.sync" if old else ""))
for d in (64, 128):
    for c in (False, True):
        for n in (512, 1024, 2048, 4096, 8192, 16384):
            k = ("bwd", d, n, c)
            print(f"{d} {int(c)} {n:5d} | {f(o.get(k))} " + " ".join(f(xs[v].get(k)) for v in vs) + (f" {f(old.get(k))}" if old else ""))
PY
      ;;
  esac
done
tar -C $OUT -czf $OUT/r.tgz r && rm -rf $R
t all done
