#!/usr/bin/env bash
# s61-4: issue 7's block-sparse ratios on other shapes (production, fa-bench, dirty flush, no --check):
#   fa: FlashAttention-2/3's benchmark convention, 16k tokens (batch 4 / 2 / 1 at 4k / 8k / 16k), hidden 2048;
#   half: batch 2 and half issue 7's heads (d128 8, d64 16), the smaller problems.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
[ -x build-h100/cli/fa-bench ] || bash scripts/device-sm90.sh build 2>&1 | grep -E "phase build|build:" | head -3
B=build-h100/cli/fa-bench
M="none;block-sparse:0.1:128;block-sparse:0.25:128;block-sparse:0.5:128"
for d in 128 64; do
  h=$((2048 / d))
  for nb in 4096:4 8192:2 16384:1; do
    n=${nb%%:*}; b=${nb#*:}
    timeout 120 $B run --dtype bf16 --head-dim $d --heads $h --batch $b --seqlen $n --algo sm90 --mask "$M" \
      --warmup 5 --reps 30 --no-progress --json "$OUT/shape-fa-d$d-n$n.json" > /dev/null 2>&1 || echo "fa d$d n$n failed"
  done
  timeout 150 $B run --dtype bf16 --head-dim $d --heads $((h / 2)) --batch 2 --seqlen 4096,8192,16384 --algo sm90 --mask "$M" \
    --warmup 5 --reps 30 --no-progress --json "$OUT/shape-half-d$d.json" > /dev/null 2>&1 || echo "half d$d failed"
  echo "d$d at $(( $(date +%s) - t0 )) s"
done
python3 - "$OUT" <<'PY' | tee "$OUT/shapes-s61-4.txt"
import json, sys, glob
d = sys.argv[1]
rows = {}
for f in sorted(glob.glob(d + "/shape-*.json")):
    kind = f.split("shape-")[1].split("-")[0]
    for x in json.load(open(f))["results"]:
        rows[(kind, x["head_dim"], x["batch"], x["heads_q"], x["seqlen_q"], x["mask"])] = x["time_ms_median"]
print("shape            d    batch heads seqlen  dense ms   s=.1 (<=.15)   s=.25 (<=.30)  s=.5 (<=.55)")
for k in sorted(rows):
    if k[5] != "none": continue
    dense = rows[k]
    cells = []
    for s, lim in (("0.1", .15), ("0.25", .30), ("0.5", .55)):
        t = rows.get(k[:5] + ("block-sparse:%s:128" % s,))
        r = t / dense if t else float("nan")
        cells.append("%.4f %.4f%s" % (t or 0, r, " OVER" if r > lim else ""))
    print("%-15s %3d %6d %5d %6d  %8.4f   %s" % (k[0], k[1], k[2], k[3], k[4], dense, "   ".join(cells)))
PY
tar czf $OUT/shapes-s61-4.tgz -C $OUT $(cd $OUT && ls shape-*.json) && rm -f $OUT/shape-*.json
echo "end at $(( $(date +%s) - t0 )) s"
