#!/usr/bin/env bash
# s64-6: FlexAttention with torch.compile's max-autotune (its Triton configs tuned per shape) against libflash at 4k,
# block-sparse and dense, issue 7's batch 2.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
bash scripts/device-sm90.sh build 2>&1 | grep -E "build:" | head -2
mkdir -p $OUT/s64-6
export PYTHONPATH=bindings/python:scripts LIBFLASH_PATH=build-h100 TORCHINDUCTOR_CACHE_DIR=/tmp/inductor
t0=$(date +%s)
timeout 480 python3 scripts/interleaved_flex.py --reps 30 --seqlens 4096 --window 0 --compile-mode max-autotune-no-cudagraphs \
  --json $OUT/s64-6/flex-autotune-4k.json > $OUT/s64-6/flex-autotune-4k-full.txt 2>&1
echo "flex autotune: exit $? $(( $(date +%s) - t0 )) s"
grep -E "^d|^   " $OUT/s64-6/flex-autotune-4k-full.txt | tee $OUT/s64-6/flex-autotune-4k.txt
grep -iE "autotune|AUTOTUNE|SingleProcess|triton_flex" $OUT/s64-6/flex-autotune-4k-full.txt | head -20
cd $OUT && tar czf s64-6.tgz s64-6 && rm -rf s64-6
