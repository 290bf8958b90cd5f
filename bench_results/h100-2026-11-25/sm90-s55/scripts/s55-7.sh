#!/usr/bin/env bash
# s55-7: v84's checks and figures: compute-sanitizer's three tools on the balanced-grid test (d128 on 20 CTAs, several
# tiles a CTA: every deferred store, the last after the loop) and two sm90 sweep cases; issue 7's fa-bench masks (d128
# 4k's dense denominator is v84's); fa-bench then torch_sdpa.py (the issue's method); the sm90 backward tests (their
# forward is sm90's, LSE on) with the time left.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
bash scripts/device-sm90.sh build 2>&1 | grep -E "phase build|build:" | head -3
for tool in memcheck racecheck synccheck; do
  timeout 100 compute-sanitizer --tool $tool --error-exitcode 9 build-h100/tests/flash_gpu_tests --gtest_brief=1 \
    --gtest_filter='GpuSmallGrid.Sm90BalancedGrid:Random/GpuSweep.MatchesReference/sm90_1:Random/GpuSweep.MatchesReference/sm90_2' \
    > $OUT/sanitizer-s55-7-$tool.log 2>&1
  echo "compute-sanitizer $tool: exit $? ($(grep -cE 'ERROR SUMMARY: 0 errors|RACECHECK SUMMARY: 0 hazards' $OUT/sanitizer-s55-7-$tool.log) clean summaries) at $(( $(date +%s) - t0 )) s"
done
bash scripts/device-sm90.sh masks > /dev/null 2>&1
mkdir -p "$OUT/masks-s55-7"; mv "$OUT"/fa-bench-*masks* "$OUT/masks-s55-7/"
python3 scripts/masks_table.py "$OUT"/masks-s55-7/fa-bench-h100-sm90-masks-d64.json "$OUT"/masks-s55-7/fa-bench-h100-sm90-masks-d128.json > "$OUT/masks-s55-7/masks-table.txt" 2>&1
echo "masks at $(( $(date +%s) - t0 )) s"; cat "$OUT/masks-s55-7/masks-table.txt"
python3 - "$OUT/masks-s55-7" <<'PY'
import json, sys
for d in (64, 128):
    rows = json.load(open("%s/fa-bench-h100-sm90-masks-d%d.json" % (sys.argv[1], d)))["results"]
    t = {(x["seqlen_q"], x["mask"]): x["time_ms_median"] for x in rows}
    print("d%d 4k exact:" % d, " ".join("%s %.4f" % (m.split(":")[1], t[(4096, m)] / t[(4096, "none")]) for m in
          ["block-sparse:0.1:128", "block-sparse:0.25:128", "block-sparse:0.5:128"]), " check:", all(x.get("check_passed", True) for x in rows))
PY
mkdir -p $OUT/table-s55-7; OUT=$OUT/table-s55-7 bash scripts/device-sm90.sh bench peers table > $OUT/table-s55-7/phases.log 2>&1
echo "table at $(( $(date +%s) - t0 )) s"; head -40 $OUT/table-s55-7/table.txt
left=$(( 590 - ($(date +%s) - t0) ))
timeout $(( left > 20 ? left : 20 )) build-h100/tests/flash_gpu_tests --gtest_filter='*Backward*sm90*' > $OUT/gpu-tests-bwd-s55-7.log 2>&1
echo "backward tests exit $? ($(grep -c '\[       OK \]' $OUT/gpu-tests-bwd-s55-7.log) ok, $(grep -c '\[  FAILED  \]' $OUT/gpu-tests-bwd-s55-7.log) failed lines) at $(( $(date +%s) - t0 )) s"
grep -E "FAILED|PASSED" $OUT/gpu-tests-bwd-s55-7.log | tail -5; grep "\[ RUN" $OUT/gpu-tests-bwd-s55-7.log | tail -1
cd "$OUT" && tar czf s55-7-results.tgz masks-s55-7 table-s55-7 && rm -rf masks-s55-7 table-s55-7
