#!/usr/bin/env bash
# s61-8: the first case's slow mode, inside the kernel or around it? d128 8k block-sparse s = .5 as the only mask:
# A = 8k alone, S = 1k then 8k, E = A with CUDA_MODULE_LOADING=EAGER (timing, two rounds); then ncu on A and S
# (--cache-control none, --clock-control none): the 8k kernel's duration, DRAM bytes, L2 hit rate, clock.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
[ -x build-h100/cli/fa-bench ] || bash scripts/device-sm90.sh build 2>&1 | grep -E "phase build|build:" | head -3
B=build-h100/cli/fa-bench
C="--dtype bf16 --head-dim 128 --heads 16 --batch 2 --algo sm90 --no-progress --warmup 5 --reps 30 --mask block-sparse:0.5:128"
show() { python3 -c "
import json,sys
for x in json.load(open('$1'))['results']:
    print('   %-6s %5d %.4f [%.4f-%.4f]' % ('$2', x['seqlen_q'], x['time_ms_median'], x['time_ms_min'], x['time_ms_max']))"; }
for r in 1 2; do
  timeout 60 $B run $C --seqlen 8192 --json $OUT/a.json >/dev/null 2>&1; show $OUT/a.json A$r
  timeout 60 $B run $C --seqlen 1024,8192 --json $OUT/s.json >/dev/null 2>&1; show $OUT/s.json S$r
  CUDA_MODULE_LOADING=EAGER timeout 60 $B run $C --seqlen 8192 --json $OUT/e.json >/dev/null 2>&1; show $OUT/e.json E$r
done
rm -f $OUT/a.json $OUT/s.json $OUT/e.json
M=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct,sm__cycles_elapsed.avg.per_second,lts__t_sectors_srcunit_tex_op_read.sum
for v in A:8192:5 S:1024,8192:40; do
  IFS=: read -r tag n skip <<< "$v"
  timeout 200 ncu --cache-control none --clock-control none --replay-mode application --kernel-name regex:fwd_kernel \
    --launch-skip $skip --launch-count 6 --metrics $M --csv $B run $C --seqlen $n > $OUT/ncu-$tag.csv 2>&1
  echo "ncu $tag exit $? at $(( $(date +%s) - t0 )) s"
  python3 - $OUT/ncu-$tag.csv $tag <<'PY'
import csv, io, sys
lines = open(sys.argv[1]).read().splitlines()
st = next((i for i, l in enumerate(lines) if l.startswith('"ID"')), None)
if st is None: print("\n".join(lines[-15:])); sys.exit()
rows = list(csv.DictReader(io.StringIO("\n".join(lines[st:]))))
by = {}
for r in rows: by.setdefault(r["ID"], {})[r["Metric Name"]] = (r["Metric Value"], r["Metric Unit"])
for k in sorted(by, key=int):
    print(sys.argv[2], k, "  ".join("%s=%s %s" % (m.split("__")[1][:28], v, u) for m, (v, u) in sorted(by[k].items())))
PY
done
echo "end at $(( $(date +%s) - t0 )) s"
