#!/usr/bin/env bash
# s57-6: issue 9's own method once more (fa-bench, then ../shared/bench/torch_sdpa.py in the same run: device-sm90.sh bench
# peers table), production kernels with v85.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
bash scripts/device-sm90.sh build 2>&1 | grep -E "phase build|build:" | head -3
mkdir -p $OUT/table-s57-6; OUT=$OUT/table-s57-6 bash scripts/device-sm90.sh bench peers table > $OUT/table-s57-6/phases.log 2>&1
echo "table at $(( $(date +%s) - t0 )) s"; head -40 $OUT/table-s57-6/table.txt
cd "$OUT" && tar czf s57-6-results.tgz table-s57-6 && rm -rf table-s57-6
