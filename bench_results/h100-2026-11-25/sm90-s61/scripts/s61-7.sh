#!/usr/bin/env bash
# s61-7: the first case's slow mode (s61-5 / s61-6: a process's first shape runs block-sparse ~10% slower at 8k).
# fa-bench with dev switches (cli/src/device.cpp): F = the flush buffer allocated at start-up, P = 512 MB allocated and
# freed at start-up, K = 128 MB allocated at start-up and kept; S = a 1k case first (the fast control), A = alone.
# 8k d128 (A F P K S), then 4k d128 and d64 (A F S), three rounds.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
bash scripts/device-sm90.sh build 2>&1 | grep -E "phase build|build:" | head -3
B=build-h100/cli/fa-bench
run() {  # tag d seqlens mask env...
  local tag=$1 d=$2 n=$3 m=$4; shift 4
  env "$@" timeout 60 $B run --dtype bf16 --head-dim $d --heads $((2048 / d)) --batch 2 --algo sm90 --no-progress \
    --warmup 5 --reps 30 --seqlen $n --mask "$m" --json $OUT/sm-$tag.json >/dev/null 2>&1 || echo "$tag failed"
}
M8="none;block-sparse:0.5:128;block-sparse:0.1:128"
M4="none;block-sparse:0.1:128;block-sparse:0.25:128;block-sparse:0.5:128"
for r in 1 2 3; do
  run 8A-d128-r$r 128 8192 "$M8" X=1
  run 8F-d128-r$r 128 8192 "$M8" FA_BENCH_DEV_FLUSH_EARLY=1
  run 8P-d128-r$r 128 8192 "$M8" FA_BENCH_DEV_PREALLOC_MB=512
  run 8K-d128-r$r 128 8192 "$M8" FA_BENCH_DEV_KEEP_MB=128
  run 8S-d128-r$r 128 1024,8192 "$M8" X=1
  for d in 128 64; do
    run 4A-d$d-r$r $d 4096 "$M4" X=1
    run 4F-d$d-r$r $d 4096 "$M4" FA_BENCH_DEV_FLUSH_EARLY=1
    run 4S-d$d-r$r $d 1024,4096 "$M4" X=1
  done
  echo "round $r at $(( $(date +%s) - t0 )) s"
done
python3 - "$OUT" <<'PY' | tee $OUT/slowmode-s61-7.txt
import json, sys, glob
fs = sorted(glob.glob(sys.argv[1] + "/sm-*.json"), key=lambda f: (f.split("sm-")[1][0], f.split("-")[-2], f.split("sm-")[1][1], f))
for f in fs:
    tag = f.split("/")[-1][3:-5]
    res = [x for x in json.load(open(f))["results"] if x["seqlen_q"] in (4096, 8192)]
    dense = [x["time_ms_median"] for x in res if x["mask"] == "none"][0]
    out = ["dense %.4f" % dense]
    for x in res:
        if x["mask"] == "none": continue
        out.append("%s %.4f /d %.4f" % (x["mask"][13:17], x["time_ms_median"], x["time_ms_median"] / dense))
    print("%-12s %s" % (tag, "  ".join(out)))
PY
tar czf $OUT/slowmode-s61-7.tgz -C $OUT $(cd $OUT && ls sm-*.json) && rm -f $OUT/sm-*.json
echo "end at $(( $(date +%s) - t0 )) s"
