#!/usr/bin/env bash
# s52-2: three builds interleaved -- new (thread 32's first take), v1 (e91df15: the first take's claim on thread 0),
# old (ec26ee8: memset) -- on issue 7's d64 4k and issue 9's causal 1k; SASS marks of the new d128/d256 kernels; tests.
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH PYTHONUNBUFFERED=1
OUT=${OUT:-$PWD/device-out}; mkdir -p "$OUT"
t0=$(date +%s)
bash scripts/device-sm90.sh build 2>&1 | grep -E "phase build|error" | head
for v in old v1; do
  cmake -S .devcarry/$v -B build-$v -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASH_CUDA_ARCHS=90a -DFLASH_CUDA_PTX=OFF \
        -DFLASH_REVISION=$v > "$OUT/build-$v.log" 2>&1
  ninja -C build-$v -j16 flash >> "$OUT/build-$v.log" 2>&1 || { tail -30 "$OUT/build-$v.log"; exit 1; }
done
echo "builds done at $(( $(date +%s) - t0 )) s"
timeout 120 build-h100/tests/flash_gpu_tests --gtest_filter='GpuWorkspace*' 2>&1 | tail -3
mkdir -p "$OUT/sass"
for k in fwd_hdim128_bf16 fwd_hdim256_bf16 fwd_hdim64_bf16; do
  for b in build-h100 build-old; do
    cuobjdump -sass $b/libflash/cuda/sm90/CMakeFiles/flash_sm90.dir/$k.cu.o > "/tmp/$k-$b.sass" 2>&1
    python3 scripts/sass_marks.py "/tmp/$k-$b.sass" "" | grep -E "LDL|STL|USETMAXREG|==" > "$OUT/sass/marks-$k-$b.txt"
    echo "$b $k: $(grep -c 'LDL' "$OUT/sass/marks-$k-$b.txt") LDL, $(grep -c 'STL' "$OUT/sass/marks-$k-$b.txt") STL; spills after the consumers' USETMAXREG: $(awk '/USETMAXREG/{n++} n>=2 && /LDL|STL/{c++} END{print c+0}' "$OUT/sass/marks-$k-$b.txt")"
  done
done
PYTHONPATH=bindings/python:scripts LIBFLASH_PATH=build-h100/libflash.so timeout 300 python3 scripts/interleaved_libs.py \
  --base old=build-old/libflash.so --base v1=build-v1/libflash.so --reps 100 --json "$OUT/libs-s52-2.json" 2>&1 | tee "$OUT/libs-s52-2.txt"
echo "interleaved done at $(( $(date +%s) - t0 )) s"
left=$(( 560 - ($(date +%s) - t0) ))
timeout $(( left > 260 ? 230 : left - 30 )) build-h100/tests/flash_gpu_tests \
  --gtest_filter='*sm90*:GpuAuto*:GpuWorkspace*:*TwoRings*:GpuSmallGrid.Sm90D64CausalTopRows:GpuSmallGrid.Sm90D256CausalSkip-*GpuTailSplit*:*LongKeyRangesD128*:*GpuBackward*:*D64Windows*:*GpuSweep*' \
  > "$OUT/gpu-tests-s52-2.log" 2>&1
echo "gpu tests: exit $? ($(grep -c "\[       OK \]" "$OUT/gpu-tests-s52-2.log") ok, $(grep -c "\[  FAILED  \]" "$OUT/gpu-tests-s52-2.log") failed lines)"; grep -E "FAILED|PASSED|tests ran|Failure" "$OUT/gpu-tests-s52-2.log" | tail -15; tail -3 "$OUT/gpu-tests-s52-2.log"
cd "$OUT" && tar czf s52-2.tgz sass *.log *.json *.txt 2>/dev/null; ls -la s52-2.tgz
echo "end at $(( $(date +%s) - t0 )) s"
