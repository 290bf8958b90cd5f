#!/usr/bin/env bash
# s63-7: Traits::kQAfterKV (the next tile's Q behind 1 / 2 / n-1 of the running tile's K/V blocks) against production,
# sm90_dev's block-sparse grid, paired, fa-bench's dirty flush, two rounds of 60 reps.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
bash scripts/device-sm90.sh build-dev 2>&1 | tail -2
for r in 1 2; do
  SM90_DEV_FLUSH=256 SM90_DEV_ONLY="d128 bs s63" timeout 250 build-h100/libflash/cuda/sm90/sm90_dev 60 sparse 2>&1 | tee "$OUT/dev-sparse-qafter-s63-7-$r.txt" | grep -E "d128|candidate"
  echo "round $r at $(( $(date +%s) - t0 )) s"
done
