#!/bin/bash
# libflash/cuda/naive/dev/run_bwd_device.sh -- build libflash (sm80 stubbed unless FULL=1, sm90 left out)
# and run the naive GPU checks: naive_check (forward) and naive_bwd_check (backward), then the naive
# gtests if there is time. Run from the repository root of a THROWAWAY copy (it rewrites libflash/cuda/sm80
# and removes libflash/cuda/sm80_bwd). Logs go to $OUT. ARCH defaults to 90 (sm_90, not 90a).
#
# To test a committed state whatever the shared working tree holds: here,
#   git archive -o libflash/cuda/naive/dev/snap.tar HEAD          (untracked: it travels, never commit it)
# and on the device: mkdir /tmp/c && tar xf libflash/cuda/naive/dev/snap.tar -C /tmp/c && cd /tmp/c &&
#   bash libflash/cuda/naive/dev/run_bwd_device.sh
set -u
if [ -z "${OUT:-}" ] && [ "${FORCE:-0}" != 1 ]; then echo "run this on the device copy (OUT unset)"; exit 2; fi
OUT=${OUT:-/tmp/naive-out}; mkdir -p "$OUT"
START=$(date +%s)
BUDGET=${BUDGET:-280}   # seconds: the gtests only run if this leaves room
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader 2>/dev/null
if [ "${FULL:-0}" != 1 ]; then
  rm -rf libflash/cuda/sm80 libflash/cuda/sm80_bwd && mkdir -p libflash/cuda/sm80
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
cfg() { cmake -G Ninja -B build -DFLASH_CUDA_ARCHS=${ARCH:-90} -DFLASH_CUDA_PTX=OFF -DFLASH_BUILD_CLI=OFF \
          -DFLASH_BUILD_EXAMPLES=OFF "$@" > "$OUT/cmake.log" 2>&1; }
cfg -DFLASH_BUILD_TESTS=ON || { echo "configure with tests failed, retrying without"; tail -5 "$OUT/cmake.log"; cfg -DFLASH_BUILD_TESTS=OFF; }
if ! ninja -C build flash > "$OUT/build.log" 2>&1; then echo "LIBRARY BUILD FAILED"; tail -40 "$OUT/build.log"; exit 1; fi
echo "library built after $(( $(date +%s) - START )) s"
( nvcc -O2 -std=c++17 -I. libflash/cuda/naive/dev/naive_check.cu -Lbuild -lflash -Xlinker -rpath,"$PWD/build" \
    -o build/naive_check > "$OUT/nvcc_fwd.log" 2>&1 ) &
nvcc -O2 -std=c++17 -I. libflash/cuda/naive/dev/naive_bwd_check.cu -Lbuild -lflash -Xlinker -rpath,"$PWD/build" \
  -o build/naive_bwd_check > "$OUT/nvcc_bwd.log" 2>&1 || { echo "driver build failed"; cat "$OUT/nvcc_bwd.log"; exit 1; }
wait
# Tests build in the background while the drivers run.
if [ "${TESTS:-1}" = 1 ] && grep -q flash_gpu_tests build/build.ninja 2>/dev/null; then
  ( timeout $(( BUDGET - 60 )) ninja -C build flash_gpu_tests > "$OUT/tests_build.log" 2>&1; echo $? > "$OUT/tests_build.rc" ) &
fi
build/naive_bwd_check "$@" 2>&1 | tee "$OUT/naive_bwd_check.log"
rc=${PIPESTATUS[0]}
if [ -x build/naive_check ]; then
  build/naive_check > "$OUT/naive_check.log" 2>&1; echo "forward naive_check rc=$?: $(tail -1 "$OUT/naive_check.log")"
  grep -E '^FAIL|^time' "$OUT/naive_check.log"
else
  echo "forward driver did not build"; tail -5 "$OUT/nvcc_fwd.log"
fi
wait
if [ -f "$OUT/tests_build.rc" ] && [ "$(cat "$OUT/tests_build.rc")" = 0 ]; then
  left=$(( BUDGET - ($(date +%s) - START) ))
  if [ $left -gt 15 ]; then
    timeout $left build/tests/flash_gpu_tests --gtest_filter='*aive*' > "$OUT/gtest.log" 2>&1
    echo "gtests rc=$?"; grep -E '^\[  (FAILED|PASSED) |tests ran|Failure' "$OUT/gtest.log" | head -30
  fi
elif [ -f "$OUT/tests_build.rc" ]; then
  echo "flash_gpu_tests did not build in time (rc $(cat "$OUT/tests_build.rc"))"; tail -5 "$OUT/tests_build.log"
fi
echo "total $(( $(date +%s) - START )) s"
exit $rc
