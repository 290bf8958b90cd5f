#!/usr/bin/env bash
# s61-9: the slow mode needs the dense case first (s61-8: block-sparse alone was fast). Three rounds of d128 8k:
#   A  none;s.5;s.1 (slow in s61-5..7)      E  A with CUDA_MODULE_LOADING=EAGER
#   R  s.5;none;s.1 (sparse first)          S  A after a 1k case (fast control)
# then A once more with nvidia-smi sampling SM clock and power every 20 ms.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
[ -x build-h100/cli/fa-bench ] || bash scripts/device-sm90.sh build 2>&1 | grep -E "phase build|build:" | head -3
B=build-h100/cli/fa-bench
C="--dtype bf16 --head-dim 128 --heads 16 --batch 2 --algo sm90 --no-progress --warmup 5 --reps 30"
show() { python3 -c "
import json,sys
print('  $2', '  '.join('%s %.4f [%.4f-%.4f]' % (x['mask'][13:16] or 'dense', x['time_ms_median'], x['time_ms_min'], x['time_ms_max']) for x in json.load(open('$1'))['results'] if x['seqlen_q'] == 8192))"; }
for r in 1 2 3; do
  timeout 60 $B run $C --seqlen 8192 --mask "none;block-sparse:0.5:128;block-sparse:0.1:128" --json $OUT/x.json >/dev/null 2>&1; show $OUT/x.json A$r
  CUDA_MODULE_LOADING=EAGER timeout 60 $B run $C --seqlen 8192 --mask "none;block-sparse:0.5:128;block-sparse:0.1:128" --json $OUT/x.json >/dev/null 2>&1; show $OUT/x.json E$r
  timeout 60 $B run $C --seqlen 8192 --mask "block-sparse:0.5:128;none;block-sparse:0.1:128" --json $OUT/x.json >/dev/null 2>&1; show $OUT/x.json R$r
  timeout 60 $B run $C --seqlen 1024,8192 --mask "none;block-sparse:0.5:128;block-sparse:0.1:128" --json $OUT/x.json >/dev/null 2>&1; show $OUT/x.json S$r
done
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv,noheader -lms 20 > $OUT/smi-A.csv 2>&1 &
SMI=$!
sleep 0.5
timeout 60 $B run $C --seqlen 8192 --mask "none;block-sparse:0.5:128;block-sparse:0.1:128" --json $OUT/x.json >/dev/null 2>&1; show $OUT/x.json A-smi
sleep 0.3; kill $SMI
python3 - $OUT/smi-A.csv <<'PY'
import sys
rows = [l.split(", ") for l in open(sys.argv[1]) if l.count(",") >= 5]
busy = [r for r in rows if float(r[3].split()[0]) > 150]
print("samples", len(rows), "busy (>150 W)", len(busy))
for r in busy[::max(1, len(busy) // 40)]: print("  ", r[0][-12:], r[1], r[3], r[4], r[5])
PY
rm -f $OUT/x.json
echo "end at $(( $(date +%s) - t0 )) s"
