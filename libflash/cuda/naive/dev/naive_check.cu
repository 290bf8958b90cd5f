// libflash/cuda/naive/dev/naive_check.cu -- developer check of the naive GPU algorithm (not built by
// CMake). Compares CUDA naive with the CPU naive twin through flash.h on random inputs (odd sizes, GQA,
// causal both alignments, windows, block masks, strided layouts, NaN-poisoned outputs), checks an
// out-of-memory case, a too-small workspace, concurrent callers, and times b=4 h=16 s=4096 d=128.
//
//   nvcc -O2 -std=c++17 -I. libflash/cuda/naive/dev/naive_check.cu -Lbuild -lflash -Xlinker -rpath,$PWD/build -o naive_check
//   ./naive_check            (exit status 0 = all passed)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "flash.h"

#define CK(x)                                                                                   \
  do {                                                                                          \
    cudaError_t e_ = (x);                                                                       \
    if (e_ != cudaSuccess) {                                                                    \
      std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__);     \
      std::exit(2);                                                                             \
    }                                                                                           \
  } while (0)

static int g_fail = 0;

static uint16_t to_bits(float x, int dt) {
  if (dt == FLASH_DTYPE_FP16) { __half h = __float2half_rn(x); uint16_t b; std::memcpy(&b, &h, 2); return b; }
  __nv_bfloat16 h = __float2bfloat16_rn(x); uint16_t b; std::memcpy(&b, &h, 2); return b;
}
static float from_bits(uint16_t b, int dt) {
  if (dt == FLASH_DTYPE_FP16) { __half h; std::memcpy(&h, &b, 2); return __half2float(h); }
  __nv_bfloat16 h; std::memcpy(&h, &b, 2); return __bfloat162float(h);
}

struct Case {
  const char* name;
  int b, sq, sk, hq, hkv, d, dt;
  int causal = 0, align = FLASH_ALIGN_BOTTOM_RIGHT, wl = -1, wr = -1;
  int layout = 0;  // 0 BSHD, 1 BHSD, 2 padded rows
  bool block_mask = false, lse = true, kv_bcast = false;
  float scale = 0.0f;
  int bm = 64, bn = 64;
};

struct HostTensor {
  std::vector<uint16_t> data;
  int64_t shape[4], strides[4];
};

static HostTensor make(int b, int s, int h, int d, int layout, bool bcast) {
  HostTensor t;
  t.shape[0] = b, t.shape[1] = s, t.shape[2] = h, t.shape[3] = d;
  if (layout == 0) t.strides[0] = int64_t(s) * h * d, t.strides[1] = int64_t(h) * d, t.strides[2] = d;
  else if (layout == 1) t.strides[0] = int64_t(h) * s * d, t.strides[1] = d, t.strides[2] = int64_t(s) * d;
  else t.strides[1] = int64_t(h) * d + 16, t.strides[2] = d, t.strides[0] = int64_t(s) * t.strides[1] + 24;
  t.strides[3] = 1;
  if (bcast) t.strides[0] = 0;
  int64_t last = 0;
  for (int i = 0; i < 4; ++i) last += (t.shape[i] - 1) * t.strides[i];
  t.data.assign(size_t(last + 1), 0);
  return t;
}

static flash_tensor desc(void* p, const HostTensor& t, int dt, int dev) {
  flash_tensor x{};
  x.data = p, x.dtype = dt, x.device_type = dev, x.device_id = 0, x.ndim = 4;
  for (int i = 0; i < 4; ++i) x.shape[i] = t.shape[i], x.strides[i] = t.strides[i];
  return x;
}

static double run_case(const Case& c, std::mt19937& rng, bool verbose = true) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  HostTensor q = make(c.b, c.sq, c.hq, c.d, c.layout, false), o = make(c.b, c.sq, c.hq, c.d, c.layout, false);
  HostTensor k = make(c.b, c.sk, c.hkv, c.d, c.layout, c.kv_bcast), v = make(c.b, c.sk, c.hkv, c.d, c.layout, c.kv_bcast);
  for (auto* t : {&q, &k, &v})
    for (auto& x : t->data) x = to_bits(nd(rng), c.dt);
  const size_t lse_n = size_t(c.b) * c.hq * c.sq;

  // Block mask (host and device copies).
  const int nq = (c.sq + c.bm - 1) / c.bm, nk = (c.sk + c.bn - 1) / c.bn;
  std::vector<int32_t> num(size_t(c.b) * c.hq * nq), idx(size_t(c.b) * c.hq * nq * nk, -7);
  if (c.block_mask)
    for (size_t r = 0; r < num.size(); ++r) {
      std::vector<int32_t> all(nk);
      for (int j = 0; j < nk; ++j) all[j] = j;
      std::shuffle(all.begin(), all.end(), rng);
      const int n = int(rng() % (nk + 1));  // 0 .. nk (0: rows with no key)
      num[r] = n;
      for (int t = 0; t < n; ++t) idx[r * nk + t] = all[t];
    }
  flash_block_mask hm, dm;
  flash_block_mask_init(&hm);
  hm.block_m = c.bm, hm.block_n = c.bn, hm.num_q_blocks = nq, hm.max_kv_blocks = nk;
  hm.kv_num_blocks_strides[0] = int64_t(c.hq) * nq, hm.kv_num_blocks_strides[1] = nq, hm.kv_num_blocks_strides[2] = 1;
  hm.kv_indices_strides[0] = int64_t(c.hq) * nq * nk, hm.kv_indices_strides[1] = int64_t(nq) * nk,
  hm.kv_indices_strides[2] = nk, hm.kv_indices_strides[3] = 1;
  dm = hm;
  hm.kv_num_blocks = num.data(), hm.kv_indices = idx.data();
  int32_t *dnum = nullptr, *didx = nullptr;
  if (c.block_mask) {
    CK(cudaMalloc(&dnum, num.size() * 4));
    CK(cudaMalloc(&didx, idx.size() * 4));
    CK(cudaMemcpy(dnum, num.data(), num.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(didx, idx.data(), idx.size() * 4, cudaMemcpyHostToDevice));
    dm.kv_num_blocks = dnum, dm.kv_indices = didx;
  }

  // GPU.
  void *dq, *dk, *dv, *dout;
  float* dlse;
  CK(cudaMalloc(&dq, q.data.size() * 2));
  CK(cudaMalloc(&dk, k.data.size() * 2));
  CK(cudaMalloc(&dv, v.data.size() * 2));
  CK(cudaMalloc(&dout, o.data.size() * 2));
  CK(cudaMalloc(&dlse, lse_n * 4));
  CK(cudaMemcpy(dq, q.data.data(), q.data.size() * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dk, k.data.data(), k.data.size() * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dv, v.data.data(), v.data.size() * 2, cudaMemcpyHostToDevice));
  CK(cudaMemset(dout, 0xFF, o.data.size() * 2));  // NaN poison
  CK(cudaMemset(dlse, 0xFF, lse_n * 4));

  auto fill_args = [&](flash_fwd_args& a, bool gpu, void* pq, void* pk, void* pv, void* po, float* plse) {
    flash_fwd_args_init(&a);
    const int dev = gpu ? FLASH_DEVICE_CUDA : FLASH_DEVICE_CPU;
    a.q = desc(pq, q, c.dt, dev), a.k = desc(pk, k, c.dt, dev), a.v = desc(pv, v, c.dt, dev), a.o = desc(po, o, c.dt, dev);
    if (c.lse) {
      a.lse.data = plse, a.lse.dtype = FLASH_DTYPE_FP32, a.lse.device_type = dev, a.lse.ndim = 3;
      a.lse.shape[0] = c.b, a.lse.shape[1] = c.hq, a.lse.shape[2] = c.sq;
      a.lse.strides[0] = int64_t(c.hq) * c.sq, a.lse.strides[1] = c.sq, a.lse.strides[2] = 1;
    }
    a.softmax_scale = c.scale, a.causal = c.causal, a.causal_alignment = c.align, a.window_left = c.wl,
    a.window_right = c.wr, a.algorithm = FLASH_ALGO_NAIVE;
    if (c.block_mask) a.block_mask = gpu ? &dm : &hm;
  };
  flash_fwd_args ga;
  fill_args(ga, true, dq, dk, dv, dout, dlse);
  int32_t st = flash_fwd(&ga);
  CK(cudaDeviceSynchronize());
  if (st != FLASH_OK) {
    std::printf("FAIL %-28s gpu status %d: %s\n", c.name, st, flash_last_error_message());
    ++g_fail;
    return 1e30;
  }
  HostTensor og = o;
  std::vector<float> lg(lse_n);
  CK(cudaMemcpy(og.data.data(), dout, o.data.size() * 2, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(lg.data(), dlse, lse_n * 4, cudaMemcpyDeviceToHost));

  // CPU twin.
  HostTensor oc = o;
  std::vector<float> lc(lse_n, NAN);
  flash_fwd_args ca;
  fill_args(ca, false, q.data.data(), k.data.data(), v.data.data(), oc.data.data(), lc.data());
  st = flash_fwd(&ca);
  if (st != FLASH_OK) {
    std::printf("FAIL %-28s cpu status %d: %s\n", c.name, st, flash_last_error_message());
    ++g_fail;
    return 1e30;
  }

  const double tol = c.dt == FLASH_DTYPE_BF16 ? 2e-2 : 4e-3;
  double max_err = 0, max_lse = 0;
  int64_t bad = 0, nans = 0;
  for (int b = 0; b < c.b; ++b)
    for (int s = 0; s < c.sq; ++s)
      for (int h = 0; h < c.hq; ++h)
        for (int e = 0; e < c.d; ++e) {
          const size_t off = size_t(b * o.strides[0] + s * o.strides[1] + h * o.strides[2] + e);
          const float g = from_bits(og.data[off], c.dt), r = from_bits(oc.data[off], c.dt);
          if (std::isnan(g)) { ++nans; continue; }
          const double err = std::fabs(double(g) - r);
          max_err = std::max(max_err, err);
          if (err > tol * (1.0 + std::fabs(r))) ++bad;
        }
  if (c.lse)
    for (size_t i = 0; i < lse_n; ++i) {
      if (std::isnan(lg[i])) { ++nans; continue; }
      if (std::isinf(lc[i]) || std::isinf(lg[i])) {
        if (lc[i] != lg[i]) ++bad, max_lse = INFINITY;
        continue;
      }
      const double err = std::fabs(double(lg[i]) - lc[i]);
      max_lse = std::max(max_lse, err);
      if (err > 1e-3 * (1.0 + std::fabs(lc[i]))) ++bad;
    }
  const bool ok = bad == 0 && nans == 0;
  if (!ok) ++g_fail;
  if (verbose || !ok)
    std::printf("%s %-28s b%d sq%d sk%d hq%d hkv%d d%d %s  max|dO|=%.3g max|dLSE|=%.3g bad=%lld nan=%lld\n",
                ok ? "ok  " : "FAIL", c.name, c.b, c.sq, c.sk, c.hq, c.hkv, c.d, c.dt == FLASH_DTYPE_BF16 ? "bf16" : "fp16",
                max_err, max_lse, (long long)bad, (long long)nans);
  cudaFree(dq), cudaFree(dk), cudaFree(dv), cudaFree(dout), cudaFree(dlse), cudaFree(dnum), cudaFree(didx);
  return max_err;
}

static void expect(bool cond, const char* what) {
  std::printf("%s %s\n", cond ? "ok  " : "FAIL", what);
  if (!cond) ++g_fail;
}

// Dense bf16 [b, s, h, d] problem on the GPU (inputs uninitialised unless init).
struct Problem {
  flash_fwd_args a;
  void *q = nullptr, *k = nullptr, *v = nullptr, *o = nullptr;
  Problem(int b, int s, int h, int d, int dt, bool init) {
    const size_t n = size_t(b) * s * h * d;
    CK(cudaMalloc(&q, n * 2));
    CK(cudaMalloc(&k, n * 2));
    CK(cudaMalloc(&v, n * 2));
    CK(cudaMalloc(&o, n * 2));
    if (init) {
      std::vector<uint16_t> hbuf(n);
      std::mt19937 rng(7);
      std::normal_distribution<float> nd;
      for (void* p : {q, k, v}) {
        for (auto& x : hbuf) x = to_bits(nd(rng), dt);
        CK(cudaMemcpy(p, hbuf.data(), n * 2, cudaMemcpyHostToDevice));
      }
    }
    flash_fwd_args_init(&a);
    const int64_t shape[4] = {b, s, h, d};
    a.q = flash_tensor_contiguous(q, dt, FLASH_DEVICE_CUDA, 0, 4, shape);
    a.k = flash_tensor_contiguous(k, dt, FLASH_DEVICE_CUDA, 0, 4, shape);
    a.v = flash_tensor_contiguous(v, dt, FLASH_DEVICE_CUDA, 0, 4, shape);
    a.o = flash_tensor_contiguous(o, dt, FLASH_DEVICE_CUDA, 0, 4, shape);
    a.algorithm = FLASH_ALGO_NAIVE;
  }
  ~Problem() { cudaFree(q), cudaFree(k), cudaFree(v), cudaFree(o); }
};

static void time_naive(int causal, bool own_ws) {
  const int b = 4, h = 16, s = 4096, d = 128;
  Problem pr(b, s, h, d, FLASH_DTYPE_BF16, true);
  pr.a.causal = causal;
  size_t ws = 0;
  flash_fwd_workspace_size(&pr.a, &ws);
  void* wsp = nullptr;
  if (own_ws) {
    CK(cudaMalloc(&wsp, ws));
    pr.a.workspace = wsp, pr.a.workspace_size = ws;
  }
  cudaStream_t st;
  CK(cudaStreamCreate(&st));
  pr.a.stream = st;
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  for (int i = 0; i < 3; ++i)
    if (flash_fwd(&pr.a) != FLASH_OK) { std::printf("FAIL timing: %s\n", flash_last_error_message()); ++g_fail; return; }
  std::vector<float> ms;
  for (int i = 0; i < 20; ++i) {
    CK(cudaEventRecord(e0, st));
    flash_fwd(&pr.a);
    CK(cudaEventRecord(e1, st));
    CK(cudaEventSynchronize(e1));
    float t;
    CK(cudaEventElapsedTime(&t, e0, e1));
    ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  const double med = ms[ms.size() / 2];
  const double flops = 4.0 * b * h * double(s) * s * d / (causal ? 2 : 1);
  std::printf("time naive bf16 b4 h16 s4096 d128 causal=%d workspace=%s (%.2f GiB): median %.3f ms (min %.3f, max %.3f) "
              "= %.1f TFLOP/s effective\n",
              causal, own_ws ? "caller" : "library", ws / 1073741824.0, med, ms.front(), ms.back(), flops / med / 1e9);
  cudaFree(wsp);
  cudaStreamDestroy(st);
}

int main(int argc, char** argv) {
  const bool timing_only = argc > 1 && std::strcmp(argv[1], "--time") == 0;
  int n = 0;
  flash_device_count(FLASH_DEVICE_CUDA, &n);
  flash_device_info info;
  flash_device_info_init(&info);
  if (n == 0 || flash_get_device_info(FLASH_DEVICE_CUDA, 0, &info) != FLASH_OK) {
    std::printf("no CUDA device\n");
    return 2;
  }
  std::printf("device %s, algorithms mask 0x%x (naive %s)\n", info.name, info.algorithms,
              (info.algorithms >> FLASH_ALGO_NAIVE) & 1 ? "available" : "UNAVAILABLE");
  std::mt19937 rng(1234);
  const int BF = FLASH_DTYPE_BF16, FP = FLASH_DTYPE_FP16;
  if (!timing_only) {
    std::vector<Case> cases = {
        {"dense small", 1, 1, 1, 1, 1, 8, BF},
        {"dense odd", 2, 77, 131, 3, 3, 64, BF},
        {"dense odd fp16", 2, 131, 77, 4, 2, 128, FP},
        {"gqa 8:2 causal br", 2, 200, 300, 8, 2, 128, BF, 1},
        {"gqa 6:3 causal tl", 1, 300, 200, 6, 3, 64, FP, 1, FLASH_ALIGN_TOP_LEFT},
        {"mqa causal sq>sk (empty)", 2, 300, 100, 4, 1, 64, BF, 1},
        {"window 32/16", 2, 257, 257, 4, 4, 96, BF, 0, FLASH_ALIGN_BOTTOM_RIGHT, 32, 16},
        {"window left only tl", 1, 190, 333, 2, 1, 32, FP, 0, FLASH_ALIGN_TOP_LEFT, 50, -1},
        {"window right only", 1, 333, 190, 2, 2, 32, BF, 0, FLASH_ALIGN_BOTTOM_RIGHT, -1, 7},
        {"window + causal", 1, 513, 513, 2, 2, 256, FP, 1, FLASH_ALIGN_BOTTOM_RIGHT, 100, -1},
        {"window empty rows", 1, 100, 400, 2, 2, 64, BF, 0, FLASH_ALIGN_TOP_LEFT, 0, -1},
        {"decode sq=1", 3, 1, 1000, 8, 2, 128, BF, 1},
        {"d=8 long k", 1, 17, 2049, 2, 1, 8, FP},
    };
    Case c;
    c = {"BHSD layout gqa causal", 2, 129, 257, 4, 2, 64, BF, 1}; c.layout = 1; cases.push_back(c);
    c = {"padded rows no lse", 2, 100, 90, 4, 4, 128, FP}; c.layout = 2; c.lse = false; cases.push_back(c);
    c = {"kv batch broadcast", 3, 64, 64, 2, 2, 64, BF}; c.kv_bcast = true; cases.push_back(c);
    c = {"custom scale", 1, 99, 101, 2, 2, 64, BF}; c.scale = 0.37f; cases.push_back(c);
    c = {"block mask 64x64", 2, 300, 500, 4, 2, 64, BF}; c.block_mask = true; cases.push_back(c);
    c = {"block mask 128x64 causal", 1, 400, 400, 2, 1, 128, FP, 1}; c.block_mask = true; c.bm = 128; cases.push_back(c);
    c = {"block mask 64x128 window", 1, 333, 777, 3, 3, 64, BF, 0, FLASH_ALIGN_BOTTOM_RIGHT, 200, 50};
    c.block_mask = true; c.bn = 128; cases.push_back(c);
    c = {"many heads (chunked)", 1, 4200, 4200, 24, 12, 8, BF, 1}; cases.push_back(c);  // 106 MB/head: 2 chunks of 6
    for (const Case& x : cases) run_case(x, rng);

    // Concurrency: 4 threads, each on its own stream, same problem; results must be bitwise equal.
    {
      Problem pr(2, 333, 8, 64, BF, true);
      std::vector<uint16_t> ref(size_t(2) * 333 * 8 * 64);
      flash_fwd(&pr.a);
      CK(cudaDeviceSynchronize());
      CK(cudaMemcpy(ref.data(), pr.o, ref.size() * 2, cudaMemcpyDeviceToHost));
      bool same = true;
      std::vector<std::thread> ts;
      std::vector<void*> outs(4);
      for (int t = 0; t < 4; ++t) CK(cudaMalloc(&outs[t], ref.size() * 2));
      std::vector<int> status(4, 0);
      for (int t = 0; t < 4; ++t)
        ts.emplace_back([&, t] {
          cudaSetDevice(0);
          cudaStream_t s;
          cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
          flash_fwd_args a = pr.a;
          a.o.data = outs[t];
          a.stream = s;
          for (int i = 0; i < 10; ++i) status[t] |= flash_fwd(&a);
          cudaStreamSynchronize(s);
          cudaStreamDestroy(s);
        });
      for (auto& t : ts) t.join();
      for (int t = 0; t < 4; ++t) {
        std::vector<uint16_t> got(ref.size());
        CK(cudaMemcpy(got.data(), outs[t], got.size() * 2, cudaMemcpyDeviceToHost));
        same &= status[t] == 0 && got == ref;
        cudaFree(outs[t]);
      }
      expect(same, "4 threads x 4 streams x 10 calls: bitwise equal to a single call");
    }

    // Workspace: too small from the caller, and out of device memory when the library allocates.
    {
      Problem pr(1, 1000, 2, 64, BF, true);
      size_t ws = 0;
      flash_fwd_workspace_size(&pr.a, &ws);
      void* w;
      CK(cudaMalloc(&w, ws));
      pr.a.workspace = w, pr.a.workspace_size = ws - 1;
      expect(flash_fwd(&pr.a) == FLASH_ERROR_WORKSPACE_TOO_SMALL, "caller workspace 1 byte short -> WORKSPACE_TOO_SMALL");
      pr.a.workspace_size = ws;
      expect(flash_fwd(&pr.a) == FLASH_OK, "caller workspace of the queried size -> OK");
      CK(cudaDeviceSynchronize());
      cudaFree(w);
      std::printf("     workspace for b1 s1000 h2: %zu bytes\n", ws);
    }
    for (int s : {65536, 131072}) {
      Problem pr(1, s, 1, 64, BF, false);
      size_t ws = 0;
      flash_fwd_workspace_size(&pr.a, &ws);
      const int32_t st = flash_fwd(&pr.a);
      const cudaError_t e = cudaDeviceSynchronize();
      std::printf("     s=%d: workspace %.1f GiB -> status %d (%s) \"%s\", device afterwards: %s\n", s, ws / 1073741824.0, st,
                  flash_status_string(st), st == FLASH_OK ? "" : flash_last_error_message(), cudaGetErrorString(e));
      if (s == 131072) expect(st == FLASH_ERROR_OUT_OF_MEMORY && e == cudaSuccess, "131072 x 131072 -> OUT_OF_MEMORY, device fine");
      else expect((st == FLASH_OK || st == FLASH_ERROR_OUT_OF_MEMORY) && e == cudaSuccess, "65536 x 65536 -> OK or OUT_OF_MEMORY");
    }
    // The library keeps working after the OOM.
    run_case({"after OOM", 1, 129, 129, 2, 2, 64, BF, 1}, rng);
  }
  time_naive(0, true);
  time_naive(1, true);
  time_naive(0, false);
  std::printf(g_fail ? "%d FAILED\n" : "ALL PASSED\n", g_fail);
  return g_fail ? 1 : 0;
}
