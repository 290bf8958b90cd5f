// libflash/cuda/naive/dev/naive_bwd_check.cu -- developer check of the naive GPU BACKWARD (not built by
// CMake). Through flash.h only: the CPU naive forward makes O and LSE, then the CUDA naive backward and the
// CPU naive backward (its semantic twin) run on the same inputs; dq, dk, dv are compared (odd sizes, GQA/MQA,
// causal in both alignments, windows, empty rows, block masks, BHSD/padded/broadcast layouts, NaN-poisoned
// outputs). Also: run-to-run bitwise determinism (4 threads x 4 streams), WORKSPACE_TOO_SMALL, OUT_OF_MEMORY
// at 131072 x 131072, and timing at b=4 h=16 s=4096 d=128 (and d=64) with CUDA events.
//
//   nvcc -O2 -std=c++17 -I. libflash/cuda/naive/dev/naive_bwd_check.cu -Lbuild -lflash -Xlinker -rpath,$PWD/build -o naive_bwd_check
//   ./naive_bwd_check [--time]      (exit status 0 = all passed)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "flash.h"

#define CK(x)                                                                               \
  do {                                                                                      \
    cudaError_t e_ = (x);                                                                   \
    if (e_ != cudaSuccess) {                                                                \
      std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); \
      std::exit(2);                                                                         \
    }                                                                                       \
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
  bool block_mask = false, kv_bcast = false;
  float scale = 0.0f;
  int bm = 64, bn = 64;
};

struct HostTensor {
  std::vector<uint16_t> data;
  int64_t shape[4], strides[4];
  size_t off(int64_t a, int64_t b, int64_t c, int64_t e) const {
    return size_t(a * strides[0] + b * strides[1] + c * strides[2] + e);
  }
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

static flash_tensor lse_desc(float* p, int b, int h, int s, int dev) {
  flash_tensor x{};
  x.data = p, x.dtype = FLASH_DTYPE_FP32, x.device_type = dev, x.ndim = 3;
  x.shape[0] = b, x.shape[1] = h, x.shape[2] = s;
  x.strides[0] = int64_t(h) * s, x.strides[1] = s, x.strides[2] = 1;
  return x;
}

static void* upload(const HostTensor& t) {
  void* p;
  CK(cudaMalloc(&p, t.data.size() * 2));
  CK(cudaMemcpy(p, t.data.data(), t.data.size() * 2, cudaMemcpyHostToDevice));
  return p;
}

// Compares one gradient tensor; returns true if fine. tol relative to max|ref| and to |ref| elementwise.
// zero[(a * s + i) * h + k]: row (a, i, k) must be exactly 0 (a query row that sees no key, a key no query
// sees). Not "the reference row is 0": a row that sees a single key has dS = P (dP - D) = 0 only up to
// rounding, and the GPU's D = rowsum(dO o O) is not the CPU's rowsum(P o dP) bit for bit.
static bool compare(const char* what, const HostTensor& g, const HostTensor& r, int dt, const std::vector<uint8_t>& zero,
                    double* rel_out, std::string* msg) {
  const double tol = dt == FLASH_DTYPE_BF16 ? 1.5e-2 : 3e-3;
  double maxref = 0, maxerr = 0, se = 0, sr = 0;
  for (int64_t a = 0; a < r.shape[0]; ++a)
    for (int64_t s = 0; s < r.shape[1]; ++s)
      for (int64_t h = 0; h < r.shape[2]; ++h)
        for (int64_t e = 0; e < r.shape[3]; ++e) maxref = std::max(maxref, (double)std::fabs(from_bits(r.data[r.off(a, s, h, e)], dt)));
  int64_t bad = 0, nans = 0, nonzero_empty = 0;
  for (int64_t a = 0; a < r.shape[0]; ++a)
    for (int64_t s = 0; s < r.shape[1]; ++s)
      for (int64_t h = 0; h < r.shape[2]; ++h) {
        const bool must_zero = zero[size_t((a * r.shape[1] + s) * r.shape[2] + h)] != 0;
        bool ref_zero = true, got_zero = true;
        for (int64_t e = 0; e < r.shape[3]; ++e) {
          const float gv = from_bits(g.data[g.off(a, s, h, e)], dt), rv = from_bits(r.data[r.off(a, s, h, e)], dt);
          ref_zero &= rv == 0.0f;
          got_zero &= gv == 0.0f;
          if (std::isnan(gv) || std::isinf(gv)) { ++nans; continue; }
          const double err = std::fabs(double(gv) - rv);
          maxerr = std::max(maxerr, err);
          se += err * err, sr += double(rv) * rv;
          if (err > tol * (maxref + std::fabs(rv)) + 1e-4) ++bad;  // floor: dS = P (dP - D) of 1-key rows
        }
        if (must_zero && !(ref_zero && got_zero)) ++nonzero_empty;  // an empty row / unseen key must be exactly 0
      }
  const double rel = sr > 0 ? std::sqrt(se / sr) : std::sqrt(se);
  *rel_out = rel;
  char buf[256];
  std::snprintf(buf, sizeof buf, " %s: max|ref|=%.3g max|err|=%.3g relL2=%.2e%s%s%s", what, maxref, maxerr, rel,
                bad ? " BAD" : "", nans ? " NAN" : "", nonzero_empty ? " NONZERO-EMPTY" : "");
  *msg += buf;
  if (bad || nans || nonzero_empty) {
    std::snprintf(buf, sizeof buf, "(bad=%lld nan=%lld nonzero_empty=%lld)", (long long)bad, (long long)nans,
                  (long long)nonzero_empty);
    *msg += buf;
  }
  return bad == 0 && nans == 0 && nonzero_empty == 0;
}

static void run_case(const Case& c, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  HostTensor q = make(c.b, c.sq, c.hq, c.d, c.layout, false), o = make(c.b, c.sq, c.hq, c.d, c.layout, false);
  HostTensor dO = make(c.b, c.sq, c.hq, c.d, c.layout, false);
  HostTensor k = make(c.b, c.sk, c.hkv, c.d, c.layout, c.kv_bcast), v = make(c.b, c.sk, c.hkv, c.d, c.layout, c.kv_bcast);
  HostTensor dq = make(c.b, c.sq, c.hq, c.d, c.layout, false);
  HostTensor dk = make(c.b, c.sk, c.hkv, c.d, c.layout, false), dv = make(c.b, c.sk, c.hkv, c.d, c.layout, false);
  for (auto* t : {&q, &k, &v, &dO})
    for (auto& x : t->data) x = to_bits(nd(rng), c.dt);
  const size_t lse_n = size_t(c.b) * c.hq * c.sq;
  std::vector<float> lse(lse_n, NAN);

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

  // CPU naive forward: O and LSE, the backward's inputs on both sides.
  flash_fwd_args fa;
  flash_fwd_args_init(&fa);
  fa.q = desc(q.data.data(), q, c.dt, FLASH_DEVICE_CPU), fa.k = desc(k.data.data(), k, c.dt, FLASH_DEVICE_CPU);
  fa.v = desc(v.data.data(), v, c.dt, FLASH_DEVICE_CPU), fa.o = desc(o.data.data(), o, c.dt, FLASH_DEVICE_CPU);
  fa.lse = lse_desc(lse.data(), c.b, c.hq, c.sq, FLASH_DEVICE_CPU);
  fa.softmax_scale = c.scale, fa.causal = c.causal, fa.causal_alignment = c.align, fa.window_left = c.wl,
  fa.window_right = c.wr, fa.algorithm = FLASH_ALGO_NAIVE;
  if (c.block_mask) fa.block_mask = &hm;
  int32_t st = flash_fwd(&fa);
  if (st != FLASH_OK) {
    std::printf("FAIL %-28s cpu fwd status %d: %s\n", c.name, st, flash_last_error_message());
    ++g_fail;
    return;
  }

  auto fill = [&](flash_bwd_args& a, bool gpu, void* pq, void* pk, void* pv, void* po, void* pdo, float* plse, void* pdq,
                  void* pdk, void* pdv) {
    flash_bwd_args_init(&a);
    const int dev = gpu ? FLASH_DEVICE_CUDA : FLASH_DEVICE_CPU;
    a.q = desc(pq, q, c.dt, dev), a.k = desc(pk, k, c.dt, dev), a.v = desc(pv, v, c.dt, dev), a.o = desc(po, o, c.dt, dev);
    a.d_o = desc(pdo, dO, c.dt, dev), a.lse = lse_desc(plse, c.b, c.hq, c.sq, dev);
    a.dq = desc(pdq, dq, c.dt, dev), a.dk = desc(pdk, dk, c.dt, dev), a.dv = desc(pdv, dv, c.dt, dev);
    a.softmax_scale = c.scale, a.causal = c.causal, a.causal_alignment = c.align, a.window_left = c.wl,
    a.window_right = c.wr, a.algorithm = FLASH_ALGO_NAIVE;
    if (c.block_mask) a.block_mask = gpu ? &dm : &hm;
  };

  // GPU backward (outputs NaN-poisoned), twice: the second must be bitwise equal.
  void *gq = upload(q), *gk = upload(k), *gv = upload(v), *go = upload(o), *gdo = upload(dO);
  void *gdq = upload(dq), *gdk = upload(dk), *gdv = upload(dv);
  float* glse;
  CK(cudaMalloc(&glse, lse_n * 4));
  CK(cudaMemcpy(glse, lse.data(), lse_n * 4, cudaMemcpyHostToDevice));
  HostTensor gdq_h = dq, gdk_h = dk, gdv_h = dv;
  bool same = true;
  for (int run = 0; run < 2; ++run) {
    CK(cudaMemset(gdq, 0xFF, dq.data.size() * 2));
    CK(cudaMemset(gdk, 0xFF, dk.data.size() * 2));
    CK(cudaMemset(gdv, 0xFF, dv.data.size() * 2));
    flash_bwd_args ga;
    fill(ga, true, gq, gk, gv, go, gdo, glse, gdq, gdk, gdv);
    st = flash_bwd(&ga);
    CK(cudaDeviceSynchronize());
    if (st != FLASH_OK || ga.algorithm_used != FLASH_ALGO_NAIVE) {
      std::printf("FAIL %-28s gpu bwd status %d: %s\n", c.name, st, flash_last_error_message());
      ++g_fail;
      return;
    }
    HostTensor a = dq, b = dk, cc = dv;
    CK(cudaMemcpy(a.data.data(), gdq, dq.data.size() * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(b.data.data(), gdk, dk.data.size() * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(cc.data.data(), gdv, dv.data.size() * 2, cudaMemcpyDeviceToHost));
    if (run == 0) gdq_h = a, gdk_h = b, gdv_h = cc;
    else same = a.data == gdq_h.data && b.data == gdk_h.data && cc.data == gdv_h.data;
  }

  // CPU naive backward.
  flash_bwd_args ca;
  fill(ca, false, q.data.data(), k.data.data(), v.data.data(), o.data.data(), dO.data.data(), lse.data(), dq.data.data(),
       dk.data.data(), dv.data.data());
  st = flash_bwd(&ca);
  if (st != FLASH_OK) {
    std::printf("FAIL %-28s cpu bwd status %d: %s\n", c.name, st, flash_last_error_message());
    ++g_fail;
    return;
  }
  std::string msg;
  double r1, r2, r3;
  // Rows that must be exactly 0: dq where LSE = -inf; dk, dv where no query of the group sees the key
  // (the reference dV row is exactly 0: P is 0 there, and nonzero to the last bit elsewhere in practice).
  std::vector<uint8_t> zq(size_t(c.b) * c.sq * c.hq), zk(size_t(c.b) * c.sk * c.hkv);
  int64_t empty_rows = 0, unseen_keys = 0;
  for (int a = 0; a < c.b; ++a)
    for (int i = 0; i < c.sq; ++i)
      for (int h = 0; h < c.hq; ++h)
        empty_rows += zq[(size_t(a) * c.sq + i) * c.hq + h] = std::isinf(lse[(size_t(a) * c.hq + h) * c.sq + i]) ? 1 : 0;
  for (int a = 0; a < c.b; ++a)
    for (int j = 0; j < c.sk; ++j)
      for (int h = 0; h < c.hkv; ++h) {
        bool z = true;
        for (int e = 0; e < c.d; ++e) z &= from_bits(dv.data[dv.off(a, j, h, e)], c.dt) == 0.0f;
        unseen_keys += zk[(size_t(a) * c.sk + j) * c.hkv + h] = z ? 1 : 0;
      }
  bool ok = compare("dq", gdq_h, dq, c.dt, zq, &r1, &msg);
  ok &= compare("dk", gdk_h, dk, c.dt, zk, &r2, &msg);
  ok &= compare("dv", gdv_h, dv, c.dt, zk, &r3, &msg);
  char zb[96];
  std::snprintf(zb, sizeof zb, " [empty rows %lld, unseen keys %lld]", (long long)empty_rows, (long long)unseen_keys);
  msg += zb;
  if (!same) msg += " NOT-DETERMINISTIC";
  ok &= same;
  if (!ok) ++g_fail;
  std::printf("%s %-28s b%d sq%d sk%d hq%d hkv%d d%d %s%s\n", ok ? "ok  " : "FAIL", c.name, c.b, c.sq, c.sk, c.hq, c.hkv, c.d,
              c.dt == FLASH_DTYPE_BF16 ? "bf16" : "fp16", msg.c_str());
  for (void* p : {gq, gk, gv, go, gdo, gdq, gdk, gdv}) cudaFree(p);
  cudaFree(glse), cudaFree(dnum), cudaFree(didx);
}

static void expect(bool cond, const char* what) {
  std::printf("%s %s\n", cond ? "ok  " : "FAIL", what);
  if (!cond) ++g_fail;
}

// Dense [b, s, h, d] backward problem on the GPU (random inputs if init; O, LSE from the GPU naive forward).
struct Problem {
  flash_bwd_args a;
  void *q = nullptr, *k = nullptr, *v = nullptr, *o = nullptr, *d_o = nullptr, *dq = nullptr, *dk = nullptr, *dv = nullptr;
  float* lse = nullptr;
  size_t n = 0;
  Problem(int b, int s, int h, int d, int dt, int causal, bool init) {
    n = size_t(b) * s * h * d;
    for (void** p : {&q, &k, &v, &o, &d_o, &dq, &dk, &dv}) CK(cudaMalloc(p, n * 2));
    CK(cudaMalloc(&lse, size_t(b) * h * s * 4));
    const int64_t shape[4] = {b, s, h, d};
    auto t = [&](void* p) { return flash_tensor_contiguous(p, dt, FLASH_DEVICE_CUDA, 0, 4, shape); };
    const int64_t lshape[3] = {b, h, s};
    const flash_tensor tl = flash_tensor_contiguous(lse, FLASH_DTYPE_FP32, FLASH_DEVICE_CUDA, 0, 3, lshape);
    if (init) {
      std::vector<uint16_t> hbuf(n);
      std::mt19937 rng(7);
      std::normal_distribution<float> nd;
      for (void* p : {q, k, v, d_o}) {
        for (auto& x : hbuf) x = to_bits(nd(rng), dt);
        CK(cudaMemcpy(p, hbuf.data(), n * 2, cudaMemcpyHostToDevice));
      }
      flash_fwd_args f;
      flash_fwd_args_init(&f);
      f.q = t(q), f.k = t(k), f.v = t(v), f.o = t(o), f.lse = tl, f.causal = causal, f.algorithm = FLASH_ALGO_NAIVE;
      if (flash_fwd(&f) != FLASH_OK) std::printf("forward failed: %s\n", flash_last_error_message());
      CK(cudaDeviceSynchronize());
    }
    flash_bwd_args_init(&a);
    a.q = t(q), a.k = t(k), a.v = t(v), a.o = t(o), a.d_o = t(d_o), a.lse = tl, a.dq = t(dq), a.dk = t(dk), a.dv = t(dv);
    a.causal = causal;
    a.algorithm = FLASH_ALGO_NAIVE;
  }
  ~Problem() {
    for (void* p : {q, k, v, o, d_o, dq, dk, dv}) cudaFree(p);
    cudaFree(lse);
  }
};

static void time_bwd(int d, int causal, bool own_ws) {
  const int b = 4, h = 16, s = 4096;
  Problem pr(b, s, h, d, FLASH_DTYPE_BF16, causal, true);
  size_t ws = 0;
  flash_bwd_workspace_size(&pr.a, &ws);
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
    if (flash_bwd(&pr.a) != FLASH_OK) { std::printf("FAIL timing: %s\n", flash_last_error_message()); ++g_fail; return; }
  std::vector<float> ms;
  for (int i = 0; i < 20; ++i) {
    CK(cudaEventRecord(e0, st));
    flash_bwd(&pr.a);
    CK(cudaEventRecord(e1, st));
    CK(cudaEventSynchronize(e1));
    float t;
    CK(cudaEventElapsedTime(&t, e0, e1));
    ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  const double med = ms[ms.size() / 2];
  const double flops = 2.5 * 4.0 * b * h * double(s) * s * d / (causal ? 2 : 1);  // fa-bench's backward count
  std::printf("time naive BWD bf16 b4 h16 s4096 d%d causal=%d workspace=%s (%.2f GiB): median %.3f ms (min %.3f, max %.3f) "
              "= %.1f TFLOP/s effective (2.5 x fwd FLOPs)\n",
              d, causal, own_ws ? "caller " : "library", ws / 1073741824.0, med, ms.front(), ms.back(), flops / med / 1e9);
  cudaFree(wsp);
  cudaEventDestroy(e0), cudaEventDestroy(e1);
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
  std::mt19937 rng(4321);
  const int BF = FLASH_DTYPE_BF16, FP = FLASH_DTYPE_FP16;
  if (!timing_only) {
    std::vector<Case> cases = {
        {"dense small", 1, 1, 1, 1, 1, 8, BF},
        {"dense odd", 2, 77, 131, 3, 3, 64, BF},
        {"dense odd fp16", 2, 131, 77, 4, 2, 128, FP},
        {"gqa 8:2 causal br", 2, 200, 300, 8, 2, 128, BF, 1},
        {"gqa 6:3 causal tl", 1, 300, 200, 6, 3, 64, FP, 1, FLASH_ALIGN_TOP_LEFT},
        {"mqa causal sq>sk (empty)", 2, 300, 100, 4, 1, 64, BF, 1},
        {"causal br sq<sk", 1, 100, 300, 2, 2, 64, FP, 1},
        {"window 32/16", 2, 257, 257, 4, 4, 96, BF, 0, FLASH_ALIGN_BOTTOM_RIGHT, 32, 16},
        {"window left only tl", 1, 190, 333, 2, 1, 32, FP, 0, FLASH_ALIGN_TOP_LEFT, 50, -1},
        {"window right only", 1, 333, 190, 2, 2, 32, BF, 0, FLASH_ALIGN_BOTTOM_RIGHT, -1, 7},
        {"window + causal d256", 1, 513, 513, 2, 2, 256, FP, 1, FLASH_ALIGN_BOTTOM_RIGHT, 100, -1},
        {"window empty rows", 1, 100, 400, 2, 2, 64, BF, 0, FLASH_ALIGN_TOP_LEFT, 0, -1},
        {"decode sq=1 gqa", 3, 1, 1000, 8, 2, 128, BF, 1},
        {"d=8 long k", 1, 17, 2049, 2, 1, 8, FP},
    };
    Case c;
    c = {"BHSD layout gqa causal", 2, 129, 257, 4, 2, 64, BF, 1}; c.layout = 1; cases.push_back(c);
    c = {"BHSD layout mha", 2, 129, 130, 3, 3, 64, FP}; c.layout = 1; cases.push_back(c);
    c = {"padded rows mha", 2, 100, 90, 4, 4, 128, FP}; c.layout = 2; cases.push_back(c);
    c = {"padded rows gqa", 2, 90, 100, 4, 2, 64, BF, 1, FLASH_ALIGN_TOP_LEFT}; c.layout = 2; cases.push_back(c);
    c = {"kv batch broadcast", 3, 64, 64, 2, 2, 64, BF}; c.kv_bcast = true; cases.push_back(c);
    c = {"custom scale", 1, 99, 101, 2, 2, 64, BF}; c.scale = 0.37f; cases.push_back(c);
    c = {"block mask 64x64 gqa", 2, 300, 500, 4, 2, 64, BF}; c.block_mask = true; cases.push_back(c);
    c = {"block mask 128x64 causal", 1, 400, 400, 2, 1, 128, FP, 1}; c.block_mask = true; c.bm = 128; cases.push_back(c);
    c = {"block mask 64x128 window", 1, 333, 777, 3, 3, 64, BF, 0, FLASH_ALIGN_BOTTOM_RIGHT, 200, 50};
    c.block_mask = true; c.bn = 128; cases.push_back(c);
    c = {"many heads (chunked) gqa", 1, 4200, 4200, 24, 12, 8, BF, 1}; cases.push_back(c);  // 3 chunks of 4 kv heads
    c = {"chunked mha fp16", 1, 3000, 3000, 16, 16, 16, FP}; cases.push_back(c);
    for (const Case& x : cases) run_case(x, rng);

    // Concurrency: 4 threads on 4 streams, same problem; results bitwise equal to a single call.
    {
      Problem pr(2, 333, 8, 64, BF, 1, true);
      const size_t n = pr.n;
      std::vector<uint16_t> ref(3 * n);
      CK(cudaMemset(pr.dq, 0, n * 2));
      flash_bwd(&pr.a);
      CK(cudaDeviceSynchronize());
      CK(cudaMemcpy(ref.data(), pr.dq, n * 2, cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(ref.data() + n, pr.dk, n * 2, cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(ref.data() + 2 * n, pr.dv, n * 2, cudaMemcpyDeviceToHost));
      std::vector<void*> outs(12);
      for (auto& p : outs) CK(cudaMalloc(&p, n * 2));
      std::vector<int> status(4, 0);
      std::vector<std::thread> ts;
      for (int t = 0; t < 4; ++t)
        ts.emplace_back([&, t] {
          cudaSetDevice(0);
          cudaStream_t s;
          cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
          flash_bwd_args a = pr.a;
          a.dq.data = outs[3 * t], a.dk.data = outs[3 * t + 1], a.dv.data = outs[3 * t + 2];
          a.stream = s;
          for (int i = 0; i < 10; ++i) status[t] |= flash_bwd(&a);
          cudaStreamSynchronize(s);
          cudaStreamDestroy(s);
        });
      for (auto& t : ts) t.join();
      bool same = true;
      for (int t = 0; t < 4; ++t) {
        std::vector<uint16_t> got(3 * n);
        for (int g = 0; g < 3; ++g) CK(cudaMemcpy(got.data() + g * n, outs[3 * t + g], n * 2, cudaMemcpyDeviceToHost));
        same &= status[t] == 0 && got == ref;
      }
      for (auto p : outs) cudaFree(p);
      expect(same, "bwd: 4 threads x 4 streams x 10 calls: bitwise equal to a single call");
    }

    // Workspace: too small from the caller, and out of device memory when the library allocates.
    {
      Problem pr(1, 1000, 2, 64, BF, 0, true);
      size_t ws = 0;
      flash_bwd_workspace_size(&pr.a, &ws);
      void* w;
      CK(cudaMalloc(&w, ws));
      pr.a.workspace = w, pr.a.workspace_size = ws - 1;
      expect(flash_bwd(&pr.a) == FLASH_ERROR_WORKSPACE_TOO_SMALL, "bwd: caller workspace 1 byte short -> WORKSPACE_TOO_SMALL");
      pr.a.workspace_size = ws;
      expect(flash_bwd(&pr.a) == FLASH_OK, "bwd: caller workspace of the queried size -> OK");
      CK(cudaDeviceSynchronize());
      cudaFree(w);
      std::printf("     bwd workspace for b1 s1000 h2 d64: %zu bytes\n", ws);
    }
    for (int s : {32768, 131072}) {
      Problem pr(1, s, 1, 64, BF, 0, false);
      CK(cudaMemset(pr.lse, 0, size_t(s) * 4));
      size_t ws = 0;
      flash_bwd_workspace_size(&pr.a, &ws);
      const int32_t st = flash_bwd(&pr.a);
      const cudaError_t e = cudaDeviceSynchronize();
      std::printf("     bwd s=%d: workspace %.1f GiB -> status %d (%s) \"%s\", device afterwards: %s\n", s, ws / 1073741824.0,
                  st, flash_status_string(st), st == FLASH_OK ? "" : flash_last_error_message(), cudaGetErrorString(e));
      if (s == 131072) expect(st == FLASH_ERROR_OUT_OF_MEMORY && e == cudaSuccess, "bwd 131072 x 131072 -> OUT_OF_MEMORY, device fine");
      else expect((st == FLASH_OK || st == FLASH_ERROR_OUT_OF_MEMORY) && e == cudaSuccess, "bwd 32768 x 32768 -> OK or OUT_OF_MEMORY");
    }
    run_case({"after OOM", 1, 129, 129, 2, 2, 64, BF, 1}, rng);
  }
  for (int d : {128, 64}) {
    time_bwd(d, 0, true);
    time_bwd(d, 1, true);
  }
  time_bwd(128, 0, false);
  std::printf(g_fail ? "%d FAILED\n" : "ALL PASSED\n", g_fail);
  return g_fail ? 1 : 0;
}
