#!/usr/bin/env bash
# s61-1: block-sparse tile order with heads innermost (LIBFLASH_SM90_BH_GROUP = G: groups of G (batch, head) pairs whose
# query blocks interleave) against production's (batch, head)-major order. Correctness: the block-sparse GPU tests
# under G = 5 and 16. Speed: fa-bench (dirty flush), d128 and d64, 4k and 8k, G = 0 / 16 / 4 / 32, three passes.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
bash scripts/device-sm90.sh build 2>&1 | grep -E "phase build|build:" | head -3
echo "built at $(( $(date +%s) - t0 )) s"
T=build-h100/tests/flash_gpu_tests
for g in 5 16; do
  LIBFLASH_SM90_BH_GROUP=$g timeout 200 $T --gtest_filter='*BlockSparse*/sm90:*BlockSparseD64TwoRings*' > $OUT/gpu-tests-sparse-g$g.log 2>&1
  echo "sparse tests G=$g exit $? at $(( $(date +%s) - t0 )) s"; grep -E "FAILED|PASSED|tests ran" $OUT/gpu-tests-sparse-g$g.log | tail -3
done
B=build-h100/cli/fa-bench
for pass in 1 2 3; do
  for g in 0 16 4 32; do
    if [ $g -gt 0 ]; then export LIBFLASH_SM90_BH_GROUP=$g; else unset LIBFLASH_SM90_BH_GROUP; fi
    chk=""; [ $pass = 1 ] && chk="--check"
    for d in 128 64; do
      timeout 120 $B run --dtype bf16 --head-dim $d --heads 16 --batch 2 --seqlen 4096,8192 --algo sm90 $chk \
        --mask "none;block-sparse:0.1:128;block-sparse:0.25:128;block-sparse:0.5:128" --warmup 5 --reps 30 --no-progress \
        --json "$OUT/ord-d$d-g$g-p$pass.json" > /dev/null 2>&1 || echo "d$d g$g p$pass failed"
    done
  done
  echo "pass $pass at $(( $(date +%s) - t0 )) s"
done
unset LIBFLASH_SM90_BH_GROUP
python3 - "$OUT" <<'PY'
import json, sys, glob, re, statistics
d = sys.argv[1]
rows = {}
chk = []
for f in sorted(glob.glob(d + "/ord-d*-g*-p*.json")):
    m = re.search(r"ord-d(\d+)-g(\d+)-p(\d)", f); hd, g, p = m.groups()
    for x in json.load(open(f))["results"]:
        rows.setdefault((hd, x["seqlen_q"], x["mask"], g), {})[p] = x["time_ms_median"]
        if x.get("check_passed") is False or (x.get("error") is not None): chk.append((f, x["mask"], x.get("error")))
print("check failures:", chk if chk else "none")
for hd in ["128", "64"]:
    for n in [4096, 8192]:
        dense = rows[(hd, n, "none", "0")]
        for mk in ["block-sparse:0.1:128", "block-sparse:0.25:128", "block-sparse:0.5:128"]:
            base = rows[(hd, n, mk, "0")]
            for g in ["0", "16", "4", "32"]:
                v = rows.get((hd, n, mk, g), {})
                print("d%-3s %5d %-22s G%-3s ms %s  /dense %s  /G0 %s" % (hd, n, mk, g,
                      " ".join("%.4f" % v[p] for p in sorted(v)),
                      " ".join("%.4f" % (v[p] / dense[p]) for p in sorted(v)),
                      " ".join("%.4f" % (v[p] / base[p]) for p in sorted(v))))
PY
tar czf $OUT/ord-s61-1.tgz -C $OUT $(cd $OUT && ls ord-*.json) && rm -f $OUT/ord-*.json
echo "end at $(( $(date +%s) - t0 )) s"
