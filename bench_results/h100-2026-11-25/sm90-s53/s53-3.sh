#!/usr/bin/env bash
# s53-3: DRAM bytes of d64 and d128 production at 1k, dense and causal (ncu, L2 flushed before each launch), against
# Q + K + V once (96 MB at d64 and d128 on the standard grid... 1k: 64 MB each of Q, K, V = 192 MB).
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
[ -f build-h100/build.ninja ] || bash scripts/device-sm90.sh build-dev 2>&1 | tail -1
B=build-h100/libflash/cuda/sm90/sm90_dev
M="dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum"
for d in d64 d128; do
  SM90_DEV_ONLY="(prod" SM90_DEV_PROBLEMS="1024" timeout 200 ncu --clock-control none --kernel-name regex:"fwd_kernel|top_rows" \
    --launch-count 40 --metrics "$M" $B 0 $d > $OUT/ncu-$d-prod-1k.txt 2>&1
  echo "ncu $d exit $?"
  python3 - $OUT/ncu-$d-prod-1k.txt <<'PY'
import re, sys
name = None
rows = []
for line in open(sys.argv[1]):
    m = re.match(r"\s\s(\S.*?)\(Args\)|\s\s(void \S+)", line)
    if line.startswith("  ") and not line.startswith("    ") and "Context" in line:
        name = line.strip().split("(Args)")[0][-60:]
        rows.append([name])
    elif "dram__bytes_read" in line or "duration" in line:
        rows[-1].append(line.split()[-2] + line.split()[-1])
for r in rows: print(" | ".join(r))
PY
done
