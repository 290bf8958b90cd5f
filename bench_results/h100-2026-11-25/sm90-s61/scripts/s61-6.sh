#!/usr/bin/env bash
# s61-6: what puts d128 8k block-sparse in its slow mode (s61-5: 8k alone in a process ~10% slower than after 4k)?
# fa-bench, production, dirty flush, d128 batch 2 heads 16, three rounds of:
#   A  8k alone (s61-5's A)            W  8k alone, 200 warm-up calls      L  8k alone, 300 reps
#   S  1k then 8k (a small case first)  X  16k then 8k (a larger one first)  B  4k then 8k (s61-5's B)
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
[ -x build-h100/cli/fa-bench ] || bash scripts/device-sm90.sh build 2>&1 | grep -E "phase build|build:" | head -3
B=build-h100/cli/fa-bench
C="--dtype bf16 --head-dim 128 --heads 16 --batch 2 --algo sm90 --no-progress --mask none;block-sparse:0.5:128;block-sparse:0.1:128"
for r in 1 2 3; do
  timeout 60 $B run $C --seqlen 8192 --warmup 5 --reps 30 --json $OUT/sm-A-r$r.json >/dev/null 2>&1 || echo "A $r failed"
  timeout 60 $B run $C --seqlen 8192 --warmup 200 --reps 30 --json $OUT/sm-W-r$r.json >/dev/null 2>&1 || echo "W $r failed"
  timeout 60 $B run $C --seqlen 8192 --warmup 5 --reps 300 --json $OUT/sm-L-r$r.json >/dev/null 2>&1 || echo "L $r failed"
  timeout 60 $B run $C --seqlen 1024,8192 --warmup 5 --reps 30 --json $OUT/sm-S-r$r.json >/dev/null 2>&1 || echo "S $r failed"
  timeout 90 $B run $C --seqlen 16384,8192 --warmup 5 --reps 30 --json $OUT/sm-X-r$r.json >/dev/null 2>&1 || echo "X $r failed"
  timeout 60 $B run $C --seqlen 4096,8192 --warmup 5 --reps 30 --json $OUT/sm-B-r$r.json >/dev/null 2>&1 || echo "B $r failed"
  echo "round $r at $(( $(date +%s) - t0 )) s"
done
nvidia-smi --query-gpu=clocks.sm,clocks.mem,clocks.max.mem,pstate,power.draw,temperature.gpu --format=csv
python3 - "$OUT" <<'PY' | tee $OUT/slowmode-s61-6.txt
import json, sys, glob
for tag in "AWLSXB":
    for f in sorted(glob.glob(sys.argv[1] + "/sm-%s-r*.json" % tag)):
        res = json.load(open(f))["results"]
        out = []
        for x in res:
            if x["seqlen_q"] != 8192: continue
            out.append("%s %.4f [%.4f-%.4f]" % (x["mask"][13:16] or "dense", x["time_ms_median"], x["time_ms_min"], x["time_ms_max"]))
        print("%-8s %s" % (f.split("/")[-1][3:-5], "  ".join(out)))
PY
tar czf $OUT/slowmode-s61-6.tgz -C $OUT $(cd $OUT && ls sm-*.json) && rm -f $OUT/sm-*.json
echo "end at $(( $(date +%s) - t0 )) s"
