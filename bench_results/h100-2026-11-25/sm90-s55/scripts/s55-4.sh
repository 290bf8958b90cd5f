#!/usr/bin/env bash
# s55-4: s55-3 again, the probes keeping their values alive (dev_keep_alive; s55-3's let ptxas drop the unread wgmmas):
# the epilogue left out, the prologue's softmax left out, both (d128), the epilogue left out (d64's pair, the two-ring
# kernel); sm90_dev, paired against production. Wrong results by design; an upper bound on what hiding that work could give.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
[ -f build-h100/build.ninja ] || bash scripts/device-sm90.sh build-dev 2>&1 | tail -1
B=build-h100/libflash/cuda/sm90/sm90_dev
ninja -C build-h100 sm90_dev > $OUT/build-dev.log 2>&1 || { grep -A8 error $OUT/build-dev.log | head -30; exit 1; }
echo "built at $(( $(date +%s) - t0 )) s"
export SM90_DEV_REF="(prod)"
SM90_DEV_ONLY="s55" SM90_DEV_PROBLEMS="1024,2048,4096,16384" timeout 150 $B 40 d128 2>&1 | tee $OUT/dev-d128-s55-4.txt
echo "d128 at $(( $(date +%s) - t0 )) s"
SM90_DEV_ONLY="s55" SM90_DEV_PROBLEMS="1024,4096,16384" timeout 150 $B 30 d64 2>&1 | tee $OUT/dev-d64-s55-4.txt
echo "d64 at $(( $(date +%s) - t0 )) s"
SM90_DEV_REF="3wg 2 rings" SM90_DEV_ONLY="2 rings" SM90_DEV_PROBLEMS="4096:0,4096:0.1,4096:0.25,4096:0.5" timeout 120 $B 40 sparse 2>&1 | tee $OUT/dev-sparse-s55-4.txt
echo "end at $(( $(date +%s) - t0 )) s"
