#!/usr/bin/env bash
# s66-2: block-sparse tiles longest first (perf-log v88). GPU tests of the block-sparse cases; interleaved_order.py
# (maps with unequal rows, longest first against the plain order, LIBFLASH_SM90_SPARSE_ORDER_PLAIN); fa-bench's
# block-sparse cells in three arms, alternated: production (session 57's kernel), this build, this build in the plain
# order.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
mkdir -p $OUT/s66-2
bash scripts/device-sm90.sh build 2>&1 | grep -E "^build:" | head -2
grep -E "fwd_kernel.*(sparse|rings).*(spill|Used)|sparse.*bytes spill" $OUT/build.log | head -20 > $OUT/s66-2/ptxas-sparse.txt
# Production: the same tree with session 57's fwd_kernel.cuh and tma.h, the library and fa-bench only.
t0=$(date +%s)
mkdir -p /tmp/prod && cp -r CMakeLists.txt flash.h libflash capi cli bindings tests examples cmake /tmp/prod/ 2>/dev/null
cp .devcarry/prod/fwd_kernel.cuh /tmp/prod/libflash/cuda/sm90/fwd_kernel.cuh && cp .devcarry/prod/tma.h /tmp/prod/libflash/cuda/sm90/tma.h
(cd /tmp/prod && cmake -S . -B b -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASH_CUDA_ARCHS=90a -DFLASH_CUDA_PTX=OFF > $OUT/s66-2/prod-build.log 2>&1 \
  && ninja -C b -j16 fa-bench >> $OUT/s66-2/prod-build.log 2>&1) || { echo "prod build failed"; tail -20 $OUT/s66-2/prod-build.log; }
echo "prod build: $(( $(date +%s) - t0 )) s"
t0=$(date +%s)
timeout 240 build-h100/tests/flash_gpu_tests --gtest_filter='*BlockSparse*' --gtest_brief=1 > $OUT/s66-2/gpu-tests-sparse.txt 2>&1
echo "gpu tests (block-sparse): exit $? in $(( $(date +%s) - t0 )) s"; tail -4 $OUT/s66-2/gpu-tests-sparse.txt
export PYTHONPATH=bindings/python:scripts LIBFLASH_PATH=build-h100
t0=$(date +%s)
timeout 240 python3 scripts/interleaved_order.py --hdims 128,64 --seqlens 4096 --reps 20 --json $OUT/s66-2/order-4k.json 2>&1 | tee $OUT/s66-2/order-4k.txt
timeout 150 python3 scripts/interleaved_order.py --hdims 128 --seqlens 8192 --reps 10 --json $OUT/s66-2/order-8k.json 2>&1 | tee $OUT/s66-2/order-8k.txt
echo "order: $(( $(date +%s) - t0 )) s"
t0=$(date +%s)
for round in 1 2; do
  for arm in prod new plain; do
    B=build-h100/cli/fa-bench; [ $arm = prod ] && B=/tmp/prod/b/cli/fa-bench
    for d in 64 128; do
      env $([ $arm = plain ] && echo LIBFLASH_SM90_SPARSE_ORDER_PLAIN=1) timeout 120 $B run --dtype bf16 --head-dim $d --heads $((2048 / d)) --batch 2 \
        --seqlen 4096,8192,16384 --algo sm90 --mask "none;block-sparse:0.1:128;block-sparse:0.25:128;block-sparse:0.5:128" \
        --warmup 5 --reps 30 --no-progress --json $OUT/s66-2/grid-r$round-$arm-d$d.json > /dev/null 2>&1 || echo "fa-bench $arm d$d failed"
    done
  done
done
echo "grid: $(( $(date +%s) - t0 )) s"
python3 - <<'PY'
import json, glob, os
out = os.environ["OUT"] + "/s66-2"
for r in (1, 2):
    for d in (64, 128):
        t = {}
        for arm in ("prod", "new", "plain"):
            for row in json.load(open(f"{out}/grid-r{r}-{arm}-d{d}.json"))["results"]:
                if row.get("time_ms_median"):
                    t[(arm, row["seqlen_q"], row["mask"])] = (row["time_ms_median"], (row.get("block_sparse") or {}).get("block_density"))
        for n in (4096, 8192, 16384):
            cells = []
            for m in ("block-sparse:0.1:128", "block-sparse:0.25:128", "block-sparse:0.5:128"):
                s = t[("new", n, m)][1]
                cells.append("s=%s (%.4f): " % (m.split(":")[1], s) + " ".join(
                    "%s %.4f" % (arm, t[(arm, n, m)][0] / t[(arm, n, "none")][0]) for arm in ("prod", "new", "plain"))
                    + "  new/prod %.3f new/plain %.3f" % (t[("new", n, m)][0] / t[("prod", n, m)][0], t[("new", n, m)][0] / t[("plain", n, m)][0]))
            print(f"r{r} d{d} {n:5d} dense prod/new/plain %.4f/%.4f/%.4f ms | " % tuple(t[(a, n, "none")][0] for a in ("prod", "new", "plain")) + " | ".join(cells))
PY
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv > $OUT/s66-2/smi.txt
cd $OUT && tar czf s66-2.tgz s66-2 build.log && rm -rf s66-2
