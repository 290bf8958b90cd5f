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

// Q, K, V and O buffers of `bytes` each for the memory-floor tools; Q, K and V filled with the bytes 1, 2 and 3 (never
// zeros), O left as it is.
inline void alloc_qkvo(size_t bytes, void** q, void** k, void** v, void** o) {
  void** bufs[4] = {q, k, v, o};
  for (int i = 0; i < 4; ++i) {
    CK(cudaMalloc(bufs[i], bytes));
    if (i < 3) CK(cudaMemset(*bufs[i], i + 1, bytes));
  }
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

// fa-bench's way of timing a call, for the dev tools: a buffer of twice L2 written before each call (the dirty flush:
// cudaMemsetAsync, a new byte each time; or the caller's own write of `flush`) and CUDA events round the call on a stream
// of its own.
struct EventTimer {
  int sms = 0, l2 = 0;
  size_t flush_bytes = 0;
  void* flush = nullptr;
  cudaStream_t stream;
  cudaEvent_t e0, e1;
  unsigned stamp = 0;
  explicit EventTimer(size_t flush_size = 0) {  // (0: twice L2, fa-bench's size)
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    CK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
    flush_bytes = flush_size > 0 ? flush_size : size_t(2) * size_t(l2);
    CK(cudaMalloc(&flush, flush_bytes));
    CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
  }
  void dirty_flush() { CK(cudaMemsetAsync(flush, ++stamp & 0xff, flush_bytes, stream)); }
  // Microseconds between the events recorded round launch() (which enqueues its work on `stream`); the launch's errors
  // are checked.
  template <class F>
  float time_us(F&& launch) {
    CK(cudaEventRecord(e0, stream));
    launch();
    CK(cudaEventRecord(e1, stream));
    CK(cudaEventSynchronize(e1));
    CK(cudaGetLastError());
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    return ms * 1000.f;
  }
};

// `warmup` untimed rounds, then `reps` timed ones of call(i) for every case i < n, each round starting one case further
// on (so every case takes every place in a round); the times per case.
template <class F>
std::vector<std::vector<float>> interleaved_rounds(size_t n, int reps, int warmup, F&& call) {
  for (int w = 0; w < warmup; ++w)
    for (size_t i = 0; i < n; ++i) call(i);
  std::vector<std::vector<float>> t(n);
  for (int r = 0; r < reps; ++r)
    for (size_t j = 0; j < n; ++j) {
      const size_t i = (j + size_t(r)) % n;
      t[i].push_back(call(i));
    }
  return t;
}

// The q-quantile of v as the tools print it: the element of rank floor(q n) of the sorted n (q = .5: the upper median).
inline float quantile(std::vector<float> v, double q) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(q * double(v.size())))];
}
