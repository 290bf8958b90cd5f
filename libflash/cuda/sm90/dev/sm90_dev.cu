// libflash/cuda/sm90/dev/sm90_dev.cu -- developer driver for tuning the sm90 forward (not built by default:
// `ninja sm90_dev`). Instantiates candidate shapes of the kernel, checks each against the production
// instantiation (which the test suite checks against the fp64 reference) on the same random inputs, and
// times them on the standard grid (b*seqlen = 16384, h = 2048/d, bf16): median of CUDA-event timings
// after warm-up, inputs rotated across 4 sets so L2 never holds a whole problem. One line per candidate.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "libflash/cuda/sm90/fwd_kernel.cuh"

using flash::DType;
using flash::FwdParams;

#define CK(x)                                                                                    \
  do {                                                                                           \
    cudaError_t e_ = (x);                                                                        \
    if (e_ != cudaSuccess) {                                                                     \
      std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); \
      std::exit(2);                                                                              \
    }                                                                                            \
  } while (0)

namespace {

struct Problem {
  int d, n;
  bool causal;
};

void* g_workspace = nullptr;  // the dynamic tile order's counter (causal)

FwdParams make_params(const Problem& pr, void* q, void* k, void* v, void* o) {
  FwdParams p{};
  p.workspace = g_workspace, p.workspace_size = flash::sm90::kTileCounterBytes;
  const int b = 16384 / pr.n, h = 2048 / pr.d;
  p.q = q, p.k = k, p.v = v, p.o = o, p.lse = nullptr;
  const int64_t row = int64_t(h) * pr.d, batch = row * pr.n;
  p.q_batch_stride = p.k_batch_stride = p.v_batch_stride = p.o_batch_stride = batch;
  p.q_row_stride = p.k_row_stride = p.v_row_stride = p.o_row_stride = row;
  p.q_head_stride = p.k_head_stride = p.v_head_stride = p.o_head_stride = pr.d;
  p.batch = b, p.heads_q = p.heads_kv = h, p.head_ratio = 1;
  p.seqlen_q = p.seqlen_k = pr.n, p.head_dim = pr.d, p.dtype = DType::BF16;
  p.scale = 1.f / std::sqrt(float(pr.d));
  p.scale_log2 = p.scale * 1.4426950408889634f;
  p.window_left = -1, p.window_right = pr.causal ? 0 : -1;
  p.diag_offset = 0;
  p.is_causal = pr.causal, p.has_window = pr.causal, p.has_block_mask = false;
  p.device_id = 0, p.stream = nullptr;
  return p;
}

using Launch = int32_t (*)(const FwdParams&);

struct Candidate {
  const char* name;
  int d;
  Launch fn;
};

template <int D, int BN, int ST, int WG = 2, int POLY = 0, bool TMA_STORE = false>
int32_t run(const FwdParams& p) {
  return flash::sm90::launch<flash::sm90::Traits<D, BN, ST, DType::BF16, false, WG, POLY, TMA_STORE>>(p);
}

// Candidates: the production shape of each head dim first (the reference for the check). Run s12-2
// compared d64 bn192 st3, d128 bn176 st2 / bn96 st3, d256 bn80 and 2-CTA cluster multicast (perf-log);
// session 13 (runs s13-1/2): three consumer warpgroups (192-row tiles; d64's production shape since) and
// "poly N" (every N-th 8-column group of P exponentiated on the FMA pipe: no consistent gain); run s13-8:
// two Q buffers (2Q) bought with fewer or narrower K/V stages at d128/d256 (2 stages + 2Q won: d128's
// production shape since); run s14-1: the TMA-store epilogue (d64's and d128's production since); run
// s14-2: the next tile's S_0 issued before this tile's epilogue (commit 61802af, reverted: equal dense,
// 5-17% slower causal).
const Candidate kCandidates[] = {
    {"d64  3wg tma-store (prod)", 64, run<64, 128, 4, 3, 0, true>},
    {"d64  3wg direct-store O", 64, run<64, 128, 4, 3>},
    {"d128 bn128 st2 2Q tma-store (prod)", 128, run<128, 128, 2, 2, 0, true>},
    {"d128 direct-store O", 128, run<128, 128, 2>},
    {"d256 bn80 st2 1Q (prod)", 256, run<256, 80, 2>},
};

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 30;
  const int seqs[] = {1024, 4096, 16384};
  constexpr int kSets = 4;
  const size_t elems = size_t(16384) * 2048;  // b*n*h*d is the same for every grid point
  std::vector<void*> q(kSets), k(kSets), v(kSets);
  void *o, *o_ref;
  {
    std::vector<__nv_bfloat16> host(elems);
    std::mt19937 rng(1234);
    std::normal_distribution<float> nd(0.f, 1.f);
    for (int s = 0; s < kSets; ++s)
      for (void** dst : {&q[s], &k[s], &v[s]}) {
        for (auto& x : host) x = __float2bfloat16(nd(rng));
        CK(cudaMalloc(dst, elems * 2));
        CK(cudaMemcpy(*dst, host.data(), elems * 2, cudaMemcpyHostToDevice));
      }
  }
  CK(cudaMalloc(&g_workspace, flash::sm90::kTileCounterBytes));
  CK(cudaMalloc(&o, elems * 2));
  CK(cudaMalloc(&o_ref, elems * 2));
  std::vector<__nv_bfloat16> a(elems), r(elems);
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::printf("%-24s %-7s %6s %9s %8s %10s\n", "candidate", "mask", "seqlen", "ms", "TFLOP/s", "max|d|/max");
  for (bool causal : {false, true})
    for (int n : seqs)
      for (const Candidate& c : kCandidates) {
        const Problem pr{c.d, n, causal};
        const bool prod = std::strstr(c.name, "(prod)") != nullptr;  // "(prod again)": checked against it
        // Check: this candidate vs the production instantiation, inputs of set 0, outputs poisoned.
        FwdParams p = make_params(pr, q[0], k[0], v[0], prod ? o_ref : o);
        CK(cudaMemset(p.o, 0xff, elems * 2));
        if (c.fn(p) != 0) {
          std::printf("%-24s launch failed\n", c.name);
          continue;
        }
        CK(cudaDeviceSynchronize());
        double err = 0;
        if (!prod) {
          CK(cudaMemcpy(a.data(), o, elems * 2, cudaMemcpyDeviceToHost));
          CK(cudaMemcpy(r.data(), o_ref, elems * 2, cudaMemcpyDeviceToHost));
          double mx = 0, md = 0;
          for (size_t i = 0; i < elems; ++i) {
            const double x = __bfloat162float(a[i]), y = __bfloat162float(r[i]);
            mx = std::max(mx, std::fabs(y));
            md = std::isnan(x) ? INFINITY : std::max(md, std::fabs(x - y));
          }
          err = md / mx;
        }
        std::vector<float> t;
        for (int i = 0; i < reps + 5; ++i) {
          FwdParams pi = make_params(pr, q[i % kSets], k[i % kSets], v[i % kSets], o);
          CK(cudaEventRecord(e0));
          c.fn(pi);
          CK(cudaEventRecord(e1));
          CK(cudaEventSynchronize(e1));
          float ms;
          CK(cudaEventElapsedTime(&ms, e0, e1));
          if (i >= 5) t.push_back(ms);
        }
        std::sort(t.begin(), t.end());
        const double ms = t[t.size() / 2];
        const double flops = 4.0 * 16384.0 * 2048.0 * n * (causal ? 0.5 : 1.0);
        std::printf("%-24s %-7s %6d %9.4f %8.1f %10.2e\n", c.name, causal ? "causal" : "dense", n, ms, flops / ms / 1e9, err);
      }
  return 0;
}
