#!/usr/bin/env bash
# scripts/setup.sh -- installs what libflash needs from Debian's packages (when run as root with apt)
# and builds everything into ./build: the library (CUDA kernels too when nvcc is found), fa-bench,
# the examples and the tests. Safe to re-run; the second run only rebuilds what changed.
#
#   BUILD_DIR=build            where to build
#   FLASH_WITH_CUDA=ON|OFF     force the CUDA part on/off (default: on when nvcc is found)
#   JOBS=N                     parallel compile jobs (default: all cores)
#   SKIP_APT=1                 do not touch the package manager
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}

if [ -z "${SKIP_APT:-}" ] && command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
  pkgs=(cmake ninja-build g++ pkg-config libgtest-dev libcxxopts-dev nlohmann-json3-dev
        python3 python3-numpy python3-pytest binutils)
  missing=()
  for p in "${pkgs[@]}" ${EXTRA_APT_PACKAGES:-}; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
fi

# The CUDA toolkit usually lives in /usr/local/cuda without being on PATH.
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
cuda_flag=()
if [ -n "${FLASH_WITH_CUDA:-}" ]; then
  cuda_flag=(-DFLASH_WITH_CUDA="$FLASH_WITH_CUDA")
fi

cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release "${cuda_flag[@]}" ${CMAKE_ARGS:-}
start=$(date +%s)
cmake --build "$BUILD_DIR" -j "$JOBS"
echo "setup: build finished in $(( $(date +%s) - start )) s on $JOBS job(s)"
