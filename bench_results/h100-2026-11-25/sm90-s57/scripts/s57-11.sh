#!/usr/bin/env bash
# s57-11: v86 (the two-ring kernel's single warpgroup by shifts): the block-sparse GPU tests on sm90 (and the two-ring
# test on every algorithm), compute-sanitizer on the two-ring test, issue 7's fa-bench masks twice.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
bash scripts/device-sm90.sh build 2>&1 | grep -E "phase build|build:" | head -3
timeout 200 build-h100/tests/flash_gpu_tests --gtest_filter='*BlockSparse*/sm90:*BlockSparseD64TwoRings*' > $OUT/gpu-tests-sparse-s57-11.log 2>&1
echo "sparse tests exit $? at $(( $(date +%s) - t0 )) s"; grep -E "FAILED|PASSED|tests ran" $OUT/gpu-tests-sparse-s57-11.log | tail -4
bash scripts/device-sm90.sh sanitize-rings 2>&1 | grep -E "exit|SUMMARY" | head -6
echo "sanitizer at $(( $(date +%s) - t0 )) s"
export PYTHONPATH=bindings/python:scripts LIBFLASH_PATH=build-h100 PYTHONUNBUFFERED=1
for r in 1 2; do
  bash scripts/device-sm90.sh masks > /dev/null 2>&1
  mkdir -p "$OUT/masks-s57-11-run$r"; mv "$OUT"/fa-bench-*masks* "$OUT/masks-s57-11-run$r/"
  python3 scripts/masks_table.py "$OUT"/masks-s57-11-run$r/fa-bench-h100-sm90-masks-d64.json "$OUT"/masks-s57-11-run$r/fa-bench-h100-sm90-masks-d128.json \
    > "$OUT/masks-s57-11-run$r/masks-table.txt" 2>&1
  echo "masks run $r at $(( $(date +%s) - t0 )) s"; cat "$OUT/masks-s57-11-run$r/masks-table.txt"
  python3 - "$OUT/masks-s57-11-run$r" <<'PY'
import json, sys
for d in (64, 128):
    rows = json.load(open("%s/fa-bench-h100-sm90-masks-d%d.json" % (sys.argv[1], d)))["results"]
    t = {(x["seqlen_q"], x["mask"]): x["time_ms_median"] for x in rows}
    print("d%d 4k exact:" % d, " ".join("%s %.4f" % (m.split(":")[1], t[(4096, m)] / t[(4096, "none")]) for m in
          ["block-sparse:0.1:128", "block-sparse:0.25:128", "block-sparse:0.5:128"]), " ms:", " ".join("%.4f" % t[(4096, m)] for m in
          ["none", "block-sparse:0.1:128", "block-sparse:0.25:128", "block-sparse:0.5:128"]), " check:", all(x.get("check_passed", True) for x in rows))
PY
done
cd "$OUT" && tar czf s57-11-results.tgz masks-s57-11-run* sanitizer-rings-* && rm -rf masks-s57-11-run*
echo "end at $(( $(date +%s) - t0 )) s"
