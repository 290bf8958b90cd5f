#!/usr/bin/env bash
# s62-4: production's final figures (block-sparse GPU tests, issue 7's masks run twice) and every block-sparse cell's
# memory floor (io_floor grid) on the same machine; FlashAttention's convention (batch 4) at 4k for the floor too.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -o /tmp/io_floor libflash/cuda/sm90/dev/io_floor.cu || exit 1
bash scripts/device-sm90.sh build 2>&1 | grep -E "phase build|build:" | head -3
T=build-h100/tests/flash_gpu_tests
timeout 200 $T --gtest_filter='*BlockSparse*/sm90:*BlockSparseD64TwoRings*' > $OUT/gpu-tests-sparse-s62-4.log 2>&1
echo "sparse tests exit $? at $(( $(date +%s) - t0 )) s"; grep -E "FAILED|PASSED|tests ran" $OUT/gpu-tests-sparse-s62-4.log | tail -4
export PYTHONPATH=bindings/python:scripts LIBFLASH_PATH=build-h100 PYTHONUNBUFFERED=1
for r in 1 2; do
  bash scripts/device-sm90.sh masks > /dev/null 2>&1
  mkdir -p "$OUT/masks-s62-4-run$r"; mv "$OUT"/fa-bench-*masks* "$OUT/masks-s62-4-run$r/"
  python3 scripts/masks_table.py "$OUT"/masks-s62-4-run$r/fa-bench-h100-sm90-masks-d64.json "$OUT"/masks-s62-4-run$r/fa-bench-h100-sm90-masks-d128.json \
    > "$OUT/masks-s62-4-run$r/masks-table.txt" 2>&1
  echo "masks run $r at $(( $(date +%s) - t0 )) s"; cat "$OUT/masks-s62-4-run$r/masks-table.txt"
  if [ $r = 1 ]; then
    timeout 200 /tmp/io_floor 20 grid > $OUT/io-floor-grid-s62-4.txt 2>&1; echo "io_floor grid exit $? at $(( $(date +%s) - t0 )) s"
    for d in 64 128; do
      timeout 200 build-h100/cli/fa-bench run --dtype bf16 --head-dim $d --heads $((2048 / d)) --batch 4 --seqlen 4096 --algo sm90 \
        --mask "none;block-sparse:0.1:128;block-sparse:0.25:128;block-sparse:0.5:128" --warmup 5 --reps 30 --no-progress \
        --json $OUT/fa-bench-b4-d$d.json > /dev/null 2>&1 || echo "b4 d$d failed"
    done
  fi
done
python3 scripts/floor_table.py $OUT/io-floor-grid-s62-4.txt $OUT/masks-s62-4-run1/fa-bench-h100-sm90-masks-d*.json $OUT/fa-bench-b4-d*.json \
  | tee $OUT/floor-table-s62-4-run1.txt
python3 scripts/floor_table.py $OUT/io-floor-grid-s62-4.txt $OUT/masks-s62-4-run2/fa-bench-h100-sm90-masks-d*.json \
  | tee $OUT/floor-table-s62-4-run2.txt
echo "end at $(( $(date +%s) - t0 )) s"
