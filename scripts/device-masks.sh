#!/usr/bin/env bash
# scripts/device-masks.sh -- issue 7 (masks) on the lent H100 in one call: build (sm_90a), the mask
# timings of scripts/device-run.sh's `masks` phase plus extra block-sparse points, the sm80 standard grid
# (`grid80`), then the forward GPU tests. Everything lands in $OUT (or ./device-out) and is also packed
# into $OUT/masks-s12.tar.gz (the device tool returns at most 8 files).
#   LIMIT_S   wall-clock budget of the whole script (default 290): the tests get what is left.
#   BASE=DIR  also build a baseline whose libflash/cuda/sm80/ files are replaced by DIR's (e.g. the
#             committed kernel's, carried in .devcarry/) and time it in the same lease (masks + grid80).
#   TESTS     gtest filter of the forward GPU tests (default: everything but backward and sm90).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/device-out}
mkdir -p "$OUT"
BUILD=build-h100
LIMIT_S=${LIMIT_S:-290}
T0=$(date +%s)
export PATH=/usr/local/cuda/bin:$PATH
left() { echo $(( LIMIT_S - ($(date +%s) - T0) )); }
# At most 8 files come back: everything goes into the tarball, and the loose copies beyond the key
# ones (issue 7's mask JSONs, the grid, the test log) are removed.
pack() {
  (cd "$OUT" && tar czf /tmp/masks-s12.tar.gz * && mv /tmp/masks-s12.tar.gz . &&
   find . -maxdepth 1 -type f ! -name masks-s12.tar.gz ! -name 'fa-bench-h100-masks-d*.json' \
     ! -name fa-bench-h100-grid.json ! -name gpu-tests.log ! -name 'base-masks-d128.json' -delete)
}
trap pack EXIT

# ninja decides by timestamps; a build dir kept from an earlier call can look newer than the copied
# sources (seen: session 12's first call rebuilt nothing of sm80). Touch what this script is about.
touch libflash/cuda/sm80/* tests/test_forward_gpu.cpp
if [ -n "${BASE:-}" ]; then
  rm -rf /tmp/base && mkdir -p /tmp/base &&
    tar cf - --exclude='./build*' --exclude=./.git --exclude=./.devcarry . | tar xf - -C /tmp/base &&
    cp "$BASE"/* /tmp/base/libflash/cuda/sm80/ &&
    (cd /tmp/base && cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASH_CUDA_ARCHS=90a -DFLASH_CUDA_PTX=OFF \
       > "$OUT/build-base.log" 2>&1 && ninja -C build -j8 fa-bench >> "$OUT/build-base.log" 2>&1; echo "base build: exit $?") &
  BASE_PID=$!
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv > "$OUT/nvidia-smi.csv" 2>&1
cmake -S . -B $BUILD -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASH_CUDA_ARCHS=90a -DFLASH_CUDA_PTX=OFF \
      -DFLASH_PTXAS_VERBOSE=ON > "$OUT/build.log" 2>&1 &&
  ninja -C $BUILD -j16 >> "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
echo "build: $(( $(date +%s) - T0 )) s ($(grep -c 'Building CUDA object libflash/cuda/sm80/' "$OUT/build.log") sm80 kernel files compiled)"
[ -n "${BASE_PID:-}" ] && wait $BASE_PID
echo "builds done: $(( $(date +%s) - T0 )) s"
# Registers and spills of the sm80 forward kernels (dense and block-sparse kernel of each instantiation).
grep -A2 "Compiling entry function '_ZN5flash4sm8010fwd_kernel" "$OUT/build.log" |
  grep -E "Compiling|spill|registers" > "$OUT/ptxas-sm80-fwd.log"
grep -E "spill" "$OUT/ptxas-sm80-fwd.log" | sort | uniq -c | sort -rn | head -6

B=$BUILD/cli/fa-bench
# Issue 7's figures, the same command as device-run.sh's masks phase.
for d in 64 128; do
  $B run --dtype bf16 --head-dim $d --heads $((2048 / d)) --batch 2 --seqlen 4096,8192,16384 --algo sm80 \
     --mask "none;causal;window:256,0;block-sparse:0.1:128;block-sparse:0.25:128;block-sparse:0.5:128" \
     --warmup 5 --reps 30 --no-progress --json "$OUT/fa-bench-h100-masks-d$d.json" > "$OUT/fa-bench-masks-d$d.txt" 2>&1
  echo "fa-bench masks d$d: exit $?"
done
# Extra points: s = 0.75 and 1 at 4k (time = fixed + s * per-block: the fit separates the two), and
# 64 x 64 mask blocks (two mask query blocks per 128-row CTA) against 128 x 128.
for d in 64 128; do
  $B run --dtype bf16 --head-dim $d --heads $((2048 / d)) --batch 2 --seqlen 4096 --algo sm80 \
     --mask "none;block-sparse:0.75:128;block-sparse:1:128;block-sparse:0.5:64;block-sparse:0.25:64" \
     --warmup 5 --reps 30 --no-progress --json "$OUT/fa-bench-h100-masks-extra-4k-d$d.json" > "$OUT/fa-bench-masks-extra-d$d.txt" 2>&1
  $B run --dtype bf16 --head-dim $d --heads $((2048 / d)) --batch 2 --seqlen 16384 --algo sm80 \
     --mask "none;block-sparse:0.5:64;block-sparse:0.5:128" \
     --warmup 5 --reps 30 --no-progress --json "$OUT/fa-bench-h100-masks-extra-16k-d$d.json" >> "$OUT/fa-bench-masks-extra-d$d.txt" 2>&1
  echo "fa-bench masks extra d$d: exit $?"
done
echo "timings so far: $(( $(date +%s) - T0 )) s"
if [ -x /tmp/base/build/cli/fa-bench ]; then
  # The baseline in the same lease: issue 7's masks (d64, d128) and the grid.
  for d in 64 128; do
    /tmp/base/build/cli/fa-bench run --dtype bf16 --head-dim $d --heads $((2048 / d)) --batch 2 --seqlen 4096,8192,16384 --algo sm80 \
       --mask "none;causal;window:256,0;block-sparse:0.1:128;block-sparse:0.25:128;block-sparse:0.5:128" \
       --warmup 5 --reps 30 --no-progress --json "$OUT/base-masks-d$d.json" > "$OUT/base-masks-d$d.txt" 2>&1
    echo "base masks d$d: exit $?"
  done
  /tmp/base/build/cli/fa-bench run --grid standard --dtype bf16 --head-dim 64,128 --algo sm80 --mask "none;causal" \
     --warmup 5 --reps 30 --no-progress --json "$OUT/base-grid.json" > "$OUT/base-grid.txt" 2>&1
  echo "base grid80: exit $? ($(( $(date +%s) - T0 )) s)"
fi
# grid80: the standard grid, sm80 alone (dense and causal), to compare with run2 / run5.
$B run --grid standard --dtype bf16 --head-dim 64,128 --algo sm80 --mask "none;causal" \
   --warmup 5 --reps 30 --no-progress --json "$OUT/fa-bench-h100-grid.json" > "$OUT/fa-bench-grid-sm80.txt" 2>&1
echo "fa-bench grid80: exit $? ($(( $(date +%s) - T0 )) s)"

# Forward GPU tests with what is left of the budget.
budget=$(( $(left) - 10 ))
if [ "$budget" -gt 20 ]; then
  timeout "$budget" $BUILD/tests/flash_gpu_tests --gtest_brief=1 --gtest_filter="${TESTS:--*Backward*:*sm90*}" \
    > "$OUT/gpu-tests.log" 2>&1
  echo "gpu tests: exit $? (budget $budget s)"
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED|tests from .* ran" "$OUT/gpu-tests.log" | tail -12
else
  echo "gpu tests: skipped, $budget s left"
fi

# Short table last (the tool returns the end of the output).
python3 - "$OUT" <<'EOF'
import json, sys, os, glob
d = sys.argv[1]
for f in sorted(glob.glob(os.path.join(d, "fa-bench-h100-masks*.json")) + glob.glob(os.path.join(d, "base-masks*.json"))):
    print(os.path.basename(f))
    rs = [r for r in json.load(open(f))["results"] if not r.get("error")]
    base = {(r["head_dim"], r["seqlen_q"]): r["time_ms_median"] for r in rs if r["mask"] == "none"}
    for r in rs:
        if r["mask"] != "none":
            b = base.get((r["head_dim"], r["seqlen_q"]))
            print(f'd{r["head_dim"]} {r["seqlen_q"]:>5} {r["mask"]:<22} {r["time_ms_median"]:8.3f} ms  {r["time_ms_median"] / b if b else 0:.3f}  {r["tflops"]:.0f} TF/s')
for g in (os.path.join(d, "fa-bench-h100-grid.json"), os.path.join(d, "base-grid.json")):
  if os.path.exists(g):
    print(os.path.basename(g))
    rs = [r for r in json.load(open(g))["results"] if not r.get("error")]
    for dim in (64, 128):
        for m in ("none", "causal"):
            print(f"grid80 d{dim} {m:<6}", " ".join(f'{r["tflops"]:.0f}' for r in sorted(rs, key=lambda r: r["seqlen_q"]) if r["head_dim"] == dim and r["mask"] == m))
EOF
