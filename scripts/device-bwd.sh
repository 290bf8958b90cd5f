#!/bin/bash
# One device call for the sm80 backward (docs/perf-log.md "sm80 backward"): build for sm_90a, run the
# backward GPU tests, time fa-bench fwd/fwd_bwd/bwd on the standard grid and PyTorch SDPA's FLASH backend
# (FlashAttention-2) in the same run, print a table. Results (tarred, the device returns 8 files) in $OUT.
# Usage (repo root, on the device, with .devcarry carried): scripts/device-bwd.sh
# Env: SKIP_TESTS=1, SKIP_PEERS=1, OLD=1 (also time bwd with the mma.sync main kernel: LIBFLASH_BWD_WGMMA=0),
# VARIANTS="1 2" (also time bwd with LIBFLASH_BWD_SM90_VARIANT=v, for a build that reads it: see the perf-log),
# TEST_FILTER (default: the sm80 backward tests; '*Backward*' also runs naive's GPU backward tests, which
# alone outlast 150 s).
export PATH=/usr/local/cuda/bin:$PATH
OUT=${OUT:-/tmp/out}; mkdir -p $OUT/r
R=$OUT/r
start=$(date +%s)
t() { echo "[$(( $(date +%s) - start )) s] $*"; }
cmake -S . -B build-h100 -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASH_CUDA_ARCHS=90a -DFLASH_CUDA_PTX=OFF \
  -DFLASH_PTXAS_VERBOSE=ON > $R/cmake.log 2>&1
ninja -C build-h100 -j16 > $R/build.log 2>&1 || { grep -B2 -A10 "error" $R/build.log | head -60; tar -C $OUT -czf $OUT/r.tgz r; exit 1; }
t build done
grep -A2 "bwd_main" $R/build.log | grep -E "Compiling|spill|Used" | sed 's/ptxas info    : //; s/Compiling entry function//' | cut -c1-120
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv,noheader
if [ -z "$SKIP_TESTS" ]; then
  timeout ${TEST_TIMEOUT:-120} build-h100/tests/flash_gpu_tests --gtest_brief=1 \
    --gtest_filter="${TEST_FILTER:-*Backward*sm80*:*GpuBackward*/sm80}" > $R/tests.log 2>&1
  echo "tests rc=$?"; grep -E "^\[  (PASSED|FAILED|SKIPPED) |tests ran|Failure" $R/tests.log | head -20
  grep -E "worst element|\] = " $R/tests.log | cut -c1-300 | head -12
  t tests done
fi
B="build-h100/cli/fa-bench run --grid standard --dtype bf16 --head-dim 64,128 --algo sm80 --mask none;causal --warmup 3 --reps 20 --no-progress"
timeout 120 $B --mode fwd,fwd_bwd,bwd --json $R/fa-bench-h100-bwd.json > $R/bench.log 2>&1; echo "bench rc=$?"
t bench done
for v in $VARIANTS; do
  LIBFLASH_BWD_SM90_VARIANT=$v timeout 60 $B --mode bwd --json $R/fa-bench-h100-bwd-x$v.json > $R/bench-x$v.log 2>&1
  echo "bench x$v rc=$?"
done
if [ -n "$OLD" ]; then
  LIBFLASH_BWD_WGMMA=0 timeout 60 $B --mode bwd --json $R/fa-bench-h100-bwd-mmasync.json > $R/bench-old.log 2>&1
  echo "bench old rc=$?"
fi
if [ -z "$SKIP_PEERS" ]; then
  PYTHONUNBUFFERED=1 timeout 120 python3 .devcarry/torch_sdpa.py --hdims 64,128 --modes fwd,fwd_bwd --backends flash \
    --json $R/torch-sdpa-h100.json > $R/peers.log 2>&1; echo "peers rc=$?"
  t peers done
fi
tar -C $OUT -czf $OUT/r.tgz r && rm -rf $R
python3 - <<'PY'
import json, os, subprocess, tarfile, io
tf = tarfile.open(os.environ.get("OUT", "/tmp/out") + "/r.tgz")
def load(n):
    try: return json.load(tf.extractfile("r/" + n))
    except Exception: return None
ours = load("fa-bench-h100-bwd.json"); old = load("fa-bench-h100-bwd-mmasync.json"); peers = load("torch-sdpa-h100.json")
xs = {v: load(f"fa-bench-h100-bwd-x{v}.json") for v in (1, 2, 3)}
pk = {}
for r in (peers or {}).get("rows", []):
    if "tflops" in r: pk[(r["mode"], r["d"], r["n"], r["causal"])] = r["tflops"]
def tab(js):
    return {(r["mode"], r["head_dim"], r["seqlen_q"], r["mask"] == "causal"): r.get("tflops") for r in (js or {}).get("results", []) if not r.get("error")}
o, ol = tab(ours), tab(old)
xt = {v: tab(j) for v, j in xs.items() if j}
print("d causal n | fwd ours/FA2 | bwd ours (mma.sync) [x" + " x".join(str(v) for v in xt) + "] | fwd_bwd ours FA2 ratio")
for d in (64, 128):
    for c in (False, True):
        for n in (512, 1024, 2048, 4096, 8192, 16384):
            f, fb, b = o.get(("fwd", d, n, c)), o.get(("fwd_bwd", d, n, c)), o.get(("bwd", d, n, c))
            pf, pfb = pk.get(("fwd", d, n, c)), pk.get(("fwd_bwd", d, n, c))
            s = lambda x: f"{x:.0f}" if x else "-"
            ratio = f"{fb / pfb:.2f}x" if fb and pfb else "-"
            xx = " ".join(s(xt[v].get(("bwd", d, n, c))) for v in xt)
            print(f"{d} {int(c)} {n:5d} | {s(f)}/{s(pf)} | {s(b)} ({s(ol.get(('bwd', d, n, c)))}) [{xx}] | {s(fb)} {s(pfb)} {ratio}")
PY
