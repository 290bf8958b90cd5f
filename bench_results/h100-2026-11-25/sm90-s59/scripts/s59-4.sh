#!/usr/bin/env bash
# s59-4: (1) the late epilogue with the Q buffer released once the next tile's S_0 is done (Traits::kLateQEarly), with and
# without the adaptive order, sm90_dev paired with the dirty flush, three rounds of 50 reps at 4k s = .1; (2) issue 7's
# fa-bench masks twice on production (unchanged since session 57).
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader
[ -f build-h100/build.ninja ] || bash scripts/device-sm90.sh build-dev 2>&1 | tail -1
B=build-h100/libflash/cuda/sm90/sm90_dev
ninja -C build-h100 sm90_dev > $OUT/build-dev.log 2>&1 || { grep -A8 error $OUT/build-dev.log | head -30; exit 1; }
echo "built at $(( $(date +%s) - t0 )) s"
for r in 1 2 3; do
  SM90_DEV_FLUSH=256 SM90_DEV_REF="d128 bs (prod)" SM90_DEV_ONLY="d128 bs s59d" SM90_DEV_PROBLEMS="4096:0.1" timeout 60 $B 50 sparse 2>&1 | tee $OUT/dev-sparse-d128-s59-4-run$r.txt | grep -E "d128 bs|rror|FAIL"
  echo "round $r at $(( $(date +%s) - t0 )) s"
done
bash scripts/device-sm90.sh build 2>&1 | grep -E "phase build|build:" | head -3
export PYTHONPATH=bindings/python:scripts LIBFLASH_PATH=build-h100 PYTHONUNBUFFERED=1
for r in 1 2; do
  bash scripts/device-sm90.sh masks > /dev/null 2>&1
  mkdir -p "$OUT/masks-s59-4-run$r"; mv "$OUT"/fa-bench-*masks* "$OUT/masks-s59-4-run$r/"
  python3 scripts/masks_table.py "$OUT"/masks-s59-4-run$r/fa-bench-h100-sm90-masks-d64.json "$OUT"/masks-s59-4-run$r/fa-bench-h100-sm90-masks-d128.json \
    > "$OUT/masks-s59-4-run$r/masks-table.txt" 2>&1
  echo "masks run $r at $(( $(date +%s) - t0 )) s"; cat "$OUT/masks-s59-4-run$r/masks-table.txt"
  python3 - "$OUT/masks-s59-4-run$r" <<'PY'
import json, sys
for d in (64, 128):
    rows = json.load(open("%s/fa-bench-h100-sm90-masks-d%d.json" % (sys.argv[1], d)))["results"]
    t = {(x["seqlen_q"], x["mask"]): x["time_ms_median"] for x in rows}
    print("d%d 4k exact:" % d, " ".join("%s %.4f" % (m.split(":")[1], t[(4096, m)] / t[(4096, "none")]) for m in
          ["block-sparse:0.1:128", "block-sparse:0.25:128", "block-sparse:0.5:128"]), " check:", all(x.get("check_passed", True) for x in rows))
PY
done
cd "$OUT" && tar czf s59-4-results.tgz masks-s59-4-run* && rm -rf masks-s59-4-run*
echo "end at $(( $(date +%s) - t0 )) s"
