// libflash/cuda/sm90/dev/io_floor.cu -- the memory floor of issue 7's block-sparse cells under fa-bench's protocol.
// Dev only (not built by CMake):
//   nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -o io_floor io_floor.cu && ./io_floor [reps] [grid|famap|smid]
// Without a mode: d128 / d64 4k in several arrangements (grid x threads, tile order, flush); "famap": the first six of
// those, fa-bench's 4k s = .1 map beside the 3 / 32 one (session 67). With "grid": every
// block-sparse cell of issue 7's masks run (batch 2, hidden 2048, 4k-16k) and FlashAttention's convention at 4k (batch
// 4), each in the two best arrangements of session 62 (4 x 256 and 8 x 128 threads an SM, persistent) and, since session
// 67, one tile an SM (1 x 1024), dirty flush, on fa-bench's own maps since session 67 (on maps rounded row by row before).
//
// A kernel that moves exactly the bytes a block-sparse forward must move -- each (batch, head, query block)'s Q block,
// the K and V blocks its list names, its O block written -- in the same [batch, seqlen, heads, head_dim] layout and the
// same (batch, head)-major tile order (so K/V reuse in L2 is what the sm90 kernel gets), but with no arithmetic beyond an
// XOR. Its time is a floor for these loads and stores in the arrangement run (CTAs an SM x threads), not a bound for every
// kernel: the arrangement moves it by up to 8% (session 62). Against fa-bench's dense time it gives issue 7's cells a
// floor ratio (scripts/floor_table.py).
// Timed as fa-bench times a call: a buffer of twice L2 written (cudaMemsetAsync: the dirty flush) or written and read
// back (clean), then CUDA events round the launch; the variants interleaved rep by rep, medians.
#include <cuda_runtime.h>

#include "dev_common.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

struct Problem {
  int batch, heads, seqlen, head_dim, block;  // block: the mask's rows and keys per block
  int per_row;                                // key blocks listed per query block (0: no list, every block)
  int heads_inner;                            // tile order: 0 (batch, head)-major as the sm90 kernel; 1 heads innermost
  int head_perm;  // (batch, head)-major order's head sequence: 0 0, 1, 2, ...; S > 1: heads S apart in turn (0, S, 2S, ..,
                  // 1, 1 + S, ..), so that the heads running together sit S x 256 B apart in each row; -1: batch innermost
  const int* slot_of_sm;  // non-null: a CTA's first tile is slot_of_sm[%smid], not blockIdx.x (one CTA an SM)
  const int* counts;      // non-null: query block qb lists counts[qb] key blocks at lists + qb x stride (fa-bench's
  int stride;             // maps since session 66); null: per_row each, at lists + qb x per_row
};

__device__ __forceinline__ int smid() {
  int s;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
  return s;
}

// Tiles (b, h, qb) in the order p.heads_inner names, taken t = blockIdx.x, + gridDim.x, ... (one CTA per tile when the
// grid has a CTA per tile; a persistent walk when it has fewer). A row of head_dim bf16 is head_dim / 8 uint4.
__global__ void __launch_bounds__(1024) tile_io(const uint4* __restrict__ q, const uint4* __restrict__ k,
                                                const uint4* __restrict__ v, uint4* __restrict__ o,
                                                const int* __restrict__ lists, Problem p) {
  const int nqb = p.seqlen / p.block, nbh = p.batch * p.heads;
  extern __shared__ int hold_smem[];  // sized by the launch to keep one CTA an SM where slot_of_sm is used
  const int first = p.slot_of_sm ? p.slot_of_sm[smid()] : int(blockIdx.x);
  if (p.slot_of_sm && threadIdx.x == 0) hold_smem[0] = first;
  for (int t = first; t < nqb * nbh; t += gridDim.x) {
    const int bh = p.heads_inner ? t % nbh : t / nqb, qb = p.heads_inner ? t / nbh : t % nqb;
    int b = bh / p.heads, h = bh % p.heads;
    if (p.head_perm > 1) {
      const int per = p.heads / p.head_perm;  // heads in each residue class
      h = (h % per) * p.head_perm + h / per;
    } else if (p.head_perm < 0) {
      b = bh % p.batch, h = bh / p.batch;
    }
    const int chunks = p.head_dim / 8;  // uint4 per row
    const int rows_per_pass = int(blockDim.x) / chunks;
    const int c = threadIdx.x % chunks, r0 = threadIdx.x / chunks;
    const int64_t row_stride = int64_t(p.heads) * chunks;  // in uint4
    const int64_t base = (int64_t(b) * p.seqlen * p.heads + h) * chunks + c;
    const int n = p.counts ? __ldg(p.counts + qb) : p.per_row;
    const int* list = lists + qb * (p.counts ? p.stride : p.per_row);
    for (int r = r0; r < p.block; r += rows_per_pass) {
      const int64_t qrow = int64_t(qb) * p.block + r;
      uint4 acc = __ldg(q + base + qrow * row_stride);
#pragma unroll 4
      for (int j = 0; j < n; ++j) {
        const int64_t krow = int64_t(__ldg(list + j)) * p.block + r;
        const uint4 kk = __ldg(k + base + krow * row_stride), vv = __ldg(v + base + krow * row_stride);
        acc.x ^= kk.x ^ vv.x, acc.y ^= kk.y ^ vv.y, acc.z ^= kk.z ^ vv.z, acc.w ^= kk.w ^ vv.w;
      }
      o[base + qrow * row_stride] = acc;
    }
  }
}

// Every byte of Q, K and V read once and O written, contiguous: the best case of the same byte count.
__global__ void __launch_bounds__(512) stream_io(const uint4* __restrict__ q, const uint4* __restrict__ k,
                                                 const uint4* __restrict__ v, uint4* __restrict__ o, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const uint4 a = __ldg(q + i), bb = __ldg(k + i), cc = __ldg(v + i);
    o[i] = make_uint4(a.x ^ bb.x ^ cc.x, a.y ^ bb.y ^ cc.y, a.z ^ bb.z ^ cc.z, a.w ^ bb.w ^ cc.w);
  }
}

__global__ void read_back(const uint4* __restrict__ buf, int64_t n, unsigned* sink) {
  unsigned x = 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const uint4 a = __ldcg(buf + i);
    x ^= a.x ^ a.w;
  }
  if (x == 0x12345678u) *sink = x;
}

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 50;
  EventTimer timer;
  const int sms = timer.sms, l2 = timer.l2;
  const size_t flush_bytes = timer.flush_bytes;
  void* const flush = timer.flush;
  unsigned* sink;
  CK(cudaMalloc(&sink, 4));
  // Issue 7's shapes: batch 2, hidden 2048, 4k; d128 and d64; s = 3, 8, 16 of 32 key blocks (fa-bench's llround).
  struct Case {
    std::string name;
    Problem p;
    bool stream, clean;
    int grid_per_sm, threads;  // 0: a CTA per tile
    int sm_map = 0;            // 0: none; 1 identity, 2 reversed, 3 x 37 mod SMs, 4 / 5 random (seeds): slot_of_sm
    double fa_density = 0;     // > 0: fa-bench's map of this density (fa_bench_lists), not per_row blocks a row
  };
  std::vector<Case> cases = {
      // Session 67: fa-bench's maps since session 66 (102 / 1024 at 4k s = .1), in the kernel's arrangement (one tile an
      // SM, 1024 threads) and the best of session 62 (4 x 256), beside the 3 / 32 map in the same arrangements.
      {"d128 4k s=.1 fa-bench map, 132 x 1024", {2, 16, 4096, 128, 128, 0, 0}, false, false, 1, 1024, 0, 0.1},
      {"d128 4k s=.1 fa-bench map, 528 x 256", {2, 16, 4096, 128, 128, 0, 0}, false, false, 4, 256, 0, 0.1},
      {"d128 4k s=.1 (3/32), 132 x 1024", {2, 16, 4096, 128, 128, 3, 0}, false, false, 1, 1024},
      {"d128 4k s=.1 (3/32), 528 x 256", {2, 16, 4096, 128, 128, 3, 0}, false, false, 4, 256},
      {"d64 4k s=.1 fa-bench map, 132 x 1024", {2, 32, 4096, 64, 128, 0, 0}, false, false, 1, 1024, 0, 0.1},
      {"d64 4k s=.1 fa-bench map, 528 x 256", {2, 32, 4096, 64, 128, 0, 0}, false, false, 4, 256, 0, 0.1},
      {"d128 4k s=.1 (3/32) dirty", {2, 16, 4096, 128, 128, 3, 0}, false, false, 0, 256},
      {"d128 4k s=.1 (3/32) clean", {2, 16, 4096, 128, 128, 3, 0}, false, true, 0, 256},
      {"d128 4k s=.25 (8/32) dirty", {2, 16, 4096, 128, 128, 8, 0}, false, false, 0, 256},
      {"d128 4k s=.5 (16/32) dirty", {2, 16, 4096, 128, 128, 16, 0}, false, false, 0, 256},
      {"d128 4k all blocks listed (32/32) dirty", {2, 16, 4096, 128, 128, 32, 0}, false, false, 0, 256},
      {"d64 4k s=.1 (3/32) dirty", {2, 32, 4096, 64, 128, 3, 0}, false, false, 0, 256},
      {"d64 4k s=.25 (8/32) dirty", {2, 32, 4096, 64, 128, 8, 0}, false, false, 0, 256},
      {"QKV read once, O written, contiguous, dirty", {2, 16, 4096, 128, 128, 0, 0}, true, false, 0, 256},
      {"d128 8k s=.1 (6/64) dirty", {2, 16, 8192, 128, 128, 6, 0}, false, false, 0, 256},
      {"d128 4k s=.1 dirty, 132 x 1024 persistent", {2, 16, 4096, 128, 128, 3, 0}, false, false, 1, 1024},
      {"d128 4k s=.1 dirty, 264 x 1024 persistent", {2, 16, 4096, 128, 128, 3, 0}, false, false, 2, 1024},
      {"d128 4k s=.1 dirty, 528 x 256 persistent", {2, 16, 4096, 128, 128, 3, 0}, false, false, 4, 256},
      {"d128 4k s=.1 dirty, heads innermost", {2, 16, 4096, 128, 128, 3, 1}, false, false, 0, 256},
      {"d128 4k s=.1 dirty, heads innermost, 132 x 1024", {2, 16, 4096, 128, 128, 3, 1}, false, false, 1, 1024},
      {"d128 4k s=.1 clean, 132 x 1024 persistent", {2, 16, 4096, 128, 128, 3, 0}, false, true, 1, 1024},
      {"d128 4k s=.1 dirty, 132 x 256 persistent", {2, 16, 4096, 128, 128, 3, 0}, false, false, 1, 256},
      {"d128 4k s=.1 dirty, 132 x 512 persistent", {2, 16, 4096, 128, 128, 3, 0}, false, false, 1, 512},
      {"d128 4k s=.1 dirty, 264 x 256 persistent", {2, 16, 4096, 128, 128, 3, 0}, false, false, 2, 256},
      {"d128 4k s=.1 dirty, 264 x 512 persistent", {2, 16, 4096, 128, 128, 3, 0}, false, false, 2, 512},
      {"d128 4k s=.1 dirty, 396 x 256 persistent", {2, 16, 4096, 128, 128, 3, 0}, false, false, 3, 256},
      {"d128 4k s=.1 dirty, 1056 x 128 persistent", {2, 16, 4096, 128, 128, 3, 0}, false, false, 8, 128},
      {"d128 4k s=.1 dirty, 528 x 128 persistent", {2, 16, 4096, 128, 128, 3, 0}, false, false, 4, 128},
      {"d128 4k s=.1 dirty, 132 x 1024, heads 4 apart", {2, 16, 4096, 128, 128, 3, 0, 4}, false, false, 1, 1024},
      {"d128 4k s=.1 dirty, 132 x 1024, heads 2 apart", {2, 16, 4096, 128, 128, 3, 0, 2}, false, false, 1, 1024},
      {"d128 4k s=.1 dirty, 132 x 1024, heads 8 apart", {2, 16, 4096, 128, 128, 3, 0, 8}, false, false, 1, 1024},
      {"d128 4k s=.1 dirty, 132 x 1024, batch innermost", {2, 16, 4096, 128, 128, 3, 0, -1}, false, false, 1, 1024},
      {"d128 4k s=.1 dirty, 264 x 512, heads 4 apart", {2, 16, 4096, 128, 128, 3, 0, 4}, false, false, 2, 512},
      {"d128 4k s=.1 dirty, 528 x 256, heads 4 apart", {2, 16, 4096, 128, 128, 3, 0, 4}, false, false, 4, 256},
      {"d128 4k s=.1 dirty, one-shot, heads 4 apart", {2, 16, 4096, 128, 128, 3, 0, 4}, false, false, 0, 256},
      {"d64 4k s=.1 dirty, 132 x 1024", {2, 32, 4096, 64, 128, 3, 0}, false, false, 1, 1024},
      {"d64 4k s=.1 dirty, 132 x 1024, heads 8 apart", {2, 32, 4096, 64, 128, 3, 0, 8}, false, false, 1, 1024},
  };
  if (argc > 2 && std::string(argv[2]) == "famap") cases.resize(6);  // session 67's six
  if (argc > 2 && std::string(argv[2]) == "smid") {
    cases.clear();
    const char* names[] = {"blockIdx", "smid", "smid reversed", "smid x 37", "smid random 1", "smid random 2"};
    for (int d : {128, 64})
      for (int m = 0; m < 6; ++m)
        cases.push_back({std::string("d") + std::to_string(d) + " 4k s=.1 dirty, 132 x 1024, 1 CTA/SM, first tile by " +
                             names[m],
                         {2, 2048 / d, 4096, d, 128, 3, 0, 0}, false, false, 1, 1024, m});
  }
  if (argc > 2 && std::string(argv[2]) == "grid") {
    cases.clear();
    for (int d : {128, 64})
      for (int batch : {2, 4})
        for (int n : {4096, 8192, 16384}) {
          if (batch == 4 && n != 4096) continue;
          for (double dens : {0.1, 0.25, 0.5}) {
            // fa-bench's map (since session 66): the name carries its blocks over its cells, which floor_table.py
            // reads as the map's density.
            const int nb = n / 128;
            const long long total = std::min<long long>(std::max<long long>(std::llround(dens * nb * nb), nb), 1ll * nb * nb);
            // Arrangements (CTAs an SM x threads): session 62's two best on its maps, and the kernel's own (one tile an
            // SM, 1024 threads), the best on fa-bench's 4k s = .1 map (s67-1: 57.4 us against 59.9 / 60.2).
            const int per_sm[3] = {4, 8, 1}, threads[3] = {256, 128, 1024};
            const char* arr_name[3] = {"4x256", "8x128", "1x1024"};
            for (int arr = 0; arr < 3; ++arr) {
              char name[96];
              std::snprintf(name, sizeof name, "d%d b%d %dk s=%.2g (%lld/%d) %s", d, batch, n / 1024, dens, total, nb * nb,
                            arr_name[arr]);
              cases.push_back({name, {batch, 2048 / d, n, d, 128, 0, 0, 0}, false, false, per_sm[arr], threads[arr], 0, dens});
            }
          }
        }
  }
  size_t max_elems = 0;  // batch x seqlen x hidden, bf16
  for (const Case& c : cases)
    max_elems = std::max(max_elems, size_t(c.p.batch) * c.p.seqlen * c.p.heads * c.p.head_dim);
  void *qb, *kb, *vb, *ob;
  alloc_qkvo(max_elems * 2, &qb, &kb, &vb, &ob);
  uint4 *q = static_cast<uint4*>(qb), *k = static_cast<uint4*>(kb), *v = static_cast<uint4*>(vb), *o = static_cast<uint4*>(ob);
  // Lists: per query block, per_row distinct key blocks, random, the same for every (batch, head) as fa-bench's.
  std::vector<int*> lists(cases.size(), nullptr);
  std::mt19937_64 rng(20261125);
  std::vector<DevLists> fa_lists(cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    Problem& p = cases[i].p;
    if (cases[i].fa_density > 0) {
      fa_lists[i] = fa_bench_lists(p.seqlen, p.block, cases[i].fa_density);
      lists[i] = fa_lists[i].idx, p.counts = fa_lists[i].cnt, p.stride = fa_lists[i].stride;
      continue;
    }
    if (p.per_row == 0) continue;
    lists[i] = random_lists(p.seqlen / p.block, p.per_row, rng);
  }
  // slot_of_sm tables (maps 1..5), and the shared memory that keeps one CTA an SM.
  std::vector<int*> sm_tables(6, nullptr);
  for (int m = 1; m < 6; ++m) {
    std::vector<int> tab(sms);
    for (int i = 0; i < sms; ++i) tab[i] = m == 1 ? i : m == 2 ? sms - 1 - i : m == 3 ? (i * 37) % sms : i;
    if (m >= 4) {
      std::mt19937 g(m);
      std::shuffle(tab.begin(), tab.end(), g);
    }
    CK(cudaMalloc(&sm_tables[m], sms * 4));
    CK(cudaMemcpy(sm_tables[m], tab.data(), sms * 4, cudaMemcpyHostToDevice));
  }
  const int hold_bytes = 150 * 1024;
  CK(cudaFuncSetAttribute(tile_io, cudaFuncAttributeMaxDynamicSharedMemorySize, hold_bytes));
  const cudaStream_t s = timer.stream;
  auto call = [&](size_t i) {
    const Case& c = cases[i];
    const Problem& p = c.p;
    timer.dirty_flush();
    if (c.clean) read_back<<<sms * 4, 512, 0, s>>>(static_cast<const uint4*>(flush), int64_t(flush_bytes / 16), sink);
    return timer.time_us([&] {
      if (c.stream) {
        const int64_t n = int64_t(p.batch) * p.seqlen * p.heads * p.head_dim / 8;
        stream_io<<<sms * 4, 512, 0, s>>>(q, k, v, o, n);
      } else {
        const int tiles = p.batch * p.heads * (p.seqlen / p.block);
        Problem pp = p;
        pp.slot_of_sm = c.sm_map ? sm_tables[c.sm_map] : nullptr;
        const int smem = c.name.find("1 CTA/SM") != std::string::npos ? hold_bytes : 0;
        tile_io<<<c.grid_per_sm ? sms * c.grid_per_sm : tiles, c.threads, smem, s>>>(q, k, v, o, lists[i], pp);
      }
    });
  };
  const std::vector<std::vector<float>> t = interleaved_rounds(cases.size(), reps, 5, call);
  std::printf("io_floor: %d SMs, L2 %d MB, flush %zu MB, %d reps interleaved, event-timed (us)\n", sms, l2 >> 20,
              flush_bytes >> 20, reps);
  for (size_t i = 0; i < cases.size(); ++i) {
    const Problem& p = cases[i].p;
    const double qo = 2.0 * p.batch * p.seqlen * p.heads * p.head_dim * 2;  // Q read + O written
    const double kv_all = qo;                                                // K + V, every block
    std::printf("  %-50s median %8.2f  p10 %8.2f  p90 %8.2f   (Q + O %.1f MB, K + V at most %.1f MB)\n",
                cases[i].name.c_str(), quantile(t[i], .5), quantile(t[i], .1), quantile(t[i], .9), qo / 1e6,
                kv_all / 1e6);
  }
  return 0;
}
