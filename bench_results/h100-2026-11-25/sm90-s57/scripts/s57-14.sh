#!/usr/bin/env bash
# s57-14: the final revision (v85, v86, v87): issue 7's fa-bench masks twice.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
bash scripts/device-sm90.sh build 2>&1 | grep -E "phase build|build:" | head -3
export PYTHONPATH=bindings/python:scripts LIBFLASH_PATH=build-h100 PYTHONUNBUFFERED=1
for r in 1 2; do
  bash scripts/device-sm90.sh masks > /dev/null 2>&1
  mkdir -p "$OUT/masks-s57-14-run$r"; mv "$OUT"/fa-bench-*masks* "$OUT/masks-s57-14-run$r/"
  python3 scripts/masks_table.py "$OUT"/masks-s57-14-run$r/fa-bench-h100-sm90-masks-d64.json "$OUT"/masks-s57-14-run$r/fa-bench-h100-sm90-masks-d128.json \
    > "$OUT/masks-s57-14-run$r/masks-table.txt" 2>&1
  echo "masks run $r at $(( $(date +%s) - t0 )) s"; cat "$OUT/masks-s57-14-run$r/masks-table.txt"
  python3 - "$OUT/masks-s57-14-run$r" <<'PY'
import json, sys
for d in (64, 128):
    rows = json.load(open("%s/fa-bench-h100-sm90-masks-d%d.json" % (sys.argv[1], d)))["results"]
    t = {(x["seqlen_q"], x["mask"]): x["time_ms_median"] for x in rows}
    print("d%d 4k exact:" % d, " ".join("%s %.4f" % (m.split(":")[1], t[(4096, m)] / t[(4096, "none")]) for m in
          ["block-sparse:0.1:128", "block-sparse:0.25:128", "block-sparse:0.5:128"]), " ms:", " ".join("%.4f" % t[(4096, m)] for m in
          ["none", "block-sparse:0.1:128", "block-sparse:0.25:128", "block-sparse:0.5:128"]), " check:", all(x.get("check_passed", True) for x in rows))
PY
done
cd "$OUT" && tar czf s57-14-results.tgz masks-s57-14-run* && rm -rf masks-s57-14-run*
echo "end at $(( $(date +%s) - t0 )) s"
