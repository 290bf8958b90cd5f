#!/usr/bin/env bash
# s62-8: io_floor_tma (the d128 block-sparse kernel's own loads and rings, no arithmetic; a stand-in arithmetic by clock
# spins), io_floor's arrangements, and fa-bench's d128 4k s = .1 on the same machine.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -o /tmp/io_floor_tma libflash/cuda/sm90/dev/io_floor_tma.cu || exit 1
nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -o /tmp/io_floor libflash/cuda/sm90/dev/io_floor.cu || exit 1
timeout 60 /tmp/io_floor_tma 60 2>&1 | tee $OUT/io-floor-tma-s62-8-1.txt
timeout 60 /tmp/io_floor 40 2>&1 | tee $OUT/io-floor-s62-8.txt
bash scripts/device-sm90.sh build 2>&1 | grep -E "phase build|build:" | head -3
for r in 1 2; do
  timeout 200 build-h100/cli/fa-bench run --dtype bf16 --head-dim 128 --heads 16 --batch 2 --seqlen 4096,8192 --algo sm90 \
    --mask "none;block-sparse:0.1:128" --warmup 5 --reps 30 --no-progress --json $OUT/fb-s62-8-$r.json > /dev/null 2>&1
  python3 -c "
import json; t={(x['seqlen_q'], x['mask']): x['time_ms_median'] for x in json.load(open('$OUT/fb-s62-8-$r.json'))['results']}
for n in (4096, 8192): print('fa-bench d128 %d dense %.4f ms, s=.1 %.4f ms, ratio %.4f' % (n, t[(n,'none')], t[(n,'block-sparse:0.1:128')], t[(n,'block-sparse:0.1:128')]/t[(n,'none')]))" | tee -a $OUT/io-floor-tma-s62-8-1.txt
done
timeout 60 /tmp/io_floor_tma 60 2>&1 | tee $OUT/io-floor-tma-s62-8-2.txt
