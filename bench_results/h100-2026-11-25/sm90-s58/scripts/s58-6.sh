#!/usr/bin/env bash
# s58-6: session 58's final figures on production (session 57's kernels, byte-identical): the block-sparse GPU tests,
# issue 9's peers interleaved and by the issue's own method, issue 7's fa-bench masks twice.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader
bash scripts/device-sm90.sh build 2>&1 | grep -E "phase build|build:" | head -3
T=build-h100/tests/flash_gpu_tests
timeout 200 $T --gtest_filter='*BlockSparse*/sm90:*BlockSparseD64TwoRings*' > $OUT/gpu-tests-sparse-s58-6.log 2>&1
echo "sparse tests exit $? at $(( $(date +%s) - t0 )) s"; grep -E "FAILED|PASSED|tests ran" $OUT/gpu-tests-sparse-s58-6.log | tail -4
export PYTHONPATH=bindings/python:scripts LIBFLASH_PATH=build-h100 PYTHONUNBUFFERED=1
timeout 100 python3 scripts/interleaved_peers.py --icache warm --reps 30 --json $OUT/peers-warm-s58-6.json > $OUT/peers-warm-s58-6.txt 2>&1
echo "peers exit $? at $(( $(date +%s) - t0 )) s"; tail -31 $OUT/peers-warm-s58-6.txt
mkdir -p $OUT/table-s58-6; OUT=$OUT/table-s58-6 bash scripts/device-sm90.sh bench peers table > $OUT/table-s58-6/phases.log 2>&1
echo "table at $(( $(date +%s) - t0 )) s"; head -40 $OUT/table-s58-6/table.txt
for r in 1 2; do
  bash scripts/device-sm90.sh masks > /dev/null 2>&1
  mkdir -p "$OUT/masks-s58-6-run$r"; mv "$OUT"/fa-bench-*masks* "$OUT/masks-s58-6-run$r/"
  python3 scripts/masks_table.py "$OUT"/masks-s58-6-run$r/fa-bench-h100-sm90-masks-d64.json "$OUT"/masks-s58-6-run$r/fa-bench-h100-sm90-masks-d128.json \
    > "$OUT/masks-s58-6-run$r/masks-table.txt" 2>&1
  echo "masks run $r at $(( $(date +%s) - t0 )) s"; cat "$OUT/masks-s58-6-run$r/masks-table.txt"
  python3 - "$OUT/masks-s58-6-run$r" <<'PY'
import json, sys
for d in (64, 128):
    rows = json.load(open("%s/fa-bench-h100-sm90-masks-d%d.json" % (sys.argv[1], d)))["results"]
    t = {(x["seqlen_q"], x["mask"]): x["time_ms_median"] for x in rows}
    print("d%d 4k exact:" % d, " ".join("%s %.4f" % (m.split(":")[1], t[(4096, m)] / t[(4096, "none")]) for m in
          ["block-sparse:0.1:128", "block-sparse:0.25:128", "block-sparse:0.5:128"]), " check:", all(x.get("check_passed", True) for x in rows))
PY
done
cd "$OUT" && tar czf s58-6-results.tgz masks-s58-6-run* table-s58-6 && rm -rf masks-s58-6-run* table-s58-6
echo "end at $(( $(date +%s) - t0 )) s"
