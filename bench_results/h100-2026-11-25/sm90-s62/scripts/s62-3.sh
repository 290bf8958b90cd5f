#!/usr/bin/env bash
# s62-3: io_floor's arrangements (tiles a SM x threads) and fa-bench d128 4k on the same machine, twice.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -o /tmp/io_floor libflash/cuda/sm90/dev/io_floor.cu || exit 1
bash scripts/device-sm90.sh build 2>&1 | grep -E "phase build|build:" | head -3
B=build-h100/cli/fa-bench
for r in 1 2; do
  /tmp/io_floor 60 2>&1 | tee $OUT/io-floor-s62-3-$r.txt
  timeout 200 $B run --dtype bf16 --head-dim 128 --heads 16 --batch 2 --seqlen 4096 --algo sm90 \
    --mask "none;block-sparse:0.1:128" --warmup 5 --reps 30 --no-progress --json $OUT/fb-$r.json > /dev/null 2>&1
  python3 -c "
import json; t={x['mask']: x['time_ms_median'] for x in json.load(open('$OUT/fb-$r.json'))['results']}
print('fa-bench d128 4k dense %.4f ms, s=.1 %.4f ms, ratio %.4f' % (t['none'], t['block-sparse:0.1:128'], t['block-sparse:0.1:128']/t['none']))" | tee -a $OUT/io-floor-s62-3-$r.txt
done
