#!/usr/bin/env bash
# session 50, s50-4: issue 7's and issue 9's interleaved figures with every timed call's code cached (--icache warm, as
# do_bench and fa-bench time) and, for comparison in the same call, the rule before (mixed)
set -uo pipefail
bash scripts/device-sm90.sh build 2>&1 | grep -E "^build|phase" | tail -3
export PYTHONPATH=bindings/python LIBFLASH_PATH=build-h100 PYTHONUNBUFFERED=1
for ic in warm mixed; do
  echo "== masks $ic"
  timeout 200 python3 scripts/interleaved_masks.py --icache $ic --hdims 64,128 --seqlens 4096 --reps 40 --json $OUT/masks4k-$ic.json 2>&1 | tee $OUT/masks4k-$ic.txt | tail -4
done
echo "== masks warm 8k 16k"
timeout 200 python3 scripts/interleaved_masks.py --icache warm --hdims 64,128 --seqlens 8192,16384 --reps 20 --json $OUT/masks-long-warm.json 2>&1 | tee $OUT/masks-long-warm.txt | tail -6
echo "== peers mixed 1k 2k"
timeout 150 python3 scripts/interleaved_peers.py --icache mixed --seqlens 1024,2048 --reps 30 --json $OUT/peers-short-mixed.json > $OUT/peers-short-mixed.txt 2>&1
tail -14 $OUT/peers-short-mixed.txt
