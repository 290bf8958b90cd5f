#!/bin/bash
# libflash/cuda/naive/dev/run_device.sh -- build and check the naive GPU algorithm on a GPU machine.
# Run from the repository root of a THROWAWAY copy (it replaces libflash/cuda/sm80 with a stub unless
# FULL=1, so that naive is tested alone, whatever state the other backends are in). Refuses to run in a
# git checkout that has no $OUT (i.e. anywhere but the device tool's copy) unless FORCE=1.
set -u
if [ -z "${OUT:-}" ] && [ "${FORCE:-0}" != 1 ]; then echo "run this on the device copy (OUT unset)"; exit 2; fi
OUT=${OUT:-/tmp/naive-out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader
ldconfig -p | grep 'libcublas.so' | head -2
if [ "${FULL:-0}" != 1 ]; then
  rm -rf libflash/cuda/sm80 && mkdir -p libflash/cuda/sm80
  echo 'flash_add_kernels(flash_sm80 ARCHS all SOURCES stub.cpp)' > libflash/cuda/sm80/CMakeLists.txt
  cat > libflash/cuda/sm80/stub.cpp <<'STUB'
#include "libflash/algorithm.h"
namespace flash {
namespace {
bool av(int32_t, std::string* w) { *w = "stubbed out by the naive check"; return false; }
bool su(const FwdParams&, std::string* w) { *w = "stub"; return false; }
size_t ws(const FwdParams&) { return 0; }
int32_t fw(const FwdParams&) { return 900; }
}  // namespace
extern const Algorithm kCudaSm80 = {3, "sm80", 2, av, su, ws, fw};
}  // namespace flash
STUB
fi
# sm_90 (not 90a): the sm90 backend is not needed here.
cfg() { cmake -G Ninja -B build -DFLASH_CUDA_ARCHS=90 -DFLASH_CUDA_PTX=OFF -DFLASH_BUILD_CLI=OFF \
          -DFLASH_BUILD_EXAMPLES=OFF "$@" > "$OUT/cmake.log" 2>&1; }
cfg -DFLASH_BUILD_TESTS=ON || { echo "configure with tests failed, retrying without"; tail -5 "$OUT/cmake.log"; cfg -DFLASH_BUILD_TESTS=OFF; }
if ! ninja -C build flash > "$OUT/build.log" 2>&1; then echo "LIBRARY BUILD FAILED"; tail -40 "$OUT/build.log"; exit 1; fi
nvcc -O2 -std=c++17 -I. libflash/cuda/naive/dev/naive_check.cu -Lbuild -lflash -Xlinker -rpath,"$PWD/build" \
  -o build/naive_check || exit 1
build/naive_check "$@" 2>&1 | tee "$OUT/naive_check.log"
rc=${PIPESTATUS[0]}
if [ "${TESTS:-1}" = 1 ] && [ -f build/build.ninja ] && grep -q flash_gpu_tests build/build.ninja; then
  if timeout 120 ninja -C build flash_gpu_tests > "$OUT/tests_build.log" 2>&1; then
    build/tests/flash_gpu_tests --gtest_filter='*naive*' 2>&1 | tee "$OUT/gtest.log" | grep -E '^\[  (FAILED|PASSED|SKIPPED) |tests ran|Failure|Expected|case:' | head -60
  else
    echo "flash_gpu_tests did not build:"; tail -20 "$OUT/tests_build.log"
  fi
fi
exit $rc
