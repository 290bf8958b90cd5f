#!/usr/bin/env bash
# dev/ab.sh -- A/B of two libflash source trees on one GPU: both built side by side, then fa-bench's standard grid
# (fwd and fwd_bwd; d 64, 128, 256; no mask and causal) and the masks grid timed for each, the two builds interleaved
# (old, new, new, old, ...), and every row that moves by more than AB_LIMIT re-run before it is judged (ab_table.py).
#
#   OLD=path/to/old/tree OUT=out bash dev/ab.sh build bench
#
# `build` builds the old tree (library and fa-bench, sm_90a) into /tmp/ab/old; the new one is scripts/device.sh's build
# ($NEW_BUILD, default build-device), run beside it.
# The old tree is a plain copy of the sources (git archive of a revision, without bench_results/), e.g. in a git-ignored
# folder the device tool carries. Results: $OUT/ab/{old,new}-{fwd,fwd_bwd,masks}-r{N}.json, $OUT/ab/table.md.
# Environment: OLD (required), NEW_BUILD, OUT (default out), JOBS (build jobs, default nproc / 2), AB_ROUNDS (default 2),
# AB_REPS (timed calls per row, default 30), AB_LIMIT (default 1.02), AB_GRIDS (default fwd,fwd_bwd,masks), AB_HDIMS
# (only these head dims).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=$(mkdir -p "${OUT:-out}/ab" && cd "${OUT:-out}" && pwd)
OLD=$(cd "$OLD" && pwd)
export PATH=/usr/local/cuda/bin:$PATH PYTHONUNBUFFERED=1
J=${JOBS:-$(( $(nproc) / 2 ))}
build() {  # build SRC DIR: library and fa-bench, sm_90a only
  cmake -S "$1" -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASH_WITH_CUDA=ON -DFLASH_CUDA_ARCHS=90a -DFLASH_CUDA_PTX=OFF \
    -DFLASH_BUILD_TESTS=OFF -DFLASH_BUILD_EXAMPLES=OFF -DFLASH_REVISION="$3" > "$2.log" 2>&1 && cmake --build "$2" -j "$J" --target flash fa-bench >> "$2.log" 2>&1
}
for phase in "$@"; do
  start=$(date +%s)
  case "$phase" in
    build)
      mkdir -p /tmp/ab
      build "$OLD" /tmp/ab/old old || { tail -30 /tmp/ab/old.log; exit 1; }
      ;;
    bench)
      python3 dev/ab_table.py --old /tmp/ab/old/cli/fa-bench --new "${NEW_BUILD:-$ROOT/build-device}/cli/fa-bench" --out "$OUT/ab" \
        --rounds "${AB_ROUNDS:-2}" --reps "${AB_REPS:-30}" --limit "${AB_LIMIT:-1.02}" \
        --grids "${AB_GRIDS:-fwd,fwd_bwd,masks}" ${AB_HDIMS:+--head-dim "$AB_HDIMS"}
      ;;
  esac
  echo "== $phase: $(( $(date +%s) - start )) s"
done
