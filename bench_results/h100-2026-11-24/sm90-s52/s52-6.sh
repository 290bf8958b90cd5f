#!/usr/bin/env bash
# s52-6: the dense kernels' causal counter claimed by a consumer thread (151deb1) against 84d5dba (their memset) and
# ec26ee8: causal 1k-16k at d64/d128/d256, a causal-like window, dense controls; the tests that take tiles; sanitizers.
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH PYTHONUNBUFFERED=1
OUT=${OUT:-$PWD/device-out}; mkdir -p "$OUT"
t0=$(date +%s)
bash scripts/device-sm90.sh build 2>&1 | grep -E "phase build|error" | head
grep -A3 "Compiling entry function '_ZN5flash4sm90" "$OUT/build.log" | grep -E "spill" | sort | uniq -c
cmake -S .devcarry/prev -B build-prev -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASH_CUDA_ARCHS=90a -DFLASH_CUDA_PTX=OFF \
      -DFLASH_REVISION=84d5dba > "$OUT/build-prev.log" 2>&1
ninja -C build-prev -j16 flash >> "$OUT/build-prev.log" 2>&1 || { tail -30 "$OUT/build-prev.log"; exit 1; }
echo "builds done at $(( $(date +%s) - t0 )) s"
timeout 100 build-h100/tests/flash_gpu_tests --gtest_filter='GpuWorkspace*' 2>&1 | grep -E "OK|FAILED|Failure|error" | head -8
P=""
for d in 64 128 256; do
  h=$((2048 / d))
  for n in 1024 2048 4096 8192 16384; do P="$P,d$d-causal-$n=$d:$n:$((16384 / n)):$h:causal"; done
done
P="${P#,},d128-dense-1k=128:1024:16:16:none,d64-dense-4k=64:4096:4:32:none"
PYTHONPATH=bindings/python:scripts LIBFLASH_PATH=build-h100/libflash.so timeout 330 python3 scripts/interleaved_libs.py \
  --base prev=build-prev/libflash.so --problems "$P" --reps 60 --json "$OUT/libs-s52-6.json" 2>&1 | tee "$OUT/libs-s52-6.txt" | grep -v "^new\|^prev"
echo "interleaved done at $(( $(date +%s) - t0 )) s"
left=$(( 560 - ($(date +%s) - t0) ))
timeout $(( left > 200 ? 170 : left - 30 )) build-h100/tests/flash_gpu_tests \
  --gtest_filter='GpuSmallGrid.Sm90SplitAndLongCausal:GpuSmallGrid.Sm90D64CausalTopRows:GpuSmallGrid.Sm90D256CausalSkip:*GpuEdges.LongSequenceCausal/sm90:*GpuEdges.SlidingWindows/sm90:*GpuEdges.EmptyRowsAndAlignments/sm90:*GpuEdges.D64CausalTopRows/sm90:*GpuEdges.TilesThatSeeNoKey/sm90:Random/GpuSweep.MatchesReference/sm90_*' \
  > "$OUT/gpu-tests-s52-6.log" 2>&1
echo "gpu tests: exit $? ($(grep -c '\[       OK \]' "$OUT/gpu-tests-s52-6.log") ok, $(grep -c '\[  FAILED  \]' "$OUT/gpu-tests-s52-6.log") failed lines)"; grep -E "FAILED|PASSED|tests ran" "$OUT/gpu-tests-s52-6.log" | tail -5; tail -2 "$OUT/gpu-tests-s52-6.log"
cd "$OUT" && tar czf s52-6.tgz *.log *.json *.txt 2>/dev/null; ls -la s52-6.tgz
echo "end at $(( $(date +%s) - t0 )) s"
