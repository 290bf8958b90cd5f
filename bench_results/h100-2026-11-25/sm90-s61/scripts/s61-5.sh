#!/usr/bin/env bash
# s61-5: is 8k s = .5's slow mode (s61-4: d128 .8685 ms, d64 1.1056 against .79 / 1.01 in the masks runs) a property of
# the process's allocations? fa-bench, production, dirty flush: A = 8k alone, B = 4k then 8k in one process,
# C = 8k alone with the masks run's full mask list; three rounds, both head dims.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
[ -x build-h100/cli/fa-bench ] || bash scripts/device-sm90.sh build 2>&1 | grep -E "phase build|build:" | head -3
B=build-h100/cli/fa-bench
for r in 1 2 3; do
  for d in 128 64; do
    h=$((2048 / d))
    C="--dtype bf16 --head-dim $d --heads $h --batch 2 --algo sm90 --warmup 5 --reps 30 --no-progress"
    timeout 60 $B run $C --seqlen 8192 --mask "none;block-sparse:0.5:128;block-sparse:0.1:128" --json $OUT/sm-A-d$d-r$r.json >/dev/null 2>&1 || echo "A d$d r$r failed"
    timeout 60 $B run $C --seqlen 4096,8192 --mask "none;block-sparse:0.5:128;block-sparse:0.1:128" --json $OUT/sm-B-d$d-r$r.json >/dev/null 2>&1 || echo "B d$d r$r failed"
    timeout 60 $B run $C --seqlen 8192 --mask "none;causal;window:256,0;block-sparse:0.1:128;block-sparse:0.25:128;block-sparse:0.5:128" --json $OUT/sm-C-d$d-r$r.json >/dev/null 2>&1 || echo "C d$d r$r failed"
  done
  echo "round $r at $(( $(date +%s) - t0 )) s"
done
python3 - "$OUT" <<'PY' | tee $OUT/slowmode-s61-5.txt
import json, sys, glob, re
for f in sorted(glob.glob(sys.argv[1] + "/sm-*.json"), key=lambda f: (re.search(r"-d(\d+)", f).group(1), f.split("sm-")[1][0], f[-7:])):
    tag = f.split("/")[-1][3:-5]
    res = json.load(open(f))["results"]
    dense = {x["seqlen_q"]: x["time_ms_median"] for x in res if x["mask"] == "none"}
    out = []
    for x in res:
        if x["seqlen_q"] != 8192 or not x["mask"].startswith("block-sparse"): continue
        out.append("%s %.4f [%.4f-%.4f] /dense %.4f" % (x["mask"][13:16], x["time_ms_median"], x["time_ms_min"], x["time_ms_max"], x["time_ms_median"] / dense[8192]))
    print("%-10s dense8k %.4f  %s" % (tag, dense[8192], "  ".join(out)))
PY
tar czf $OUT/slowmode-s61-5.tgz -C $OUT $(cd $OUT && ls sm-*.json) && rm -f $OUT/sm-*.json
echo "end at $(( $(date +%s) - t0 )) s"
