#!/usr/bin/env bash
# CI entry point for the Rust bindings: builds and tests both crates offline against Debian's packaged
# crates, linking the libflash in $LIBFLASH_DIR. Installs nothing.
#
#   LIBFLASH_DIR=/tmp/build-rust bindings/rust/ci.sh
#
# Needs: cargo/rustc >= 1.64; apt packages librust-bindgen-dev (pulls in libclang-dev, clang),
# librust-bindgen+default-dev (bindgen's default features: clang-sys's runtime loading through libloading),
# librust-pkg-config-dev, librust-half-dev; a CPU build of libflash in $LIBFLASH_DIR:
#   cmake -G Ninja -S . -B /tmp/build-rust -DFLASH_WITH_CUDA=OFF -DFLASH_BUILD_TESTS=OFF -DFLASH_BUILD_CLI=OFF
#   ninja -C /tmp/build-rust
# Test binaries find libflash through an rpath (no LD_LIBRARY_PATH needed).
# Environment: LIBFLASH_DIR (required), CARGO (default: cargo on PATH, else ~/.cargo/bin/cargo),
# CARGO_BUILD_JOBS (default 2), CARGO_TARGET_DIR (default bindings/rust/target).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"

if [[ -z "${LIBFLASH_DIR:-}" ]]; then
  echo "ci.sh: set LIBFLASH_DIR to a libflash build directory (holding libflash.so) or install prefix" >&2
  exit 2
fi
# flash-sys's build script runs in its own directory: hand it an absolute path.
LIBFLASH_DIR="$(cd "$LIBFLASH_DIR" && pwd)"
export LIBFLASH_DIR

registry=/usr/share/cargo/registry
if [[ ! -d "$registry/bindgen-0.60.1" || ! -d "$registry/libloading-0.7.4" ]]; then
  echo "ci.sh: Debian's packaged crates are missing from $registry;" >&2
  echo "       apt-get install -y librust-bindgen-dev librust-bindgen+default-dev librust-pkg-config-dev librust-half-dev" >&2
  exit 2
fi

cargo="${CARGO:-}"
if [[ -z "$cargo" ]]; then
  if command -v cargo >/dev/null; then cargo=cargo; else cargo="$HOME/.cargo/bin/cargo"; fi
fi
export CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-2}"
debian=(--config "$here/.cargo/config.debian.toml")

"$cargo" --version
echo "ci.sh: LIBFLASH_DIR=$LIBFLASH_DIR, crates from $registry (offline, Cargo.lock as committed)"
# Unit tests, bindgen layout tests, integration tests, doctests; examples are built too.
"$cargo" "${debian[@]}" test --workspace --offline --locked
# The example binary, end to end.
"$cargo" "${debian[@]}" run --offline --locked -q -p flash --example forward -- 1 100 130 2 64 --causal
