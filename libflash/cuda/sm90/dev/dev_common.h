// libflash/cuda/sm90/dev/dev_common.h -- what the standalone dev tools share (dev only, none built by CMake): the CUDA
// error check (all of them), the block lists io_floor.cu and io_floor_tma.cu move, and the GPU's nanosecond clock and the
// cache-flushing write that launch_gap.cu and launch_overhead.cu time with. (io_floor_common.h until session 63.)
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#define CK(x)                                                                                 \
  do {                                                                                        \
    cudaError_t e_ = (x);                                                                     \
    if (e_ != cudaSuccess) {                                                                  \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)

// Per query block, per_row distinct key blocks out of nb, random and sorted, one list for every (batch, head) as
// fa-bench's random patterns; on the device, query block by query block.
inline int* random_lists(int nb, int per_row, std::mt19937_64& rng) {
  std::vector<int> host, all(nb);
  for (int qb = 0; qb < nb; ++qb) {
    for (int j = 0; j < nb; ++j) all[j] = j;
    for (int t = 0; t < per_row; ++t) std::swap(all[t], all[t + int(rng() % uint64_t(nb - t))]);
    std::sort(all.begin(), all.begin() + per_row);
    host.insert(host.end(), all.begin(), all.begin() + per_row);
  }
  int* d = nullptr;
  CK(cudaMalloc(&d, host.size() * 4));
  CK(cudaMemcpy(d, host.data(), host.size() * 4, cudaMemcpyHostToDevice));
  return d;
}

// The GPU's nanosecond clock, the same on every SM.
__device__ __forceinline__ unsigned long long now_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Writes n 16-byte words (a flush of L2 by a kernel, as against cudaMemsetAsync). Its dynamic shared memory, if the
// launch gives it any, is never touched: the launch only sets the SMs' L1 / shared split.
__global__ void flush_write(uint4* buf, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    buf[i] = make_uint4(unsigned(i), 1u, 2u, 3u);
}
