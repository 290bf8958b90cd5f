#!/usr/bin/env bash
# s62-1: the memory floor of issue 7's block-sparse cells (dev/io_floor.cu) against fa-bench on the same machine.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -o /tmp/io_floor libflash/cuda/sm90/dev/io_floor.cu || exit 1
/tmp/io_floor 60 2>&1 | tee $OUT/io-floor-s62-1-a.txt
bash scripts/device-sm90.sh build 2>&1 | grep -E "phase build|build:" | head -3
B=build-h100/cli/fa-bench
for d in 128 64; do
  timeout 200 $B run --dtype bf16 --head-dim $d --heads $((2048 / d)) --batch 2 --seqlen 4096 --algo sm90 \
    --mask "none;block-sparse:0.1:128;block-sparse:0.25:128;block-sparse:0.5:128" \
    --warmup 5 --reps 30 --no-progress --json $OUT/fb-d$d.json > $OUT/fb-d$d.txt 2>&1 || echo "d$d failed"
done
/tmp/io_floor 60 2>&1 | tee $OUT/io-floor-s62-1-b.txt
python3 - $OUT <<'PY' | tee $OUT/fb-s62-1.txt
import json, sys
for d in (128, 64):
    t = {x["mask"]: x["time_ms_median"] for x in json.load(open("%s/fb-d%d.json" % (sys.argv[1], d)))["results"]}
    dn = t["none"]
    print("d%d 4k dense %.4f ms  " % (d, dn) + "  ".join("s=%s %.4f ms (%.4f)" % (s, t["block-sparse:%s:128" % s], t["block-sparse:%s:128" % s] / dn) for s in ("0.1", "0.25", "0.5")))
PY
echo "end at $(( $(date +%s) - t0 )) s"
