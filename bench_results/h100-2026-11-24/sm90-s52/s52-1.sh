#!/usr/bin/env bash
# s52-1: the tile counter without its memset (new) against ec26ee8 (base): builds, interleaved A/B over the two
# libraries, fa-bench masks d64 4k alternating builds, then the counter's test.
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH PYTHONUNBUFFERED=1
OUT=${OUT:-$PWD/device-out}; mkdir -p "$OUT"
t0=$(date +%s)
bash scripts/device-sm90.sh build 2>&1 | tail -12
echo "new build done at $(( $(date +%s) - t0 )) s"
cmake -S .devcarry/old -B build-old -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASH_CUDA_ARCHS=90a -DFLASH_CUDA_PTX=OFF \
      -DFLASH_REVISION=ec26ee8 > "$OUT/build-old.log" 2>&1
ninja -C build-old -j16 flash fa-bench >> "$OUT/build-old.log" 2>&1 || { tail -30 "$OUT/build-old.log"; exit 1; }
echo "old build done at $(( $(date +%s) - t0 )) s"
ls build-h100/libflash.so* build-old/libflash.so* 2>&1 | head
timeout 120 build-h100/tests/flash_gpu_tests --gtest_filter='GpuWorkspace*' 2>&1 | tail -5
for b in build-h100 build-old; do
  for k in fwd_hdim128_bf16 fwd_hdim64_rings_bf16; do
    cuobjdump -sass $b/libflash/cuda/sm90/CMakeFiles/flash_sm90.dir/$k.cu.o > "$OUT/sass-$k-$b.txt" 2>&1
    python3 scripts/sass_marks.py "$OUT/sass-$k-$b.txt" "" | grep -E "LDL|STL|USETMAXREG|==" > "$OUT/marks-$k-$b.txt"
    echo "$b $k: $(grep -c 'LDL' "$OUT/marks-$k-$b.txt") LDL, $(grep -c 'STL' "$OUT/marks-$k-$b.txt") STL"
  done
done
PYTHONPATH=bindings/python:scripts LIBFLASH_PATH=build-h100/libflash.so timeout 300 python3 scripts/interleaved_libs.py \
  --base build-old/libflash.so --reps 100 --json "$OUT/libs-s52-1.json" 2>&1 | tee "$OUT/libs-s52-1.txt"
echo "interleaved done at $(( $(date +%s) - t0 )) s"
for r in 1 2; do
  for w in new old; do
    B=build-h100; [ $w = old ] && B=build-old
    timeout 120 $B/cli/fa-bench run --dtype bf16 --head-dim 64 --heads 32 --batch 2 --seqlen 4096 --algo sm90 \
      --mask "none;block-sparse:0.1:128;block-sparse:0.25:128;block-sparse:0.5:128;causal" --warmup 5 --reps 30 --no-progress \
      --json "$OUT/fa-bench-masks-d64-4k-$w-$r.json" > "$OUT/fa-bench-masks-d64-4k-$w-$r.txt" 2>&1
    python3 - "$OUT/fa-bench-masks-d64-4k-$w-$r.json" $w $r <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))["results"]
t = {r["mask"]: r.get("time_ms_median", r.get("median_ms")) for r in rows}
if None in t.values():
    k = [k for k in rows[0] if "ms" in k or "time" in k]; print("keys", k); t = {r["mask"]: r[k[0]] for r in rows}
d = t["none"]
print(sys.argv[2], sys.argv[3], "dense %.4f ms" % d, "  ".join("%s %.4f" % (m, v / d) for m, v in t.items() if m != "none"))
PY
  done
done
echo "all done at $(( $(date +%s) - t0 )) s"
left=$(( 560 - ($(date +%s) - t0) ))
echo "testfast with ${left} s left"
timeout $(( left > 230 ? 200 : left - 30 )) build-h100/tests/flash_gpu_tests --gtest_brief=1 \
  --gtest_filter='*sm90*:GpuAuto*:GpuWorkspace*:*TwoRings*:GpuSmallGrid.Sm90D64CausalTopRows:GpuSmallGrid.Sm90D256CausalSkip-*GpuTailSplit*:*LongKeyRangesD128*:*GpuBackward*:*D64Windows*' \
  > "$OUT/gpu-tests-s52-1.log" 2>&1
echo "gpu tests: exit $?"; grep -E "FAILED|PASSED|tests ran|Failure" "$OUT/gpu-tests-s52-1.log" | tail -15
left=$(( 585 - ($(date +%s) - t0) ))
if [ $left -gt 40 ]; then
  timeout $(( left - 10 )) compute-sanitizer --tool racecheck --error-exitcode 9 build-h100/tests/flash_gpu_tests --gtest_brief=1 \
    --gtest_filter='GpuWorkspace*' > "$OUT/sanitizer-workspace-racecheck.log" 2>&1
  echo "racecheck workspace: exit $?"; tail -2 "$OUT/sanitizer-workspace-racecheck.log"
fi
echo "end at $(( $(date +%s) - t0 )) s"
