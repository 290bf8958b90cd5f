// tests/support/cases.hpp -- the random cases the CPU and GPU suites share: the forward sweep (sweep_case), the
// KV-cache cases (contiguous or paged caches, append, GQA, masks) and the combine cases, with their checks against
// the fp64 reference. The GPU tests mirror a KV-cache case to device memory.
//
// Every case: fresh random inputs, a cache whose slots no query may see hold NaN (a read of one would show in O),
// outputs poisoned with NaN before the call. The cache afterwards must equal the expected cache byte for byte
// (the appended rows in their slots, everything else untouched). O and LSE are checked against the fp64 reference
// (reference.hpp) run per sequence over the keys it sees, gathered from the expected cache, with the error bounded
// as every forward test's: 2 x the naive same-dtype error + one output rounding.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "flash.h"
#include "harness.hpp"
#include "reference.hpp"

namespace flash_test {

// Runs one random case on (device, algorithm) and checks it. `index` picks the case: the same index
// and LIBFLASH_TEST_SEED give the same case.
inline void sweep_case(int index, int32_t device_type, int32_t algorithm, bool with_masks) {
  std::mt19937_64 rng(base_seed() + 7919u * static_cast<uint64_t>(index) + 104729u * static_cast<uint64_t>(algorithm));
  CaseSpec spec = random_spec(rng, device_type == FLASH_DEVICE_CUDA, with_masks);
  if (algorithm == FLASH_ALGO_SM90) {
    // sm90 runs head dims 64, 128 and 256 (AUTO hands the others to sm80; GpuEdges checks the refusal).
    spec.head_dim = int64_t{64} << (index % 3);
    while (spec.batch * spec.heads_q * spec.seqlen_q * spec.seqlen_k * spec.head_dim > 60'000'000)
      spec.seqlen_k = std::max<int64_t>(1, spec.seqlen_k * 2 / 3);  // the reference's cost cap
  }
  Case c = make_case(spec, rng);
  int32_t used = -1;
  const int32_t s = device_type == FLASH_DEVICE_CUDA ? run_cuda(c, algorithm, 0, &used) : run_cpu(c, algorithm, &used);
  ASSERT_EQ(s, FLASH_OK) << flash_status_string(s) << ": " << flash_last_error_message() << "\n  case: " << spec.describe()
                         << "\n  LIBFLASH_TEST_SEED=" << base_seed();
  EXPECT_EQ(used, algorithm);
  const Check ch = check_case(c);
  EXPECT_TRUE(ch.ok) << ch.message << "\n  case: " << spec.describe() << "\n  LIBFLASH_TEST_SEED=" << base_seed();
}

}  // namespace flash_test

namespace kv_test {

using flash_test::base_seed;

inline size_t esize(int32_t dtype) { return dtype == FLASH_DTYPE_FP32 ? 4 : 2; }
inline const char* dtype_str(int32_t t) { return t == FLASH_DTYPE_FP32 ? "fp32" : t == FLASH_DTYPE_FP16 ? "fp16" : "bf16"; }

// A packed host tensor.
struct Buf {
  std::vector<unsigned char> bytes;
  flash_tensor desc{};
  Buf() = default;
  Buf(int32_t dtype, int ndim, std::vector<int64_t> shape) {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    bytes.assign(static_cast<size_t>(std::max<int64_t>(n, 1)) * esize(dtype), 0xFF);  // NaN
    desc = flash_tensor_contiguous(bytes.data(), dtype, FLASH_DEVICE_CPU, 0, ndim, shape.data());
  }
  int64_t elements() const { return static_cast<int64_t>(bytes.size() / esize(desc.dtype)); }
  void poison() { std::fill(bytes.begin(), bytes.end(), 0xFF); }
  void set(int64_t off, double x) {
    if (desc.dtype == FLASH_DTYPE_FP32) reinterpret_cast<float*>(bytes.data())[off] = static_cast<float>(x);
    else if (desc.dtype == FLASH_DTYPE_FP16) reinterpret_cast<uint16_t*>(bytes.data())[off] = flash_ref::fp16_round(x);
    else reinterpret_cast<uint16_t*>(bytes.data())[off] = flash_ref::bf16_round(x);
  }
  double get(int64_t off) const { return flash_ref::load(bytes.data(), desc.dtype, off); }
  void fill_random(std::mt19937_64& rng, double mag = 1.0) {
    std::normal_distribution<double> dist(0.0, mag);
    for (int64_t x = 0; x < elements(); ++x) set(x, dist(rng));
  }
};

struct KvSpec {
  int64_t batch = 1, seqlen_new = 1, heads_q = 1, heads_kv = 1, head_dim = 64;
  int32_t dtype = FLASH_DTYPE_FP32;
  bool paged = false;
  int64_t page_size = 16;
  bool batch_idx = false;      // contiguous: through cache_batch_idx
  bool append = true;          // k_new / v_new given
  int causal = 0, window_left = -1, window_right = -1;
  int32_t num_splits = 1;
  bool want_lse = true;
  float softmax_scale = 0.0f;
  std::vector<int32_t> seqlens;  // cache_seqlens; filled at random when empty
  int64_t max_cached = 300;      // largest random cache_seqlens
  std::string describe() const {
    std::ostringstream s;
    s << "b=" << batch << " sn=" << seqlen_new << " hq=" << heads_q << " hkv=" << heads_kv << " d=" << head_dim << " "
      << dtype_str(dtype) << (paged ? " paged ps=" + std::to_string(page_size) : std::string(" contiguous"))
      << (batch_idx ? " batch_idx" : "") << (append ? " append" : " no-append") << " causal=" << causal << " window=("
      << window_left << "," << window_right << ") splits=" << num_splits << " scale=" << softmax_scale << " seqlens=";
    for (int32_t n : seqlens) s << n << ",";
    return s.str();
  }
};

struct KvCase {
  KvSpec spec;
  Buf q, k_cache, v_cache, k_new, v_new, o, lse;
  Buf k_expected, v_expected;  // the caches after a correct call
  std::vector<int32_t> seqlens, batch_idx, block_table;
  int64_t max_pages = 0, bt_stride = 0, rows = 0, len = 0;  // cache rows/pages and positions per row/page

  // Element offset of (position t, head h, 0) of sequence b in the cache.
  int64_t slot(int64_t b, int64_t t, int64_t h) const {
    const int64_t hkv = spec.heads_kv, d = spec.head_dim;
    if (spec.paged) {
      const int64_t page = block_table[b * bt_stride + t / len];
      return ((page * len + t % len) * hkv + h) * d;
    }
    const int64_t row = spec.batch_idx ? batch_idx[b] : b;
    return ((row * len + t) * hkv + h) * d;
  }
  int64_t keys(int64_t b) const { return seqlens[b] + (spec.append ? spec.seqlen_new : 0); }
};

inline KvCase make_kv_case(const KvSpec& spec, std::mt19937_64& rng) {
  auto uni = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  KvCase c;
  c.spec = spec;
  const int64_t B = spec.batch, SN = spec.seqlen_new, HQ = spec.heads_q, HKV = spec.heads_kv, D = spec.head_dim;
  c.seqlens = spec.seqlens;
  if (c.seqlens.empty())
    for (int64_t b = 0; b < B; ++b) {
      const int64_t pick = uni(0, 3);
      c.seqlens.push_back(static_cast<int32_t>(pick == 0 ? 0 : pick == 1 ? 1 : uni(2, spec.max_cached)));
    }
  c.spec.seqlens = c.seqlens;
  int64_t max_keys = 0;
  for (int64_t b = 0; b < B; ++b) max_keys = std::max(max_keys, c.keys(b));
  if (spec.paged) {
    c.len = spec.page_size;
    int64_t total = 0;
    for (int64_t b = 0; b < B; ++b) total += (c.keys(b) + c.len - 1) / c.len;
    c.max_pages = std::max<int64_t>(1, (max_keys + c.len - 1) / c.len + uni(0, 2));
    c.bt_stride = c.max_pages + uni(0, 1) * 3;
    c.rows = total + uni(1, 3);  // spare pages, never referenced: must stay untouched
    std::vector<int32_t> pages(c.rows);
    std::iota(pages.begin(), pages.end(), 0);
    std::shuffle(pages.begin(), pages.end(), rng);  // random page order
    c.block_table.assign(B * c.bt_stride, -77);     // unused entries: garbage the call must not read
    int64_t next = 0;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t j = 0; j < (c.keys(b) + c.len - 1) / c.len; ++j) c.block_table[b * c.bt_stride + j] = pages[next++];
  } else {
    c.len = std::max<int64_t>(1, max_keys + uni(0, 5));
    c.rows = B + (spec.batch_idx ? uni(0, 3) : 0);
    if (spec.batch_idx) {
      std::vector<int32_t> rows(c.rows);
      std::iota(rows.begin(), rows.end(), 0);
      std::shuffle(rows.begin(), rows.end(), rng);
      c.batch_idx.assign(rows.begin(), rows.begin() + B);
    }
  }
  c.q = Buf(spec.dtype, 4, {B, SN, HQ, D});
  c.q.fill_random(rng);
  c.o = Buf(spec.dtype, 4, {B, SN, HQ, D});
  if (spec.want_lse) c.lse = Buf(FLASH_DTYPE_FP32, 3, {B, HQ, SN});
  c.k_cache = Buf(spec.dtype, 4, {c.rows, c.len, HKV, D});
  c.v_cache = Buf(spec.dtype, 4, {c.rows, c.len, HKV, D});
  // The cached keys random; every other slot NaN (poison for a stray read, and the append's targets).
  std::normal_distribution<double> dist(0.0, 1.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < c.seqlens[b]; ++t)
      for (int64_t h = 0; h < HKV; ++h)
        for (int64_t e = 0; e < D; ++e) {
          c.k_cache.set(c.slot(b, t, h) + e, dist(rng));
          c.v_cache.set(c.slot(b, t, h) + e, dist(rng));
        }
  c.k_expected = c.k_cache;
  c.v_expected = c.v_cache;
  if (spec.append) {
    c.k_new = Buf(spec.dtype, 4, {B, SN, HKV, D});
    c.v_new = Buf(spec.dtype, 4, {B, SN, HKV, D});
    c.k_new.fill_random(rng);
    c.v_new.fill_random(rng);
    const size_t es = esize(spec.dtype);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < SN; ++t)
        for (int64_t h = 0; h < HKV; ++h) {
          const int64_t src = ((b * SN + t) * HKV + h) * D, dst = c.slot(b, c.seqlens[b] + t, h);
          std::memcpy(&c.k_expected.bytes[dst * es], &c.k_new.bytes[src * es], D * es);
          std::memcpy(&c.v_expected.bytes[dst * es], &c.v_new.bytes[src * es], D * es);
        }
  }
  // Retarget descriptors at the copies' own bytes.
  c.k_expected.desc.data = c.k_expected.bytes.data();
  c.v_expected.desc.data = c.v_expected.bytes.data();
  return c;
}

inline void fill_kv_args(KvCase& c, flash_kvcache_args* a) {
  flash_kvcache_args_init(a);
  a->q = c.q.desc;
  a->k_cache = c.k_cache.desc;
  a->v_cache = c.v_cache.desc;
  if (c.spec.append) a->k_new = c.k_new.desc, a->v_new = c.v_new.desc;
  a->o = c.o.desc;
  if (c.spec.want_lse) a->lse = c.lse.desc;
  a->cache_seqlens = c.seqlens.data();
  if (c.spec.batch_idx) a->cache_batch_idx = c.batch_idx.data();
  if (c.spec.paged) {
    a->block_table = c.block_table.data();
    a->max_pages_per_seq = static_cast<int32_t>(c.max_pages);
    a->block_table_stride = c.bt_stride == c.max_pages ? 0 : c.bt_stride;  // 0: the packed default
  }
  a->softmax_scale = c.spec.softmax_scale;
  a->causal = c.spec.causal;
  a->window_left = c.spec.window_left;
  a->window_right = c.spec.window_right;
  a->num_splits = c.spec.num_splits;
}

inline int32_t run_kv(KvCase& c, flash_kvcache_args* out_args = nullptr, void* workspace = nullptr, size_t ws_size = 0) {
  c.o.poison();
  c.lse.poison();
  flash_kvcache_args a;
  fill_kv_args(c, &a);
  a.workspace = workspace;
  a.workspace_size = ws_size;
  const int32_t s = flash_fwd_kvcache(&a);
  if (out_args) *out_args = a;
  return s;
}

// O and LSE against the fp64 reference, per sequence over its keys in the expected cache.
inline flash_test::Check check_kv(const KvCase& c) {
  const KvSpec& s = c.spec;
  const int64_t SN = s.seqlen_new, HQ = s.heads_q, HKV = s.heads_kv, D = s.head_dim;
  const double scale = s.softmax_scale != 0.0f ? double(s.softmax_scale) : 1.0 / std::sqrt(double(D));
  const double inf = std::numeric_limits<double>::infinity();
  flash_test::Check ch;
  std::ostringstream msg;
  double max_ref = 0, max_lse = 0;
  bool ok = true;
  for (int64_t b = 0; b < s.batch; ++b) {
    const int64_t L = c.keys(b);
    // Dense K_b, V_b [1, L, hkv, d] gathered from the expected cache (bytes as they are).
    Buf kb(s.dtype, 4, {1, std::max<int64_t>(L, 1), HKV, D}), vb(s.dtype, 4, {1, std::max<int64_t>(L, 1), HKV, D});
    const size_t es = esize(s.dtype);
    for (int64_t t = 0; t < L; ++t)
      for (int64_t h = 0; h < HKV; ++h) {
        std::memcpy(&kb.bytes[((t * HKV) + h) * D * es], &c.k_expected.bytes[c.slot(b, t, h) * es], D * es);
        std::memcpy(&vb.bytes[((t * HKV) + h) * D * es], &c.v_expected.bytes[c.slot(b, t, h) * es], D * es);
      }
    kb.desc.shape[1] = vb.desc.shape[1] = L;
    flash_tensor qb = c.q.desc;
    qb.data = const_cast<unsigned char*>(c.q.bytes.data()) + b * c.q.desc.strides[0] * es;
    qb.shape[0] = 1;
    flash_ref::Mask mask;
    mask.causal = s.causal;
    mask.alignment = FLASH_ALIGN_BOTTOM_RIGHT;
    mask.window_left = s.window_left;
    mask.window_right = s.window_right;
    const flash_ref::Problem pr{1, SN, L, HQ, HKV, D, scale, mask};
    const flash_ref::Result exact = flash_ref::attention(pr, qb, kb.desc, vb.desc, 0);
    const flash_ref::Result naive = flash_ref::attention(pr, qb, kb.desc, vb.desc, 1);
    for (int64_t i = 0; i < SN; ++i)
      for (int64_t h = 0; h < HQ; ++h) {
        const double lref = exact.lse[h * SN + i];
        const bool empty = lref == -inf;
        for (int64_t e = 0; e < D; ++e) {
          const double got = c.o.get(((b * SN + i) * HQ + h) * D + e), ref = exact.o[(i * HQ + h) * D + e];
          if (std::isnan(got) || std::isinf(got) || (empty && got != 0.0)) {
            if (ok) msg << "O[" << b << "," << i << "," << h << "," << e << "] = " << got << " (ref " << ref << "); ";
            ok = false;
            ch.err = inf;
            continue;
          }
          ch.err = std::max(ch.err, std::fabs(got - ref));
          ch.naive_err = std::max(ch.naive_err, std::fabs(naive.o[(i * HQ + h) * D + e] - ref));
          max_ref = std::max(max_ref, std::fabs(ref));
        }
        if (!s.want_lse) continue;
        const double got = reinterpret_cast<const float*>(c.lse.bytes.data())[(b * HQ + h) * SN + i];
        if (empty) {
          if (got != -inf) ok = false, msg << "LSE[" << b << "," << h << "," << i << "] = " << got << " (want -inf); ";
          continue;
        }
        if (std::isnan(got) || std::isinf(got)) {
          ok = false, msg << "LSE[" << b << "," << h << "," << i << "] = " << got << "; ";
          continue;
        }
        ch.lse_err = std::max(ch.lse_err, std::fabs(got - lref));
        ch.lse_naive_err = std::max(ch.lse_naive_err, std::fabs(naive.lse[h * SN + i] - lref));
        max_lse = std::max(max_lse, std::fabs(lref));
      }
  }
  const double ulp = s.dtype == FLASH_DTYPE_FP32 ? std::ldexp(1.0, -24)
                     : s.dtype == FLASH_DTYPE_FP16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
  ch.bound = 2.0 * ch.naive_err + ulp * max_ref;
  ch.lse_bound = 2.0 * ch.lse_naive_err + std::ldexp(1.0, -23) * std::max(1.0, max_lse) * 4;
  ch.ok = ok && ch.err <= ch.bound && (!s.want_lse || ch.lse_err <= ch.lse_bound);
  msg << "max|O-ref|=" << ch.err << " bound=" << ch.bound << " (naive " << ch.naive_err << ") max|LSE-ref|=" << ch.lse_err
      << " bound=" << ch.lse_bound;
  ch.message = msg.str();
  return ch;
}

// Splits the keys of a random attention problem into parts, computes each part's exact (O, LSE) with the fp64
// reference, rounds them to part_dtype (LSE to fp32), and returns the descriptors.
struct CombineCase {
  int64_t B, S, H, D, SK;
  Buf q, k, v;
  std::vector<Buf> o_parts, lse_parts;
  std::vector<flash_tensor> od, ld;
  Buf o, lse;
  flash_ref::Result full_exact, full_naive;
};

inline CombineCase make_combine_case(std::mt19937_64& rng, int parts, int32_t part_dtype, int32_t in_dtype, int32_t out_dtype,
                              bool causal) {
  auto uni = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  CombineCase c;
  c.B = uni(1, 2), c.S = uni(1, 9), c.H = uni(1, 3), c.D = 8 * uni(1, 8), c.SK = uni(1, 400);
  c.q = Buf(in_dtype, 4, {c.B, c.S, c.H, c.D});
  c.k = Buf(in_dtype, 4, {c.B, c.SK, c.H, c.D});
  c.v = Buf(in_dtype, 4, {c.B, c.SK, c.H, c.D});
  c.q.fill_random(rng), c.k.fill_random(rng), c.v.fill_random(rng);
  const double scale = 1.0 / std::sqrt(double(c.D));
  flash_ref::Mask mask;
  mask.causal = causal;
  const flash_ref::Problem pr{c.B, c.S, c.SK, c.H, c.H, c.D, scale, mask};
  c.full_exact = flash_ref::attention(pr, c.q.desc, c.k.desc, c.v.desc, 0);
  c.full_naive = flash_ref::attention(pr, c.q.desc, c.k.desc, c.v.desc, 1);
  // Random cut points (parts may be empty); part p's keys [cut[p], cut[p+1]). The mask stays the full problem's:
  // each part is the reference over all keys with the others masked out.
  std::vector<int64_t> cut = {0, c.SK};
  for (int p = 1; p < parts; ++p) cut.push_back(uni(0, c.SK));
  std::sort(cut.begin(), cut.end());
  for (int p = 0; p < parts; ++p) {
    flash_ref::Mask mp;
    mp.block_m = 1 << 20, mp.block_n = 1, mp.n_qb = 1, mp.n_kb = c.SK;
    mp.listed.assign(c.SK, 0);
    for (int64_t j = cut[p]; j < cut[p + 1]; ++j) mp.listed[j] = 1;
    mp.causal = causal;
    const flash_ref::Problem pp{c.B, c.S, c.SK, c.H, c.H, c.D, scale, mp};
    const flash_ref::Result r = flash_ref::attention(pp, c.q.desc, c.k.desc, c.v.desc, 0);
    Buf ob(part_dtype, 4, {c.B, c.S, c.H, c.D}), lb(FLASH_DTYPE_FP32, 3, {c.B, c.H, c.S});
    for (int64_t x = 0; x < ob.elements(); ++x) ob.set(x, r.o[x]);
    for (int64_t x = 0; x < lb.elements(); ++x) lb.set(x, r.lse[x]);
    c.o_parts.push_back(std::move(ob));
    c.lse_parts.push_back(std::move(lb));
  }
  for (int p = 0; p < parts; ++p) {
    c.o_parts[p].desc.data = c.o_parts[p].bytes.data();
    c.lse_parts[p].desc.data = c.lse_parts[p].bytes.data();
    c.od.push_back(c.o_parts[p].desc);
    c.ld.push_back(c.lse_parts[p].desc);
  }
  c.o = Buf(out_dtype, 4, {c.B, c.S, c.H, c.D});
  c.lse = Buf(FLASH_DTYPE_FP32, 3, {c.B, c.H, c.S});
  return c;
}

}  // namespace kv_test
