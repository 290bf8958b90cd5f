#!/usr/bin/env bash
# s66-3: issue 7's block-sparse cells with fa-bench's honest maps under FlashAttention's benchmark convention (16k tokens:
# batch 4 / 2 / 1 at 4k / 8k / 16k, hidden 2048), two runs; then fa-bench's masks grid once more (batch 2).
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
bash scripts/device-sm90.sh build 2>&1 | grep -E "^build:" | head -2
mkdir -p $OUT/s66-3
B=build-h100/cli/fa-bench
for r in 1 2; do
  for d in 64 128; do
    for nb in 4096:4 8192:2 16384:1; do
      n=${nb%:*}; b=${nb#*:}
      timeout 120 $B run --dtype bf16 --head-dim $d --heads $((2048 / d)) --batch $b --seqlen $n --algo sm90 --check \
        --mask "none;block-sparse:0.1:128;block-sparse:0.25:128;block-sparse:0.5:128" --warmup 5 --reps 30 --no-progress \
        --json $OUT/s66-3/fa-r$r-d$d-$n.json > /dev/null 2>&1 || echo "fa-bench d$d $n failed"
    done
  done
done
python3 - <<'PY'
import json, glob, os
out = os.environ["OUT"] + "/s66-3"
for f in sorted(glob.glob(out + "/fa-r*.json")):
    rows = json.load(open(f))["results"]
    t = {r["mask"]: r for r in rows}
    dense = t["none"]["time_ms_median"]
    cells = []
    for m in ("block-sparse:0.1:128", "block-sparse:0.25:128", "block-sparse:0.5:128"):
        r = t[m]; s = r["block_sparse"]["block_density"]; ratio = r["time_ms_median"] / dense
        cells.append("s=%s map %.4f: %.4f%s" % (m.split(":")[1], s, ratio, "" if ratio <= s + 0.05 else " OVER %.4f" % (s + 0.05)))
    chk = all(r.get("check_passed") for r in rows)
    print("%s b%d dense %.4f ms | %s | check %s" % (os.path.basename(f), rows[0]["batch"], dense, " | ".join(cells), chk))
PY
MASKS_RUNS=1 TAG=s66-3 bash scripts/device-sm90.sh masks-runs
cd $OUT && tar czf s66-3.tgz s66-3 && rm -rf s66-3
