#!/usr/bin/env bash
# s63-10: FlashAttention's benchmark convention at 4k (16k tokens: batch 4, hidden 2048), block-sparse against dense,
# two runs in separate processes, with --check.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
bash scripts/device-sm90.sh build 2>&1 | grep -E "build:" | head -2
mkdir -p $OUT/s63-10
for r in 1 2; do
  for d in 64 128; do
    timeout 150 build-h100/cli/fa-bench run --dtype bf16 --head-dim $d --heads $((2048 / d)) --batch 4 --seqlen 4096 --algo sm90 --check \
      --mask "none;block-sparse:0.1:128;block-sparse:0.25:128;block-sparse:0.5:128" --warmup 5 --reps 30 --no-progress \
      --json $OUT/s63-10/fb-fa-convention-d$d-run$r.json > $OUT/s63-10/fb-fa-convention-d$d-run$r.txt 2>&1
    python3 - $OUT/s63-10/fb-fa-convention-d$d-run$r.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
rows = d["results"]
dense = [x for x in rows if x["mask"] == "none"][0]
print(sys.argv[1].split("/")[-1], "dense %.4f ms" % dense["time_ms_median"],
      "  ".join("%s %.4f" % (x["mask"].split(":")[1], x["time_ms_median"] / dense["time_ms_median"]) for x in rows if x["mask"] != "none"))
PY
  done
done
grep -h "check" $OUT/s63-10/*.txt | tail -4
cd $OUT && tar czf s63-10.tgz s63-10 && rm -rf s63-10
