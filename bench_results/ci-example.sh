#!/usr/bin/env bash
# bench_results/ci-example.sh -- an example CI job for a GPU runner: build libflash and fa-bench, run
# the standard grid, compare with the last committed baseline, fail on a regression, publish the page.
#
# Usage (from the repository root, on a machine with a GPU and the CUDA toolkit):
#   bench_results/ci-example.sh [OUT_DIR]
# Environment:
#   FA_BENCH_DEVICE          device to measure (default cuda:0)
#   FA_BENCH_ALGOS           algorithms (default: sm90,sm80,naive -- whatever the GPU has is used)
#   FA_BENCH_MAX_REGRESSION  allowed slowdown of a median time, percent (default 5)
#   FA_BENCH_BASELINE        baseline file (default: the committed bench_results/*/fa-bench-fwd.json of this GPU)
#   FA_BENCH_RUN_ARGS        the shape flags (default: the standard grid, bf16, d 64, 128 and 256, causal and not)
#   FA_BENCH                 an fa-bench already built (skips the build)
#   BUILD_DIR                build directory (default build-ci)
#
# What it publishes (OUT_DIR, default bench-out/): new.json (this run), dashboard.html (one self-contained
# page: every chart inline SVG, so it can be uploaded as an artifact or to GitHub Pages as is), and
# summary.md (the changes against the baseline, regressions first; appended to $GITHUB_STEP_SUMMARY when
# that is set). Exit status: 0 no regression; 1 a regression (the job fails); 2 a setup problem.
#
# A GitHub Actions job that runs it:
#   perf:
#     runs-on: [self-hosted, gpu, h100]
#     steps:
#       - uses: actions/checkout@v4
#         with: { fetch-depth: 0 }
#       - run: bench_results/ci-example.sh bench-out
#       - uses: actions/upload-pages-artifact@v3      # or actions/upload-artifact@v4
#         if: always()
#         with: { path: bench-out }
# To move the baseline forward after a reviewed change, commit the new file over the device's baseline
# (bench_results/README.md, "Layout"):
#   cp bench-out/new.json bench_results/<gpu>/fa-bench-fwd.json
set -euo pipefail

OUT=${1:-bench-out}
BUILD=${BUILD_DIR:-build-ci}
DEVICE=${FA_BENCH_DEVICE:-cuda:0}
MAX_REG=${FA_BENCH_MAX_REGRESSION:-5}
mkdir -p "$OUT"

# 1. Build (Release, CUDA on). fa-bench lands in $BUILD/cli/fa-bench.
if [ -n "${FA_BENCH:-}" ]; then
  FB=$FA_BENCH
else
  cmake -G Ninja -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DFLASH_WITH_CUDA=ON -DFLASH_BUILD_TESTS=OFF
  cmake --build "$BUILD" --target fa-bench
  FB="$BUILD/cli/fa-bench"
fi
"$FB" devices

# 2. Which algorithms this GPU has (the intersection with what was asked for).
available=$("$FB" devices | awk -v dev="$DEVICE" '$1 == dev {found=1} found && /algorithms:/ {sub(/.*algorithms: */, ""); print; exit}')
algos=""
for a in $(echo "${FA_BENCH_ALGOS:-sm90,sm80,naive}" | tr ',' ' '); do
  case " $available " in *" $a "*) algos="${algos:+$algos,}$a" ;; esac
done
if [ -z "$algos" ]; then
  echo "ci-example: none of ${FA_BENCH_ALGOS:-sm90,sm80,naive} is available on $DEVICE (has: $available)" >&2
  exit 2
fi

# 3. The papers' standard grid: forward, bf16, d 64, 128 and 256, causal and not, flash vs naive.
export FA_BENCH_GIT_REVISION=$(git rev-parse --short=12 HEAD)
# shellcheck disable=SC2086  # FA_BENCH_RUN_ARGS is a list of flags
"$FB" run --device "$DEVICE" --algo "$algos" \
          ${FA_BENCH_RUN_ARGS:---grid standard --dtype bf16 --head-dim 64,128,256 --mode fwd} \
          --mask "none;causal" --check --no-progress --json "$OUT/new.json"

# 4. The baseline: the committed forward standard-grid file of the same GPU (bench_results/<gpu>/fa-bench-fwd.json).
gpu=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["meta"]["device"]["name"])' "$OUT/new.json" 2>/dev/null ||
      grep -m1 '"name"' "$OUT/new.json" | sed 's/.*"name": *"\(.*\)".*/\1/')
baseline=${FA_BENCH_BASELINE:-}
if [ -z "$baseline" ]; then
  for f in $(git ls-files 'bench_results/*/fa-bench-fwd.json'); do
    if grep -q "\"name\": \"$gpu\"" "$f"; then baseline=$f; fi
  done
fi

# 5. The page (history from every committed file plus this run) and the summary.
"$FB" report bench_results "$OUT/new.json" --html "$OUT/dashboard.html" --max-regression "$MAX_REG" \
      --title "libflash performance ($gpu)"
status=0
if [ -n "$baseline" ]; then
  echo "baseline: $baseline"
  "$FB" report "$OUT/new.json" --baseline "$baseline" --markdown="$OUT/summary.md" --max-regression "$MAX_REG"
  "$FB" compare "$baseline" "$OUT/new.json" --max-regression "$MAX_REG" || status=$?
else
  echo "no committed baseline for $gpu: nothing to compare (commit $OUT/new.json under bench_results/ to start one)"
  "$FB" report "$OUT/new.json" --markdown="$OUT/summary.md"
fi
[ -n "${GITHUB_STEP_SUMMARY:-}" ] && cat "$OUT/summary.md" >> "$GITHUB_STEP_SUMMARY"
echo "published: $OUT/dashboard.html $OUT/summary.md $OUT/new.json"
exit $status
