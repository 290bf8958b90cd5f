#!/usr/bin/env bash
# s55-6: v84 (the O store deferred to the next tile's prologue, d128's 128-key kernel) in production: the new library
# against 5836052's (built here from .devcarry/base.tgz), interleaved in one process (scripts/interleaved_libs.py, outputs
# bit-equal); issue 9's peers interleaved; the fast sm90 GPU tests, GpuSmallGrid and GpuTailSplit on the new build.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
bash scripts/device-sm90.sh build 2>&1 | grep -E "phase build|build:|error" | head -5
echo "new built at $(( $(date +%s) - t0 )) s"
rm -rf /tmp/base && mkdir -p /tmp/base && tar xzf .devcarry/base.tgz -C /tmp/base
( cd /tmp/base && cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASH_CUDA_ARCHS=90a -DFLASH_CUDA_PTX=OFF \
    -DFLASH_REVISION=5836052 > /tmp/base-cmake.log 2>&1 && ninja -C build flash > /tmp/base-build.log 2>&1 ) || { tail -20 /tmp/base-build.log; exit 1; }
echo "base built at $(( $(date +%s) - t0 )) s"
export PYTHONPATH=bindings/python:scripts LIBFLASH_PATH=build-h100 PYTHONUNBUFFERED=1
P="d128-dense-1k=128:1024:16:16:none,d128-dense-2k=128:2048:8:16:none,d128-dense-4k=128:4096:4:16:none,d128-causal-1k=128:1024:16:16:causal,d128-causal-2k=128:2048:8:16:causal,d128-causal-4k=128:4096:4:16:causal,d128-4k-b2=128:4096:2:16:none,d64-dense-1k=64:1024:16:32:none,d256-dense-1k=256:1024:16:8:none"
timeout 150 python3 scripts/interleaved_libs.py --base base=/tmp/base/build/libflash.so --reps 50 --problems "$P" --json $OUT/libs-s55-6.json > $OUT/libs-s55-6.txt 2>&1
echo "libs exit $? at $(( $(date +%s) - t0 )) s"; cat $OUT/libs-s55-6.txt
timeout 100 python3 scripts/interleaved_peers.py --icache warm --reps 30 --json $OUT/peers-warm-s55-6.json > $OUT/peers-warm-s55-6.txt 2>&1
echo "peers exit $? at $(( $(date +%s) - t0 )) s"; tail -31 $OUT/peers-warm-s55-6.txt
left=$(( 590 - ($(date +%s) - t0) ))
timeout $(( left > 30 ? left : 30 )) build-h100/tests/flash_gpu_tests --gtest_filter='*sm90*:GpuAuto*:GpuWorkspace*:GpuSmallGrid*:*GpuTailSplit*-*LongKeyRangesD128*:*GpuBackward*:*TwoRings*:*D64Windows*' > $OUT/gpu-tests-s55-6.log 2>&1
echo "tests exit $? ($(grep -c '\[       OK \]' $OUT/gpu-tests-s55-6.log) ok, $(grep -c '\[  FAILED  \]' $OUT/gpu-tests-s55-6.log) failed lines) at $(( $(date +%s) - t0 )) s"
grep -E "FAILED|PASSED|tests ran" $OUT/gpu-tests-s55-6.log | tail -8; grep "\[ RUN" $OUT/gpu-tests-s55-6.log | tail -1
