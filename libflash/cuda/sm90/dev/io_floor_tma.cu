// libflash/cuda/sm90/dev/io_floor_tma.cu -- the d128 block-sparse kernel's loads with no arithmetic: the memory floor of
// its own arrangement. Dev only (not built by CMake):
//   nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -o io_floor_tma io_floor_tma.cu && ./io_floor_tma [reps] [qdefer]
// (Session 62's first run, s62-8, had the depths fixed at production's Q2 K2 V2; they are parameters since.)
//
// The skeleton of fwd_kernel.cuh's block-sparse producer and rings at d128: one CTA an SM, persistent; two Q buffers of
// 128 x 128 and rings of two K and two V stages of 128 keys (production's depths, each a parameter here); TMA in the
// 128-byte swizzle with 64-column boxes; [batch, seqlen, heads, head_dim] tensors with the axes sorted by stride, as
// tma.cpp encodes them. The consumers are reduced to one thread that waits for each block and releases it, and stores O
// from the Q buffer (O = Q). A Q loader thread and a K/V
// loader thread work ahead as in production. Optionally the consumer holds each K/V stage `block` cycles and each tile
// `tile` cycles more before its store (a stand-in for the arithmetic, spun on clock64), so the model can be set against
// the production kernel's time and the two costs told apart.
// Timed as io_floor.cu times: the dirty flush (2 x L2 written), CUDA events round the launch, cases interleaved, medians.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include "../fwd_kernel.cuh"
#include "dev_common.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

namespace {

using flash::sm90::mbar_arrive;
using flash::sm90::mbar_arrive_expect_tx;
using flash::sm90::mbar_init;
using flash::sm90::mbar_wait;
using flash::sm90::tma_load_4d;
using flash::sm90::tma_store_4d;

constexpr int kD = 128, kBlock = 128;
constexpr uint32_t kTileBytes = kBlock * kD * 2;  // 32 KB: a Q, K, V or O block
constexpr int kMaxDepth = 3;
constexpr uint32_t kBars = 7 * kTileBytes;           // up to 224 KB of buffers (Q, K and V depths summing to <= 7)
constexpr uint32_t kSmem = kBars + 6 * kMaxDepth * 8 + 1024;  // barriers + alignment slack

struct Params {
  CUtensorMap q, k, v, o;
  const int* lists;   // per query block, per_row key blocks (at lists + qb x per_row), or, where counts is non-null,
  const int* counts;  // counts[qb] of them at lists + qb x per_row (fa-bench's maps since session 66: per_row is then
  int per_row, nqb, heads, batch, tiles;  // the longest list)
  long long block_cycles, tile_cycles;
  int nq, nk, nv;  // buffers: Q (production 2), K stages, V stages (production 2 and 2)
  int last_scale;  // the stand-in arithmetic of each CTA's last tile, in quarters (4: as every tile; 0: none)
  int q_defer;     // session 63: the next tile's Q issued only after the K/V loader has issued this many blocks of
                   // the tile before it (0: as production, when its buffer is free; per_row: after the whole list)
};

// A 128 x 128 block as two 64-column boxes; coordinates in the map's order (column, head, row, batch). The PTX wrappers
// are the production kernel's (fwd_kernel.cuh), so the skeleton issues the same instructions.
__device__ __forceinline__ void load_block(uint32_t dst, const CUtensorMap* map, uint32_t bar, int head, int row, int b) {
#pragma unroll
  for (int half = 0; half < 2; ++half) tma_load_4d(dst + half * (kTileBytes / 2), map, bar, half * 64, head, row, b);
}
__device__ __forceinline__ void store_block(const CUtensorMap* map, uint32_t src, int head, int row, int b) {
#pragma unroll
  for (int half = 0; half < 2; ++half) tma_store_4d(map, src + half * (kTileBytes / 2), half * 64, head, row, b);
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}
__device__ __forceinline__ void spin(long long cycles) {
  if (cycles <= 0) return;
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}

__global__ void __launch_bounds__(384, 1) floor_tma(const __grid_constant__ Params p) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t base = (static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw)) + 1023) & ~1023u;
  // Barriers: q_full, q_empty, k_full, k_empty, v_full, v_empty, kMaxDepth each. Buffers: Q x nq, K x nk, V x nv.
  const uint32_t bars = base + kBars;
  auto bar = [&](int kind, int i) { return bars + (kind * kMaxDepth + i) * 8; };
  const uint32_t q0 = base, k0 = q0 + p.nq * kTileBytes, v0 = k0 + p.nk * kTileBytes;
  enum { kQFull, kQEmpty, kKFull, kKEmpty, kVFull, kVEmpty };
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __shared__ int kv_issued;  // blocks the K/V loader has issued (q_defer)
  if (threadIdx.x == 0) {
    kv_issued = 0;
    for (int i = 0; i < 6 * kMaxDepth; ++i) mbar_init(bars + i * 8, 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  }
  __syncthreads();
  if (lane != 0) return;
  auto decode = [&](int t, int& b, int& h, int& qb) {
    qb = t % p.nqb;
    const int bh = t / p.nqb;
    b = bh / p.heads, h = bh % p.heads;
  };
  auto count = [&](int qb) { return p.counts ? p.counts[qb] : p.per_row; };
  if (warp == 0) {  // the Q loader: the next tile's Q as soon as its buffer is free
    int it = 0, prev_start = 0, prev_count = 0;  // the tile before this one: its first block's ring index, its blocks
    for (int t = blockIdx.x; t < p.tiles; t += gridDim.x, ++it) {
      const int buf = it % p.nq;
      mbar_wait(bar(kQEmpty, buf), ((it / p.nq) & 1) ^ 1);
      int b, h, qb;
      decode(t, b, h, qb);
      if (p.q_defer > 0 && it > 0)
        while (*static_cast<volatile int*>(&kv_issued) < prev_start + min(p.q_defer, prev_count)) __nanosleep(64);
      if (it > 0) prev_start += prev_count;
      prev_count = count(qb);
      mbar_arrive_expect_tx(bar(kQFull, buf), kTileBytes);
      load_block(q0 + buf * kTileBytes, &p.q, bar(kQFull, buf), h, qb * kBlock, b);
    }
  } else if (warp == 1) {  // the K/V loader: the lists' blocks through the K and V rings
    int s = 0;
    for (int t = blockIdx.x; t < p.tiles; t += gridDim.x) {
      int b, h, qb;
      decode(t, b, h, qb);
      for (int j = 0; j < count(qb); ++j, ++s) {
        const int kb = p.lists[qb * p.per_row + j];
        const int ks = s % p.nk, vs = s % p.nv;
        mbar_wait(bar(kKEmpty, ks), ((s / p.nk) & 1) ^ 1);
        mbar_arrive_expect_tx(bar(kKFull, ks), kTileBytes);
        load_block(k0 + ks * kTileBytes, &p.k, bar(kKFull, ks), h, kb * kBlock, b);
        mbar_wait(bar(kVEmpty, vs), ((s / p.nv) & 1) ^ 1);
        mbar_arrive_expect_tx(bar(kVFull, vs), kTileBytes);
        load_block(v0 + vs * kTileBytes, &p.v, bar(kVFull, vs), h, kb * kBlock, b);
        *static_cast<volatile int*>(&kv_issued) = s + 1;
      }
    }
  } else if (warp == 4) {  // the consumer: wait, hold, release; O = Q stored from the Q buffer
    int it = 0, s = 0;
    for (int t = blockIdx.x; t < p.tiles; t += gridDim.x, ++it) {
      const int buf = it % p.nq;
      mbar_wait(bar(kQFull, buf), (it / p.nq) & 1);
      int b, h, qb;
      decode(t, b, h, qb);
      const bool last = t + int(gridDim.x) >= p.tiles;
      const long long blk = last ? p.block_cycles * p.last_scale / 4 : p.block_cycles;
      for (int j = 0; j < count(qb); ++j, ++s) {
        const int ks = s % p.nk, vs = s % p.nv;
        mbar_wait(bar(kKFull, ks), (s / p.nk) & 1);
        spin(blk / 2);
        mbar_arrive(bar(kKEmpty, ks));
        mbar_wait(bar(kVFull, vs), (s / p.nv) & 1);
        spin(blk - blk / 2);
        mbar_arrive(bar(kVEmpty, vs));
      }
      spin(last ? p.tile_cycles * p.last_scale / 4 : p.tile_cycles);
      store_block(&p.o, q0 + buf * kTileBytes, h, qb * kBlock, b);
      asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
      mbar_arrive(bar(kQEmpty, buf));
    }
    asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
  }
}

PFN_cuTensorMapEncodeTiled_v12000 encoder() {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found;
  CK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found));
  if (found != cudaDriverEntryPointSuccess || fn == nullptr) {
    std::fprintf(stderr, "cuTensorMapEncodeTiled not found\n");
    std::exit(1);
  }
  return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
}

// [batch, seqlen, heads, 128] bf16, axes sorted by stride: (column, head, row, batch); box 64 x 1 x 128 x 1.
void encode(CUtensorMap* map, void* ptr, int batch, int seqlen, int heads) {
  static const auto fn = encoder();
  cuuint64_t dims[4] = {cuuint64_t(kD), cuuint64_t(heads), cuuint64_t(seqlen), cuuint64_t(batch)};
  cuuint64_t strides[3] = {cuuint64_t(kD) * 2, cuuint64_t(heads) * kD * 2, cuuint64_t(seqlen) * heads * kD * 2};
  cuuint32_t box[4] = {64, 1, kBlock, 1}, elem[4] = {1, 1, 1, 1};
  const CUresult r = fn(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, ptr, dims, strides, box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE,
                        CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    std::fprintf(stderr, "cuTensorMapEncodeTiled: %d\n", int(r));
    std::exit(1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 60;
  EventTimer timer;
  const int sms = timer.sms;
  const int batch = 2, heads = 16;
  struct Case {
    int seqlen, per_row;
    long long block_cycles, tile_cycles;
    std::string name;
    int nq = 2, nk = 2, nv = 2;
    int last_scale = 4;
    int q_defer = 0;
    double fa_density = 0;  // > 0: fa-bench's map of this density (dev_common.h fa_bench_lists), per_row ignored
  };
  // d128, batch 2, 16 heads: issue 7's 4k s = .1 (3 of 32 blocks) and 8k s = .1 (6 of 64). The stand-in arithmetic:
  // ncu's source page (s61-2) puts a loop block at ~2.7k consumer cycles and a tile's fixed cost at ~5.9k.
  const std::vector<Case> all_cases = {
      {4096, 3, 0, 0, "4k s=.1, no arithmetic"},
      {4096, 3, 1350, 2950, "4k s=.1, half the stand-in"},
      {4096, 3, 2700, 5900, "4k s=.1, stand-in 2.7k a block + 5.9k a tile"},
      {4096, 3, 2700, 0, "4k s=.1, stand-in 2.7k a block only"},
      {4096, 3, 0, 5900, "4k s=.1, stand-in 5.9k a tile only"},
      {4096, 32, 0, 0, "4k every block listed, no arithmetic"},
      {8192, 6, 0, 0, "8k s=.1, no arithmetic"},
      // Buffer depths (Q, K, V) with half the stand-in (which lands near the production kernel's time) and with none.
      {4096, 3, 1350, 2950, "4k s=.1, half, Q2 K3 V2", 2, 3, 2},
      {4096, 3, 1350, 2950, "4k s=.1, half, Q2 K2 V3", 2, 2, 3},
      {4096, 3, 1350, 2950, "4k s=.1, half, Q1 K3 V3", 1, 3, 3},
      {4096, 3, 1350, 2950, "4k s=.1, half, Q3 K2 V2", 3, 2, 2},
      {4096, 3, 1350, 2950, "4k s=.1, half, Q2 K1 V1", 2, 1, 1},
      {4096, 3, 1350, 2950, "4k s=.1, half, Q1 K2 V2", 1, 2, 2},
      {4096, 3, 0, 0, "4k s=.1, none, Q2 K3 V2", 2, 3, 2},
      {4096, 3, 0, 0, "4k s=.1, none, Q1 K3 V3", 1, 3, 3},
      {4096, 3, 0, 0, "4k s=.1, none, Q2 K1 V1", 2, 1, 1},
      {8192, 6, 1350, 2950, "8k s=.1, half", 2, 2, 2},
      {8192, 6, 1350, 2950, "8k s=.1, half, Q1 K3 V3", 1, 3, 3},
      // Each CTA's last tile with less of the stand-in: what the launch's tail costs (an upper bound for splitting it).
      {4096, 3, 1350, 2950, "4k s=.1, half, last tile none", 2, 2, 2, 0},
      {4096, 3, 1350, 2950, "4k s=.1, half, last tile half of it", 2, 2, 2, 2},
      {4096, 3, 2700, 5900, "4k s=.1, full, last tile none", 2, 2, 2, 0},
      {4096, 3, 2700, 5900, "4k s=.1, full, last tile half of it", 2, 2, 2, 2},
  };
  // Session 63 ("qdefer"): the next tile's Q issued later, after 1, 2 or all 3 of the previous tile's K/V blocks were
  // issued, so that it queues behind the running tile's loads instead of ahead of them; with the half stand-in and none.
  const std::vector<Case> qdefer_cases = {
      {4096, 3, 1350, 2950, "4k s=.1, half"},
      {4096, 3, 1350, 2950, "4k s=.1, half, Q after 1 block", 2, 2, 2, 4, 1},
      {4096, 3, 1350, 2950, "4k s=.1, half, Q after 2 blocks", 2, 2, 2, 4, 2},
      {4096, 3, 1350, 2950, "4k s=.1, half, Q after 3 blocks", 2, 2, 2, 4, 3},
      {4096, 3, 0, 0, "4k s=.1, none"},
      {4096, 3, 0, 0, "4k s=.1, none, Q after 3 blocks", 2, 2, 2, 4, 3},
      {8192, 6, 1350, 2950, "8k s=.1, half"},
      {8192, 6, 1350, 2950, "8k s=.1, half, Q after 3 blocks", 2, 2, 2, 4, 3},
      {8192, 6, 1350, 2950, "8k s=.1, half, Q after 6 blocks", 2, 2, 2, 4, 6},
  };
  // Session 67 ("famap"): fa-bench's map since session 66 (4k s = .1: 102 of 1024 blocks, rows of 3 and 4) beside the
  // 3 / 32 map, with no arithmetic, half the stand-in and all of it.
  const std::vector<Case> famap_cases = {
      {4096, 3, 0, 0, "4k 3/32, no arithmetic"},
      {4096, 0, 0, 0, "4k fa-bench map, no arithmetic", 2, 2, 2, 4, 0, 0.1},
      {4096, 3, 1350, 2950, "4k 3/32, half the stand-in"},
      {4096, 0, 1350, 2950, "4k fa-bench map, half the stand-in", 2, 2, 2, 4, 0, 0.1},
      {4096, 3, 2700, 5900, "4k 3/32, the stand-in"},
      {4096, 0, 2700, 5900, "4k fa-bench map, the stand-in", 2, 2, 2, 4, 0, 0.1},
      {8192, 0, 0, 0, "8k fa-bench map, no arithmetic", 2, 2, 2, 4, 0, 0.1},
  };
  const std::string mode = argc > 2 ? argv[2] : "";
  const std::vector<Case>& cases = mode == "qdefer" ? qdefer_cases : mode == "famap" ? famap_cases : all_cases;
  const size_t elems = size_t(batch) * 8192 * heads * kD;
  void *q, *k, *v, *o;
  alloc_qkvo(elems * 2, &q, &k, &v, &o);
  CK(cudaFuncSetAttribute(floor_tma, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmem)));
  std::vector<Params> params(cases.size());
  std::mt19937_64 rng(20261125);
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    Params& p = params[i];
    encode(&p.q, q, batch, c.seqlen, heads);
    encode(&p.k, k, batch, c.seqlen, heads);
    encode(&p.v, v, batch, c.seqlen, heads);
    encode(&p.o, o, batch, c.seqlen, heads);
    p.per_row = c.per_row, p.nqb = c.seqlen / kBlock, p.heads = heads, p.batch = batch;
    p.tiles = batch * heads * p.nqb;
    p.block_cycles = c.block_cycles, p.tile_cycles = c.tile_cycles;
    p.nq = c.nq, p.nk = c.nk, p.nv = c.nv, p.last_scale = c.last_scale, p.q_defer = c.q_defer;
    if (c.nq + c.nk + c.nv > 7 || std::max({c.nq, c.nk, c.nv}) > kMaxDepth) {
      std::fprintf(stderr, "%s: buffers do not fit\n", c.name.c_str());
      return 1;
    }
    if (c.fa_density > 0) {
      const DevLists l = fa_bench_lists(c.seqlen, kBlock, c.fa_density);
      p.lists = l.idx, p.counts = l.cnt, p.per_row = l.stride;
    } else {
      p.lists = random_lists(p.nqb, c.per_row, rng);
    }
  }
  auto call = [&](size_t i) {
    timer.dirty_flush();
    return timer.time_us([&] { floor_tma<<<sms, 384, kSmem, timer.stream>>>(params[i]); });
  };
  // O = Q: check one case's output once.
  call(0);
  {
    std::vector<uint16_t> hq(size_t(batch) * 4096 * heads * kD), ho(hq.size());
    CK(cudaMemset(q, 0, elems * 2));
    std::vector<uint16_t> pattern(hq.size());
    for (size_t j = 0; j < pattern.size(); ++j) pattern[j] = uint16_t(j * 2654435761u >> 7);
    CK(cudaMemcpy(q, pattern.data(), pattern.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemset(o, 0xff, elems * 2));
    call(0);
    CK(cudaMemcpy(ho.data(), o, ho.size() * 2, cudaMemcpyDeviceToHost));
    size_t bad = 0;
    for (size_t j = 0; j < ho.size(); ++j) bad += ho[j] != pattern[j];
    std::printf("io_floor_tma: O = Q check, 4k: %zu of %zu elements differ\n", bad, ho.size());
    if (bad) return 1;
  }
  const std::vector<std::vector<float>> t = interleaved_rounds(cases.size(), reps, 5, call);
  std::printf("io_floor_tma: %d SMs (one CTA each), d128 batch 2 x 16 heads, dirty flush %zu MB, %d reps interleaved (us)\n",
              sms, timer.flush_bytes >> 20, reps);
  for (size_t i = 0; i < cases.size(); ++i) {
    std::printf("  %-48s median %8.2f  p10 %8.2f  p90 %8.2f\n", cases[i].name.c_str(), quantile(t[i], .5),
                quantile(t[i], .1), quantile(t[i], .9));
  }
  return 0;
}
