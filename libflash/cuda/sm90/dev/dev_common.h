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

// Per query block, per_row distinct key blocks out of nb, random and sorted, one list for every (batch, head), as
// fa-bench's random patterns were before session 66 (each row rounded on its own: 3 / 32 at 4k s = .1); on the device,
// query block by query block. fa_bench_lists below is the map fa-bench runs now.
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

// fa-bench's own random map (cli/src/mask.cpp make_random_block_pattern, session 66, rewritten here because the dev
// tools build with nvcc alone): round(density x all blocks) blocks, every query block floor or ceil of the mean (at
// least one), the longer rows and each row's blocks drawn from the same generator with the same seed mixing, so a
// (seqlen, block, density, seed) names the map fa-bench ran (its default seed is 24301). On the device: idx, query block
// qb's list at idx + qb x stride, cnt[qb] of them.
struct DevLists {
  int* idx = nullptr;
  int* cnt = nullptr;
  int stride = 0;
  long long total = 0;  // blocks in the whole map (one (batch, head))
  int cells = 0;        // query blocks x key blocks
};
inline long long fa_bench_map(int seqlen, int block, double density, uint64_t seed, std::vector<int>& cnt,
                              std::vector<int>& idx, int& stride) {
  const int nqb = (seqlen + block - 1) / block, nkb = nqb;
  const long long cells = 1ll * nqb * nkb;
  long long total = std::llround(density * double(cells));
  if (density > 0.0) total = std::max<long long>(total, nqb);
  total = std::min(total, cells);
  const int base = int(total / nqb), extra = int(total % nqb);
  stride = base + (extra > 0 ? 1 : 0);
  cnt.assign(nqb, base), idx.assign(size_t(nqb) * stride, 0);
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull ^ (uint64_t(seqlen) << 32) ^ uint64_t(seqlen) ^ uint64_t(block) << 56);
  if (extra > 0) {
    std::vector<int> rows(nqb);
    for (int qb = 0; qb < nqb; ++qb) rows[qb] = qb;
    for (int t = 0; t < extra; ++t) {
      const int r = t + int(rng() % uint64_t(nqb - t));
      std::swap(rows[t], rows[r]);
      ++cnt[rows[t]];
    }
  }
  std::vector<int> all(nkb);
  for (int qb = 0; qb < nqb; ++qb) {
    for (int j = 0; j < nkb; ++j) all[j] = j;
    for (int t = 0; t < cnt[qb]; ++t) std::swap(all[t], all[t + int(rng() % uint64_t(nkb - t))]);
    std::sort(all.begin(), all.begin() + cnt[qb]);
    std::copy(all.begin(), all.begin() + cnt[qb], idx.begin() + size_t(qb) * stride);
  }
  return total;
}
inline DevLists fa_bench_lists(int seqlen, int block, double density, uint64_t seed = 24301) {
  std::vector<int> cnt, idx;
  DevLists d;
  d.total = fa_bench_map(seqlen, block, density, seed, cnt, idx, d.stride);
  const int nqb = int(cnt.size());
  d.cells = nqb * nqb;
  CK(cudaMalloc(&d.idx, idx.size() * 4));
  CK(cudaMemcpy(d.idx, idx.data(), idx.size() * 4, cudaMemcpyHostToDevice));
  CK(cudaMalloc(&d.cnt, nqb * 4));
  CK(cudaMemcpy(d.cnt, cnt.data(), nqb * 4, cudaMemcpyHostToDevice));
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
