#!/usr/bin/env bash
# scripts/ci-reliability.sh -- issue 70's CI steps, run by .ci/run after scripts/run-tests.sh (which set up the
# packages and the main build). CPU only; each step in its own build directory:
#   1. the CPU test suite (ctest -L cpu) built with ASan + UBSan           -> build-asan/
#   2. the libFuzzer target fuzz_attention (clang) over flash_fwd and flash_bwd (dense and packed varlen),
#      flash_fwd_kvcache, flash_combine and the workspace queries, FUZZ_SECONDS (default 60) from the committed seed
#      corpus fuzz/corpus-attention.tar.gz, unpacked into a scratch folder        -> build-fuzz/
#      Any deviation from flash.h's rules fails the run (the harness tolerates none); its log ends with counts per
#      entry point.
# A failure of either fails CI; a fuzzer finding leaves its input in build-fuzz/crash-* (replay it with
# build-fuzz/fuzz/fuzz_attention <file>).
#
#   JOBS=N  FUZZ_SECONDS=S  SKIP_ASAN=1  SKIP_FUZZ=1
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc)}
FUZZ_SECONDS=${FUZZ_SECONDS:-60}
status=0

# libFuzzer's runtime is Debian's libclang-rt-14-dev (clang itself comes with run-tests.sh's packages).
if [ -z "${SKIP_APT:-}" ] && command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
  missing=()
  for p in clang libclang-rt-14-dev; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "ci-reliability: installing ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
fi

if [ -z "${SKIP_ASAN:-}" ]; then
  echo "== ASan + UBSan: the CPU test suite (build-asan) =="
  # allocator_may_return_null: the naive path's out-of-memory test asks for terabytes and must get a status back.
  t0=$(date +%s)
  san="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFLASH_WITH_CUDA=OFF -DFLASH_BUILD_CLI=OFF \
    -DCMAKE_C_FLAGS="$san" -DCMAKE_CXX_FLAGS="$san" -DCMAKE_EXE_LINKER_FLAGS="$san" -DCMAKE_SHARED_LINKER_FLAGS="$san" >/dev/null
  cmake --build build-asan -j "$JOBS"
  t1=$(date +%s)
  (cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1:allocator_may_return_null=1 \
     UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ctest -L cpu --output-on-failure -j "$JOBS") || status=1
  echo "ci-reliability: sanitizer build $((t1 - t0)) s, tests $(( $(date +%s) - t1 )) s"
fi

if [ -z "${SKIP_FUZZ:-}" ]; then
  echo "== libFuzzer: fuzz_attention for ${FUZZ_SECONDS} s (build-fuzz) =="
  t0=$(date +%s)
  cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
    -DFLASH_WITH_CUDA=OFF -DFLASH_BUILD_FUZZERS=ON -DFLASH_BUILD_TESTS=OFF -DFLASH_BUILD_CLI=OFF -DFLASH_BUILD_EXAMPLES=OFF >/dev/null
  cmake --build build-fuzz --target fuzz_attention -j "$JOBS"
  t1=$(date +%s)
  rm -rf build-fuzz/corpus && mkdir -p build-fuzz/corpus
  tar -xzf fuzz/corpus-attention.tar.gz -C build-fuzz/corpus
  # -timeout: a call running 10 s is a hang (the largest decoded problem takes milliseconds).
  build-fuzz/fuzz/fuzz_attention build-fuzz/corpus -max_total_time="$FUZZ_SECONDS" -timeout=10 -rss_limit_mb=4096 \
    -artifact_prefix=build-fuzz/ -print_final_stats=1 2>build-fuzz/fuzz.log || status=1
  grep -E "^(stat::|fuzz_attention counts|\*\*\*|==[0-9]+==ERROR|SUMMARY)" build-fuzz/fuzz.log || true
  [ $status -eq 0 ] || tail -60 build-fuzz/fuzz.log
  echo "ci-reliability: fuzzer build $((t1 - t0)) s, run $(( $(date +%s) - t1 )) s"
fi

[ $status -eq 0 ] && echo "ci-reliability: passed" || echo "ci-reliability: FAILED"
exit $status
