#!/usr/bin/env bash
# scripts/run-bench.sh -- the main job: sets up, then runs fa-bench on the first GPU when there is one
# (flash vs naive, bf16, head dims 64 and 128, causal and not) and on the CPU otherwise. Extra
# arguments go to fa-bench (e.g. --grid standard --json out.json).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
bash scripts/setup.sh
bench="$BUILD_DIR/cli/fa-bench"
"$bench" devices
if "$bench" devices 2>/dev/null | grep -q "^cuda"; then
  exec "$bench" run --dtype bf16 --head-dim 64,128 --seqlen 1024,4096 --batch 4 --heads 16 --algo auto,naive --check "$@"
else
  exec "$bench" run --device cpu --dtype fp32 --head-dim 64 --seqlen 256,512 --batch 1 --heads 4 --algo cpu,naive --check "$@"
fi
