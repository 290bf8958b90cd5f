#!/usr/bin/env bash
# s61-12: s61-11 put the slow mode outside the kernel (ncu: 786 us in A and S). fa-bench now times each call's host
# side (host_call_us): A (8k alone) and S (1k first), with the flush and without, two rounds.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
bash scripts/device-sm90.sh build 2>&1 | grep -E "phase build|build:" | head -3
B=build-h100/cli/fa-bench
C="--dtype bf16 --head-dim 128 --heads 16 --batch 2 --algo sm90 --no-progress --warmup 5 --reps 30 --mask none;block-sparse:0.5:128;block-sparse:0.1:128"
show() { python3 -c "
import json
for x in json.load(open('$1'))['results']:
    print('  %-12s %5d %-22s %.4f ms  host us %s / max %s  clock %s' % ('$2', x['seqlen_q'], x['mask'], x['time_ms_median'], '%.1f' % x['host_call_us_median'] if x.get('host_call_us_median') is not None else None, '%.1f' % x['host_call_us_max'] if x.get('host_call_us_max') is not None else None, x.get('sm_clock_mhz_median')))"; }
for r in 1 2; do
  timeout 60 $B run $C --seqlen 8192 --json $OUT/x.json >/dev/null 2>&1; show $OUT/x.json A$r
  timeout 60 $B run $C --seqlen 1024,8192 --json $OUT/x.json >/dev/null 2>&1; show $OUT/x.json S$r
  timeout 60 $B run $C --seqlen 8192 --no-flush --json $OUT/x.json >/dev/null 2>&1; show $OUT/x.json A-noflush$r
done
rm -f $OUT/x.json
echo "end at $(( $(date +%s) - t0 )) s"
