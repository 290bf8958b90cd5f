#!/usr/bin/env bash
# s61-3: session 61's final figures on production (session 57's kernels, byte-identical): the block-sparse GPU tests and
# issue 7's fa-bench masks twice.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader
bash scripts/device-sm90.sh build 2>&1 | grep -E "phase build|build:" | head -3
T=build-h100/tests/flash_gpu_tests
timeout 200 $T --gtest_filter='*BlockSparse*/sm90:*BlockSparseD64TwoRings*' > $OUT/gpu-tests-sparse-s61-3.log 2>&1
echo "sparse tests exit $? at $(( $(date +%s) - t0 )) s"; grep -E "FAILED|PASSED|tests ran" $OUT/gpu-tests-sparse-s61-3.log | tail -4
export PYTHONPATH=bindings/python:scripts LIBFLASH_PATH=build-h100 PYTHONUNBUFFERED=1
for r in 1 2; do
  bash scripts/device-sm90.sh masks > /dev/null 2>&1
  mkdir -p "$OUT/masks-s61-3-run$r"; mv "$OUT"/fa-bench-*masks* "$OUT/masks-s61-3-run$r/"
  python3 scripts/masks_table.py "$OUT"/masks-s61-3-run$r/fa-bench-h100-sm90-masks-d64.json "$OUT"/masks-s61-3-run$r/fa-bench-h100-sm90-masks-d128.json \
    > "$OUT/masks-s61-3-run$r/masks-table.txt" 2>&1
  echo "masks run $r at $(( $(date +%s) - t0 )) s"; cat "$OUT/masks-s61-3-run$r/masks-table.txt"
done
cd "$OUT" && tar czf s61-3-results.tgz masks-s61-3-run* && rm -rf masks-s61-3-run*
echo "end at $(( $(date +%s) - t0 )) s"
