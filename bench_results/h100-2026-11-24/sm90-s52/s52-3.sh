#!/usr/bin/env bash
# s52-3: the claimed counter on the block-sparse kernels only (dense SASS identical to ec26ee8): A/B against ec26ee8,
# issue 7's fa-bench masks, the block-sparse GPU tests, sanitizers.
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH PYTHONUNBUFFERED=1
OUT=${OUT:-$PWD/device-out}; mkdir -p "$OUT"
t0=$(date +%s)
bash scripts/device-sm90.sh build 2>&1 | grep -E "phase build|error" | head
grep -A3 "Compiling entry function '_ZN5flash4sm90" "$OUT/build.log" | grep -E "spill" | sort | uniq -c
cmake -S .devcarry/old -B build-old -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASH_CUDA_ARCHS=90a -DFLASH_CUDA_PTX=OFF \
      -DFLASH_REVISION=ec26ee8 > "$OUT/build-old.log" 2>&1
ninja -C build-old -j16 flash >> "$OUT/build-old.log" 2>&1 || { tail -30 "$OUT/build-old.log"; exit 1; }
echo "builds done at $(( $(date +%s) - t0 )) s"
P="d64-4k-none=64:4096:2:32:none,d64-4k-bs.1=64:4096:2:32:0.1,d64-4k-bs.25=64:4096:2:32:0.25,d64-4k-bs.5=64:4096:2:32:0.5"
P="$P,d128-4k-none=128:4096:2:16:none,d128-4k-bs.1=128:4096:2:16:0.1,d128-4k-bs.25=128:4096:2:16:0.25,d128-4k-bs.5=128:4096:2:16:0.5"
P="$P,d64-causal-1k=64:1024:16:32:causal,d256-causal-1k=256:1024:16:8:causal"
PYTHONPATH=bindings/python:scripts LIBFLASH_PATH=build-h100/libflash.so timeout 200 python3 scripts/interleaved_libs.py \
  --base old=build-old/libflash.so --problems "$P" --reps 100 --json "$OUT/libs-s52-3.json" 2>&1 | tee "$OUT/libs-s52-3.txt"
echo "interleaved done at $(( $(date +%s) - t0 )) s"
bash scripts/device-sm90.sh masks 2>&1 | tail -3
python3 scripts/masks_table.py "$OUT"/fa-bench-h100-sm90-masks-d64.json "$OUT"/fa-bench-h100-sm90-masks-d128.json 2>&1 | tee "$OUT/masks-table.txt" | head -20
echo "masks done at $(( $(date +%s) - t0 )) s"
timeout 200 build-h100/tests/flash_gpu_tests \
  --gtest_filter='GpuWorkspace*:*GpuEdges.BlockSparse*/sm90:*GpuEdges.EmptyRowsAndAlignments/sm90:*GpuEdges.TilesThatSeeNoKey/sm90:*GpuEdges.D64WindowsOnEitherKernel/sm90' \
  > "$OUT/gpu-tests-s52-3.log" 2>&1
echo "gpu tests: exit $? ($(grep -c '\[       OK \]' "$OUT/gpu-tests-s52-3.log") ok, $(grep -c '\[  FAILED  \]' "$OUT/gpu-tests-s52-3.log") failed lines)"; grep -E "FAILED|PASSED|tests ran" "$OUT/gpu-tests-s52-3.log" | tail -8
for tool in memcheck racecheck synccheck; do
  left=$(( 585 - ($(date +%s) - t0) )); [ $left -lt 30 ] && break
  timeout $(( left > 120 ? 100 : left - 15 )) compute-sanitizer --tool $tool --error-exitcode 9 build-h100/tests/flash_gpu_tests \
    --gtest_filter='GpuWorkspace*:*GpuEdges.BlockSparseD64TwoRings/sm90' > "$OUT/sanitizer-s52-3-$tool.log" 2>&1
  echo "compute-sanitizer $tool: exit $?"; grep -E "SUMMARY|PASSED|FAILED" "$OUT/sanitizer-s52-3-$tool.log" | tail -3
done
cd "$OUT" && tar czf s52-3.tgz *.log *.json *.txt 2>/dev/null; ls -la s52-3.tgz
echo "end at $(( $(date +%s) - t0 )) s"
