// libflash/cuda/sm90/dev/io_floor_common.h -- what io_floor.cu and io_floor_tma.cu share (dev only): the CUDA error
// check and the block lists they move.
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
