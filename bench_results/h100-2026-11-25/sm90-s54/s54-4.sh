#!/usr/bin/env bash
# s54-4: the balanced grid in production (shapes.h balanced_grid): the new library against session 53's (d896b69, built
# here from .devcarry/base.tgz), interleaved in one process (scripts/interleaved_libs.py, outputs bit-equal); then
# the fast sm90 GPU tests on the new build.
set -uo pipefail
export OUT PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
bash scripts/device-sm90.sh build 2>&1 | grep -E "phase build|build:|error" | head -5
echo "new built at $(( $(date +%s) - t0 )) s"
rm -rf /tmp/base && mkdir -p /tmp/base && tar xzf .devcarry/base.tgz -C /tmp/base
( cd /tmp/base && cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASH_CUDA_ARCHS=90a -DFLASH_CUDA_PTX=OFF \
    -DFLASH_REVISION=d896b69 > /tmp/base-cmake.log 2>&1 && ninja -C build flash > /tmp/base-build.log 2>&1 ) || { tail -20 /tmp/base-build.log; exit 1; }
echo "base built at $(( $(date +%s) - t0 )) s"
export PYTHONPATH=bindings/python:scripts LIBFLASH_PATH=build-h100 PYTHONUNBUFFERED=1
P="d128-dense-1k=128:1024:16:16:none,d128-dense-2k=128:2048:8:16:none,d128-dense-4k=128:4096:4:16:none,d256-dense-1k=256:1024:16:8:none,d256-dense-2k=256:2048:8:8:none,d256-dense-4k=256:4096:4:8:none,d64-dense-1k=64:1024:16:32:none,d64-dense-2k=64:2048:8:32:none,d128-causal-1k=128:1024:16:16:causal,d128-4k-none=128:4096:2:16:none,d128-4k-bs.1=128:4096:2:16:0.1,d128-4k-bs.25=128:4096:2:16:0.25,d128-4k-bs.5=128:4096:2:16:0.5,d64-4k-none=64:4096:2:32:none,d64-4k-bs.25=64:4096:2:32:0.25"
timeout 200 python3 scripts/interleaved_libs.py --base base=/tmp/base/build/libflash.so --reps 50 --problems "$P" --json $OUT/libs-s54-4.json > $OUT/libs-s54-4.txt 2>&1
echo "libs exit $? at $(( $(date +%s) - t0 )) s"; cat $OUT/libs-s54-4.txt
left=$(( 590 - ($(date +%s) - t0) ))
timeout $(( left > 30 ? left : 30 )) build-h100/tests/flash_gpu_tests --gtest_filter='*sm90*:GpuAuto*:GpuWorkspace*-*GpuTailSplit*:*LongKeyRangesD128*:GpuSmallGrid*:*GpuBackward*:*TwoRings*:*D64Windows*' > $OUT/gpu-tests-s54-4.log 2>&1
echo "tests exit $? ($(grep -c '\[       OK \]' $OUT/gpu-tests-s54-4.log) ok, $(grep -c '\[  FAILED  \]' $OUT/gpu-tests-s54-4.log) failed lines) at $(( $(date +%s) - t0 )) s"
grep -E "FAILED|PASSED|tests ran" $OUT/gpu-tests-s54-4.log | tail -8
