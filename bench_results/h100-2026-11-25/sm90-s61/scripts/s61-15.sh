#!/usr/bin/env bash
# s61-15: issue 7's masks grid with a 1k shape first in each process (supplementary: the first shape's ~1%, s61-7),
# against the protocol's grid (4k first), interleaved, two rounds. No --check (the protocol's runs check).
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
bash scripts/device-sm90.sh build 2>&1 | grep -E "phase build|build:" | head -3
B=build-h100/cli/fa-bench
for r in 1 2; do
  for v in proto:4096,8192,16384 warm1k:1024,4096,8192,16384; do
    tag=${v%%:*}; n=${v#*:}
    for d in 64 128; do
      timeout 200 $B run --dtype bf16 --head-dim $d --heads $((2048 / d)) --batch 2 --seqlen $n --algo sm90 \
        --mask "none;causal;window:256,0;block-sparse:0.1:128;block-sparse:0.25:128;block-sparse:0.5:128" \
        --warmup 5 --reps 30 --no-progress --json $OUT/m15-$tag-d$d-r$r.json > /dev/null 2>&1 || echo "$tag d$d r$r failed"
    done
  done
  echo "round $r at $(( $(date +%s) - t0 )) s"
done
python3 - $OUT <<'PY' | tee $OUT/warm1k-s61-15.txt
import json, glob, sys
for f in sorted(glob.glob(sys.argv[1] + "/m15-*.json")):
    t = {(x["seqlen_q"], x["mask"]): x["time_ms_median"] for x in json.load(open(f))["results"]}
    cells = []
    for n in (4096, 8192, 16384):
        dn = t[(n, "none")]
        cells.append("%dk %s causal %.3f" % (n // 1024, "/".join("%.4f" % (t[(n, "block-sparse:%s:128" % s)] / dn) for s in ("0.1", "0.25", "0.5")), t[(n, "causal")] / dn))
    print("%-22s %s" % (f.split("/")[-1][4:-5], "  ".join(cells)))
PY
tar czf $OUT/warm1k-s61-15.tgz -C $OUT $(cd $OUT && ls m15-*.json) && rm -f $OUT/m15-*.json
echo "end at $(( $(date +%s) - t0 )) s"
