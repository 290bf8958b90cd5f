#!/usr/bin/env bash
# s52-4: the final revision -- issue 7's fa-bench masks three times, the randomized sweep and block-sparse tests.
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH PYTHONUNBUFFERED=1
OUT=${OUT:-$PWD/device-out}; mkdir -p "$OUT"
t0=$(date +%s)
bash scripts/device-sm90.sh build 2>&1 | grep -E "phase build|error" | head
grep -A3 "Compiling entry function '_ZN5flash4sm90" "$OUT/build.log" | grep -E "spill|C75" | sort | uniq -c
for r in 1 2 3; do
  bash scripts/device-sm90.sh masks > /dev/null 2>&1
  mkdir -p "$OUT/masks-run$r"; mv "$OUT"/fa-bench-*masks* "$OUT/masks-run$r/"
  python3 scripts/masks_table.py "$OUT"/masks-run$r/fa-bench-h100-sm90-masks-d64.json "$OUT"/masks-run$r/fa-bench-h100-sm90-masks-d128.json \
    > "$OUT/masks-run$r/masks-table.txt" 2>&1
  echo "run $r"; cat "$OUT/masks-run$r/masks-table.txt"
  grep -h -c "check.*fail\|FAIL" "$OUT"/masks-run$r/fa-bench-sm90-masks-d*.txt | tr '\n' ' '; echo "(check failures per file)"
done
echo "masks done at $(( $(date +%s) - t0 )) s"
left=$(( 570 - ($(date +%s) - t0) ))
timeout $(( left > 40 ? left - 20 : 20 )) build-h100/tests/flash_gpu_tests \
  --gtest_filter='GpuWorkspace*:*GpuEdges.BlockSparse*/sm90:Random/GpuSweep.MatchesReference/sm90_*' \
  > "$OUT/gpu-tests-s52-4.log" 2>&1
echo "gpu tests: exit $? ($(grep -c '\[       OK \]' "$OUT/gpu-tests-s52-4.log") ok, $(grep -c '\[  FAILED  \]' "$OUT/gpu-tests-s52-4.log") failed lines)"; grep -E "FAILED|PASSED|tests ran" "$OUT/gpu-tests-s52-4.log" | tail -5; tail -2 "$OUT/gpu-tests-s52-4.log"
cd "$OUT" && tar czf s52-4.tgz masks-run* *.log 2>/dev/null; ls -la s52-4.tgz
echo "end at $(( $(date +%s) - t0 )) s"
