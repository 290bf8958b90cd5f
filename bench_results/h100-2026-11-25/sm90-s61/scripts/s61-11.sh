#!/usr/bin/env bash
# s61-11: the slow mode again. (1) fa-bench A (8k alone, dense then s = .5) and S (1k first) without the flush, two
# rounds. (2) ncu (one pass: duration, clock, DRAM bytes) on every fwd_kernel launch of A's and S's 8k cases: is the
# slow mode inside the kernel?
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
[ -x build-h100/cli/fa-bench ] || bash scripts/device-sm90.sh build 2>&1 | grep -E "phase build|build:" | head -3
B=build-h100/cli/fa-bench
C="--dtype bf16 --head-dim 128 --heads 16 --batch 2 --algo sm90 --no-progress --warmup 5 --reps 30 --mask none;block-sparse:0.5:128"
show() { python3 -c "
import json
print('  $2', '  '.join('%d %s %.4f' % (x['seqlen_q'], x['mask'][13:16] or 'dense', x['time_ms_median']) for x in json.load(open('$1'))['results']))"; }
for r in 1 2; do
  timeout 60 $B run $C --seqlen 8192 --json $OUT/x.json >/dev/null 2>&1; show $OUT/x.json A$r
  timeout 60 $B run $C --seqlen 8192 --no-flush --json $OUT/x.json >/dev/null 2>&1; show $OUT/x.json A-noflush$r
  timeout 60 $B run $C --seqlen 1024,8192 --no-flush --json $OUT/x.json >/dev/null 2>&1; show $OUT/x.json S-noflush$r
done
M=gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,dram__bytes_read.sum,dram__bytes_write.sum
for v in A:8192:0 S:1024,8192:0; do
  IFS=: read -r tag n skip <<< "$v"
  timeout 240 ncu --cache-control none --clock-control none --kernel-name regex:fwd_kernel --launch-skip $skip --launch-count 300 \
    --metrics $M --csv $B run $C --seqlen $n > $OUT/ncu11-$tag.csv 2>&1
  echo "ncu $tag exit $? at $(( $(date +%s) - t0 )) s"
  python3 - $OUT/ncu11-$tag.csv $tag <<'PY'
import csv, io, sys
lines = open(sys.argv[1]).read().splitlines()
st = next((i for i, l in enumerate(lines) if l.startswith('"ID"')), None)
if st is None: print("\n".join(lines[-10:])); sys.exit()
by = {}
for r in csv.DictReader(io.StringIO("\n".join(lines[st:]))):
    d = by.setdefault(int(r["ID"]), {"name": r["Kernel Name"][:60], "grid": r.get("Grid Size", "")})
    d[r["Metric Name"]] = float(r["Metric Value"].replace(",", ""))
runs = []  # consecutive launches of one kernel name
for k in sorted(by):
    d = by[k]
    if runs and runs[-1][0] == d["name"]: runs[-1][1].append(d)
    else: runs.append((d["name"], [d]))
for name, ds in runs:
    t = sorted(x["gpu__time_duration.sum"] / 1e3 for x in ds)
    clk = sorted(x["sm__cycles_elapsed.avg.per_second"] / 1e6 for x in ds)
    rd = sorted(x["dram__bytes_read.sum"] / 1e6 for x in ds)
    print("%s %3d launches of %s: us median %.1f [%.1f-%.1f]  MHz %.0f  DRAM read MB %.1f" % (sys.argv[2], len(ds), name, t[len(t)//2], t[0], t[-1], clk[len(clk)//2], rd[len(rd)//2]))
PY
done
rm -f $OUT/x.json; gzip -f $OUT/ncu11-*.csv
echo "end at $(( $(date +%s) - t0 )) s"
