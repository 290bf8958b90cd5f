#!/usr/bin/env bash
# s68-1: the first call on the H200 (the device tool lends H200s only since this session; no H100): build, issue 7's
# masks grid at batch 2 (the grid of sessions 12-67) and on the standard grid (anchors.md: batch x seqlen = 16384,
# hidden 2048: batch 4 at 4k, 2 at 8k, 1 at 16k), then the sm90 mask GPU tests with what time is left.
# Every step runs under one deadline so the call ends inside its device time; results land in $OUT as they come.
# Run as: OUT=$OUT bash bench_results/h200-2026-11-28/s68/scripts/s68-1.sh
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
T0=$(date +%s); DEADLINE=$((T0 + ${BUDGET_S:-280}))
el() { echo $(( $(date +%s) - T0 )); }
rem() { local r=$(( DEADLINE - $(date +%s) )); (( r > $1 )) && r=$1; (( r < 1 )) && r=1; echo $r; }
R=/tmp/s68-1; mkdir -p $R
pack() { (cd /tmp && tar czf $OUT/s68-1.tgz s68-1); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit,memory.total --format=csv > $R/smi-before.txt 2>&1
cat $R/smi-before.txt
timeout $(rem 150) bash scripts/device-sm90.sh build > $R/build-summary.txt 2>&1 || { cat $R/build-summary.txt; tail -40 $OUT/build.log; exit 1; }
mv $OUT/nvidia-smi.csv $OUT/build.log $R/ 2>/dev/null; pack; head -1 $R/build-summary.txt; echo "t=$(el) s"
B=build-h100/cli/fa-bench
MASKS="none;causal;window:256,0;block-sparse:0.1:128;block-sparse:0.25:128;block-sparse:0.5:128"
run() {  # run NAME BATCH SEQLENS D CAP
  timeout $(rem $5) $B run --dtype bf16 --head-dim $4 --heads $((2048 / $4)) --batch $2 --seqlen $3 --algo sm90 --check \
    --mask "$MASKS" --warmup 5 --reps 30 --no-progress --json $R/$1.json > $R/$1.txt 2>&1
  echo "$1: exit $? t=$(el) s"; pack
}
# Issue 7's grid as every session since 12 ran it (batch 2, 4k-16k).
run b2-d128 2 4096,8192,16384 128 80
run b2-d64 2 4096,8192,16384 64 80
python3 scripts/masks_table.py $R/b2-d64.json $R/b2-d128.json 2>&1 | tee $R/b2-table.txt
# The standard grid's other two rows (8k is batch 2 in both).
for d in 128 64; do run std-d$d-4k 4 4096 $d 40; run std-d$d-16k 1 16384 $d 40; done
for f in $R/std-*.json; do python3 scripts/masks_table.py $f; done 2>&1 | tee $R/std-table.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv > $R/smi-after.txt 2>&1
# The sm90 mask tests (fp64 reference, odd sizes, poisoned outputs) with what is left.
timeout $(rem 120) build-h100/tests/flash_gpu_tests --gtest_filter='Algorithms/GpuEdges.SlidingWindows/sm90:Algorithms/GpuEdges.TilesThatSeeNoKey/sm90:Algorithms/GpuEdges.EmptyRowsAndAlignments/sm90:Algorithms/GpuEdges.ShortLastTiles/sm90:*BlockSparse*/sm90:*BlockSparseD64TwoRings*' \
  > $R/gpu-tests-masks.log 2>&1
echo "gpu tests: exit $? t=$(el) s"; grep -E '^\[ +(OK|FAILED|PASSED) ' $R/gpu-tests-masks.log | tail -30
pack; cp $R/b2-table.txt $R/std-table.txt $OUT/; echo "packed t=$(el) s"
