#!/usr/bin/env bash
# scripts/run-tests.sh -- every test: the GoogleTest suite under ctest (GPU tests report SKIPPED
# without a GPU), the Python binding's pytest suite, and the Rust crates' cargo test.
# Sets everything up first (scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
# librust-bindgen+default-dev: bindgen's default features (clang-sys's runtime loading, hence libloading), which
# Cargo.lock holds; apt's --no-install-recommends leaves them out with librust-bindgen-dev alone.
export EXTRA_APT_PACKAGES="${EXTRA_APT_PACKAGES:-} librust-bindgen-dev librust-bindgen+default-dev librust-pkg-config-dev librust-half-dev libclang-dev clang chromium"
bash scripts/setup.sh
status=0

echo "== ctest =="
(cd "$BUILD_DIR" && ctest --output-on-failure -j "$(nproc)") || status=1

LIB="$PWD/$BUILD_DIR/libflash.so"
if [ -d bindings/python/tests ]; then
  echo "== pytest (bindings/python) =="
  PY=/usr/bin/python3
  [ -x "$PY" ] || PY=python3
  set +e
  LIBFLASH_PATH="$LIB" PYTHONPATH="$PWD/bindings/python${PYTHONPATH:+:$PYTHONPATH}" "$PY" -m pytest -q bindings/python/tests
  rc=$?
  set -e
  # 5 = no tests collected: a failure here, since the suite must exist.
  [ $rc -eq 0 ] || status=1
fi

if [ -f bindings/rust/ci.sh ]; then
  echo "== cargo test (bindings/rust) =="
  LIBFLASH_DIR="$PWD/$BUILD_DIR" bash bindings/rust/ci.sh || status=1
fi

if [ $status -ne 0 ]; then
  echo "run-tests: FAILED"
else
  echo "run-tests: all suites passed"
fi
exit $status
