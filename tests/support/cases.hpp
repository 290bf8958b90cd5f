// tests/support/cases.hpp -- the random cases the CPU and GPU suites share: the forward sweep (sweep_case), the
// KV-cache cases (contiguous or paged caches, append, GQA, masks), the combine cases and the packed variable-length
// cases (namespace varlen_test), with their checks against the fp64 reference. The GPU tests mirror a KV-cache or
// varlen case to device memory.
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
#include "harness_bwd.hpp"
#include "reference.hpp"
#include "reference_bwd.hpp"

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

// ---- Packed variable-length batches (flash.h 1.3) ---------------------------------------------------------------
// A varlen problem (VSpec: per-sequence lengths, seqused_k, rows after the last sequence, GQA, dtype, mask, layout),
// its packed host tensors (VCase: inputs random, outputs poisoned with 0xFF = NaN), the fp64 reference run sequence by
// sequence (each sequence is its own attention problem of batch 1: the references see 4-D views of its rows and know
// nothing of varlen), and the checks: the forward's bound as every forward test's, the gradients' as the backward
// tests' (harness_bwd.hpp), and every byte of an output outside the sequences' rows untouched. The CPU suite runs
// them on host tensors (test_varlen_cpu.cpp); the GPU suites mirror a case to device memory (run_fwd_cuda,
// run_bwd_cuda below: the offsets in device memory, as a CUDA call must have them).
namespace varlen_test {

using flash_test::HostTensor;
using flash_test::base_seed;

inline size_t esize(int32_t dtype) { return dtype == FLASH_DTYPE_FP32 ? 4 : 2; }
inline const double kInf = std::numeric_limits<double>::infinity();

// ---- A varlen problem -------------------------------------------------------------------------------------------

struct VSpec {
  std::vector<int64_t> lq, lk;  // per sequence: query rows, key slot rows
  std::vector<int64_t> used;    // seqused_k (empty: none)
  int64_t extra_q = 0, extra_k = 0;  // rows after the last sequence (never read, never written)
  int64_t hq = 2, hkv = 1, d = 32;
  int32_t dtype = FLASH_DTYPE_FP32;
  float scale = 0.0f;
  flash_ref::Mask mask;  // causal, alignment, window (no block mask: varlen refuses it)
  int layout = 0;        // 0 packed, 1 padded rows and heads, 2 head-major ([h, total, d] in memory)
  int64_t max_slack = 0;  // max_seqlen_* = longest + this
  bool want_lse = true;

  int64_t batch() const { return static_cast<int64_t>(lq.size()); }
  int64_t keys(int64_t i) const { return used.empty() ? lk[i] : used[i]; }  // seqlen_k_i
  std::string describe() const {
    std::ostringstream s;
    s << "lq={";
    for (size_t i = 0; i < lq.size(); ++i) s << (i ? "," : "") << lq[i];
    s << "} lk={";
    for (size_t i = 0; i < lk.size(); ++i) s << (i ? "," : "") << lk[i];
    s << "}";
    if (!used.empty()) {
      s << " used={";
      for (size_t i = 0; i < used.size(); ++i) s << (i ? "," : "") << used[i];
      s << "}";
    }
    s << " extra=(" << extra_q << "," << extra_k << ") hq=" << hq << " hkv=" << hkv << " d=" << d
      << " dtype=" << dtype << " scale=" << scale << " causal=" << mask.causal
      << " align=" << (mask.alignment == FLASH_ALIGN_TOP_LEFT ? "tl" : "br") << " window=(" << mask.window_left << ","
      << mask.window_right << ") layout=" << layout << " slack=" << max_slack << " lse=" << want_lse;
    return s.str();
  }
};

// A [rows, heads, d] host tensor in a layout, poisoned (0xFF bytes: NaN in every dtype).
inline HostTensor make3(int32_t dtype, int64_t rows, int64_t heads, int64_t d, int layout, std::mt19937_64& rng) {
  HostTensor t;
  flash_tensor& x = t.desc;
  x.dtype = dtype, x.device_type = FLASH_DEVICE_CPU, x.device_id = 0, x.ndim = 3;
  x.shape[0] = rows, x.shape[1] = heads, x.shape[2] = d;
  if (layout == 0) {
    x.strides[0] = heads * d, x.strides[1] = d, x.strides[2] = 1;
  } else if (layout == 1) {
    const int64_t head_pad = 8 * static_cast<int64_t>(rng() % 3), row_pad = 8 * static_cast<int64_t>(1 + rng() % 3);
    x.strides[2] = 1, x.strides[1] = d + head_pad, x.strides[0] = heads * (d + head_pad) + row_pad;
  } else {
    x.strides[2] = 1, x.strides[0] = d, x.strides[1] = rows * d;
  }
  t.bytes.assign(static_cast<size_t>(t.span_elements()) * esize(dtype), 0xFF);
  x.data = t.bytes.data();
  return t;
}

// The LSE: fp32 [heads, total_q]; head-major layouts write it transposed ([total_q, heads] in memory).
inline HostTensor make_lse(int64_t heads, int64_t rows, int layout) {
  HostTensor t;
  flash_tensor& x = t.desc;
  x.dtype = FLASH_DTYPE_FP32, x.device_type = FLASH_DEVICE_CPU, x.device_id = 0, x.ndim = 2;
  x.shape[0] = heads, x.shape[1] = rows;
  if (layout == 2) x.strides[0] = 1, x.strides[1] = heads;
  else x.strides[0] = rows + (layout == 1 ? 5 : 0), x.strides[1] = 1;
  t.bytes.assign(static_cast<size_t>(t.span_elements()) * 4, 0xFF);
  x.data = t.bytes.data();
  return t;
}

inline int64_t off3(const flash_tensor& t, int64_t r, int64_t h, int64_t e) {
  return r * t.strides[0] + h * t.strides[1] + e * t.strides[2];
}

inline void fill_normal(HostTensor& t, double magnitude, std::mt19937_64& rng) {
  std::normal_distribution<double> dist(0.0, magnitude);
  const flash_tensor& x = t.desc;
  for (int64_t r = 0; r < x.shape[0]; ++r)
    for (int64_t h = 0; h < x.shape[1]; ++h)
      for (int64_t e = 0; e < x.shape[2]; ++e) {
        const int64_t o = off3(x, r, h, e);
        const double v = dist(rng);
        if (x.dtype == FLASH_DTYPE_FP32) reinterpret_cast<float*>(t.bytes.data())[o] = static_cast<float>(v);
        else if (x.dtype == FLASH_DTYPE_FP16) reinterpret_cast<uint16_t*>(t.bytes.data())[o] = flash_ref::fp16_round(v);
        else reinterpret_cast<uint16_t*>(t.bytes.data())[o] = flash_ref::bf16_round(v);
      }
}

// Rows [row0, row0 + rows) of a packed [total, h, d] tensor as the 4-D [1, rows, h, d] tensor the references read.
inline flash_tensor view4(const flash_tensor& t, int64_t row0, int64_t rows) {
  flash_tensor v = t;
  v.ndim = 4;
  v.data = static_cast<char*>(t.data) + row0 * t.strides[0] * static_cast<int64_t>(esize(t.dtype));
  v.shape[0] = 1, v.shape[1] = rows, v.shape[2] = t.shape[1], v.shape[3] = t.shape[2];
  v.strides[0] = 0, v.strides[1] = t.strides[0], v.strides[2] = t.strides[1], v.strides[3] = t.strides[2];
  return v;
}

struct VCase {
  VSpec spec;
  std::vector<int32_t> cu_q, cu_k, used;
  int64_t total_q = 0, total_k = 0;
  HostTensor q, k, v, o, lse;
  // Backward.
  HostTensor d_o, dq, dk, dv;
};

inline VCase make_vcase(const VSpec& s, std::mt19937_64& rng) {
  VCase c;
  c.spec = s;
  c.cu_q.assign(1, 0);
  c.cu_k.assign(1, 0);
  for (int64_t i = 0; i < s.batch(); ++i) {
    c.cu_q.push_back(static_cast<int32_t>(c.cu_q.back() + s.lq[i]));
    c.cu_k.push_back(static_cast<int32_t>(c.cu_k.back() + s.lk[i]));
  }
  for (int64_t u : s.used) c.used.push_back(static_cast<int32_t>(u));
  // A tensor has at least one row (flash.h: shapes are positive), even when every sequence is empty.
  c.total_q = std::max<int64_t>(1, c.cu_q.back() + s.extra_q);
  c.total_k = std::max<int64_t>(1, c.cu_k.back() + s.extra_k);
  c.q = make3(s.dtype, c.total_q, s.hq, s.d, s.layout, rng);
  c.k = make3(s.dtype, c.total_k, s.hkv, s.d, s.layout, rng);
  c.v = make3(s.dtype, c.total_k, s.hkv, s.d, s.layout, rng);
  c.o = make3(s.dtype, c.total_q, s.hq, s.d, s.layout, rng);
  c.lse = make_lse(s.hq, c.total_q, s.layout);
  fill_normal(c.q, 1.0, rng);
  fill_normal(c.k, 1.0, rng);
  fill_normal(c.v, 1.0, rng);
  return c;
}

inline int64_t longest(const std::vector<int64_t>& x) { return x.empty() ? 0 : *std::max_element(x.begin(), x.end()); }

template <class Args>
inline void set_varlen(VCase& c, Args* a) {
  const VSpec& s = c.spec;
  a->cu_seqlens_q = c.cu_q.data();
  a->cu_seqlens_k = c.cu_k.data();
  a->seqused_k = c.used.empty() ? nullptr : c.used.data();
  a->varlen_batch = static_cast<int32_t>(s.batch());
  a->max_seqlen_q = static_cast<int32_t>(longest(s.lq) + s.max_slack);
  std::vector<int64_t> keys;
  for (int64_t i = 0; i < s.batch(); ++i) keys.push_back(s.keys(i));
  a->max_seqlen_k = static_cast<int32_t>(longest(keys) + s.max_slack);
  a->softmax_scale = s.scale;
  a->causal = s.mask.causal;
  a->causal_alignment = s.mask.alignment;
  a->window_left = s.mask.window_left;
  a->window_right = s.mask.window_right;
}

inline void fill_fwd(VCase& c, flash_fwd_args* a, int32_t algorithm) {
  flash_fwd_args_init(a);
  a->q = c.q.desc, a->k = c.k.desc, a->v = c.v.desc, a->o = c.o.desc;
  if (c.spec.want_lse) a->lse = c.lse.desc;
  a->algorithm = algorithm;
  set_varlen(c, a);
}

inline int32_t run_fwd(VCase& c, int32_t algorithm, int32_t* used = nullptr) {
  std::fill(c.o.bytes.begin(), c.o.bytes.end(), 0xFF);
  std::fill(c.lse.bytes.begin(), c.lse.bytes.end(), 0xFF);
  flash_fwd_args a;
  fill_fwd(c, &a, algorithm);
  const int32_t s = flash_fwd(&a);
  if (used) *used = a.algorithm_used;
  return s;
}

// Every byte of `t` outside the elements of rows [0, rows) must still hold the poison (0xFF): rows past the last
// sequence, and the gaps of a strided layout. "" or a description of the first written byte.
inline std::string untouched_outside(const HostTensor& t, int64_t rows, const char* name) {
  std::vector<uint8_t> mine(t.bytes.size(), 0);
  const flash_tensor& x = t.desc;
  const int64_t es = x.dtype == FLASH_DTYPE_FP32 ? 4 : 2;
  if (x.ndim == 3) {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t h = 0; h < x.shape[1]; ++h)
        for (int64_t e = 0; e < x.shape[2]; ++e)
          std::fill_n(mine.begin() + off3(x, r, h, e) * es, es, uint8_t{1});
  } else {  // the LSE [heads, total_q]
    for (int64_t h = 0; h < x.shape[0]; ++h)
      for (int64_t r = 0; r < rows; ++r) std::fill_n(mine.begin() + (h * x.strides[0] + r * x.strides[1]) * 4, 4, uint8_t{1});
  }
  for (size_t b = 0; b < t.bytes.size(); ++b)
    if (!mine[b] && t.bytes[b] != 0xFF) return std::string(name) + ": byte " + std::to_string(b) + " outside its rows was written";
  return "";
}

// The forward's output against the fp64 reference, sequence by sequence; the bound (2 x the naive same-dtype error
// plus half an ulp of max |O|, as harness.cpp's check_case) over the whole call. "" when it passes.
inline std::string check_fwd(const VCase& c) {
  const VSpec& s = c.spec;
  double err = 0, naive_err = 0, max_ref = 0, lse_err = 0, lse_naive = 0, max_lse = 0;
  std::ostringstream msg;
  int bad = 0;
  for (int64_t i = 0; i < s.batch(); ++i) {
    const int64_t sq = s.lq[i], sk = s.keys(i);
    if (sq == 0) continue;
    flash_ref::Problem pr{1, sq, sk, s.hq, s.hkv, s.d,
                          s.scale != 0.0f ? static_cast<double>(s.scale) : 1.0 / std::sqrt(double(s.d)), s.mask};
    const flash_tensor q = view4(c.q.desc, c.cu_q[i], sq), k = view4(c.k.desc, c.cu_k[i], sk),
                       v = view4(c.v.desc, c.cu_k[i], sk);
    // A sequence without keys: every row sees nothing (O = 0, LSE = -inf), by definition; the reference is written for
    // positive lengths (a dense call's), so it is not asked.
    flash_ref::Result exact, naive;
    if (sk == 0) {
      exact.o.assign(sq * s.hq * s.d, 0.0), exact.lse.assign(s.hq * sq, -kInf);
      naive = exact;
    } else {
      exact = flash_ref::attention(pr, q, k, v, 0), naive = flash_ref::attention(pr, q, k, v, 1);
    }
    for (int64_t r = 0; r < sq; ++r)
      for (int64_t h = 0; h < s.hq; ++h) {
        const int64_t row = c.cu_q[i] + r;
        const bool empty = exact.lse[h * sq + r] == -kInf;
        for (int64_t e = 0; e < s.d; ++e) {
          const double got = flash_ref::load(c.o.bytes.data(), s.dtype, off3(c.o.desc, row, h, e));
          const double ref = exact.o[(r * s.hq + h) * s.d + e];
          if (!std::isfinite(got) || (empty && got != 0.0)) {
            if (bad++ < 3) msg << "O[seq " << i << ", row " << r << ", head " << h << ", " << e << "] = " << got << " (ref " << ref << "); ";
            err = kInf;
            continue;
          }
          err = std::max(err, std::fabs(got - ref));
          naive_err = std::max(naive_err, std::fabs(naive.o[(r * s.hq + h) * s.d + e] - ref));
          max_ref = std::max(max_ref, std::fabs(ref));
        }
        if (!s.want_lse) continue;
        const flash_tensor& l = c.lse.desc;
        const double got = reinterpret_cast<const float*>(c.lse.bytes.data())[h * l.strides[0] + row * l.strides[1]];
        const double ref = exact.lse[h * sq + r];
        if (ref == -kInf) {
          if (got != -kInf && bad++ < 3) msg << "LSE[seq " << i << ", row " << r << ", head " << h << "] = " << got << " (want -inf); ";
          if (got != -kInf) lse_err = kInf;
          continue;
        }
        if (!std::isfinite(got)) {
          if (bad++ < 3) msg << "LSE[seq " << i << ", row " << r << ", head " << h << "] = " << got << "; ";
          lse_err = kInf;
          continue;
        }
        lse_err = std::max(lse_err, std::fabs(got - ref));
        lse_naive = std::max(lse_naive, std::fabs(naive.lse[h * sq + r] - ref));
        max_lse = std::max(max_lse, std::fabs(ref));
      }
  }
  const double ulp = s.dtype == FLASH_DTYPE_FP32 ? std::ldexp(1.0, -24) : s.dtype == FLASH_DTYPE_FP16 ? std::ldexp(1.0, -11)
                                                                                                      : std::ldexp(1.0, -8);
  const double bound = 2 * naive_err + ulp * max_ref;
  const double lse_bound = 2 * lse_naive + std::ldexp(1.0, -23) * std::max(1.0, max_lse) * 4;
  std::string out;
  if (!(err <= bound) || (s.want_lse && !(lse_err <= lse_bound))) {
    msg << "max|O-ref|=" << err << " bound=" << bound << " (naive " << naive_err << ") max|LSE-ref|=" << lse_err
        << " bound=" << lse_bound;
    out = msg.str();
  }
  for (const std::string& u : {untouched_outside(c.o, c.cu_q.back(), "o"),
                               s.want_lse ? untouched_outside(c.lse, c.cu_q.back(), "lse") : std::string()})
    if (!u.empty()) out += (out.empty() ? "" : "; ") + u;
  return out;
}

// ---- Random specs -------------------------------------------------------------------------------------------

inline int64_t uni(std::mt19937_64& rng, int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); }

// A length: 0, 1, small odd, around a block (63..65, 127..129), or anything up to `hi`.
inline int64_t random_length(std::mt19937_64& rng, int64_t hi) {
  switch (uni(rng, 0, 5)) {
    case 0: return 0;
    case 1: return 1;
    case 2: return 2 * uni(rng, 0, 8) + 1;
    case 3: return std::min<int64_t>(hi, 64 * uni(rng, 1, 2) + uni(rng, -1, 1));
    default: return uni(rng, 0, hi);
  }
}

// A random varlen problem; `gpu`: the CUDA algorithms' dtypes (fp16, bf16) and head dims up to 256 (the compiled 64,
// 128, 256 and others padded to them).
inline VSpec random_vspec(std::mt19937_64& rng, int64_t max_len, bool gpu = false) {
  VSpec s;
  const int64_t batch = uni(rng, 1, 6);
  for (int64_t i = 0; i < batch; ++i) {
    s.lq.push_back(random_length(rng, max_len));
    s.lk.push_back(uni(rng, 0, 3) == 0 ? s.lq.back() : random_length(rng, max_len));
  }
  if (uni(rng, 0, 3) == 0)
    for (int64_t i = 0; i < batch; ++i) s.used.push_back(uni(rng, 0, 2) == 0 ? s.lk[i] : uni(rng, 0, s.lk[i]));
  if (uni(rng, 0, 2) == 0) s.extra_q = uni(rng, 1, 9), s.extra_k = uni(rng, 0, 9);
  const int64_t ratios[] = {1, 2, 4};
  s.hkv = uni(rng, 1, 2);
  s.hq = s.hkv * ratios[uni(rng, 0, 2)];
  const int64_t dims[] = {8, 16, 32, 40, 64, 96, 128}, gpu_dims[] = {8, 40, 64, 72, 96, 128, 200, 256};
  s.d = gpu ? gpu_dims[uni(rng, 0, 7)] : dims[uni(rng, 0, 6)];
  const int32_t dtypes[] = {FLASH_DTYPE_FP32, FLASH_DTYPE_FP16, FLASH_DTYPE_BF16};
  s.dtype = gpu ? dtypes[uni(rng, 1, 2)] : dtypes[uni(rng, 0, 2)];
  const float scales[] = {0.0f, 0.0f, 0.3f, 1.0f};
  s.scale = scales[uni(rng, 0, 3)];
  s.layout = static_cast<int>(uni(rng, 0, 2));
  s.mask.causal = static_cast<int>(uni(rng, 0, 1));
  s.mask.alignment = uni(rng, 0, 1) ? FLASH_ALIGN_TOP_LEFT : FLASH_ALIGN_BOTTOM_RIGHT;
  if (uni(rng, 0, 2) == 0) {
    s.mask.window_left = uni(rng, 0, 1) ? static_cast<int>(uni(rng, 0, 80)) : -1;
    s.mask.window_right = s.mask.causal ? 0 : (uni(rng, 0, 1) ? static_cast<int>(uni(rng, 0, 80)) : -1);
  }
  s.max_slack = uni(rng, 0, 3) == 0 ? uni(rng, 1, 20) : 0;
  s.want_lse = uni(rng, 0, 4) != 0;
  return s;
}

// The fp64 references' cost, sum over the sequences of seqlen_q * seqlen_k * heads_q * d, capped at `cap` by shortening
// the longest sequences (the GPU sweeps draw longer ones than the CPU's; the backward's reference costs ~10x).
inline void cap_vspec(VSpec& s, int64_t cap) {
  auto cost = [&] {
    int64_t c = 0;
    for (int64_t i = 0; i < s.batch(); ++i) c += s.lq[i] * s.keys(i) * s.hq * s.d;
    return c;
  };
  while (cost() > cap) {
    int64_t top = 0;
    for (int64_t i = 1; i < s.batch(); ++i)
      if (s.lq[i] * s.keys(i) > s.lq[top] * s.keys(top)) top = i;
    s.lq[top] = s.lq[top] * 2 / 3, s.lk[top] = s.lk[top] * 2 / 3;
    if (!s.used.empty()) s.used[top] = std::min(s.used[top], s.lk[top]);
  }
}

// ---- The backward -------------------------------------------------------------------------------------------

// The forward (algorithm cpu: O and LSE) the backward consumes, dO, and poisoned gradients.
inline int32_t make_bwd_vcase(VSpec s, std::mt19937_64& rng, VCase* c) {
  s.want_lse = true;
  *c = make_vcase(s, rng);
  const int32_t st = run_fwd(*c, FLASH_ALGO_CPU);
  c->d_o = make3(s.dtype, c->total_q, s.hq, s.d, s.layout, rng);
  fill_normal(c->d_o, 1.0, rng);
  c->dq = make3(s.dtype, c->total_q, s.hq, s.d, s.layout, rng);
  c->dk = make3(s.dtype, c->total_k, s.hkv, s.d, s.layout, rng);
  c->dv = make3(s.dtype, c->total_k, s.hkv, s.d, s.layout, rng);
  return st;
}

inline void fill_bwd(VCase& c, flash_bwd_args* a, int32_t algorithm, uint32_t flags = 0) {
  flash_bwd_args_init(a);
  a->q = c.q.desc, a->k = c.k.desc, a->v = c.v.desc, a->o = c.o.desc, a->d_o = c.d_o.desc, a->lse = c.lse.desc;
  a->dq = c.dq.desc, a->dk = c.dk.desc, a->dv = c.dv.desc;
  a->algorithm = algorithm;
  a->flags = flags;
  set_varlen(c, a);
}

inline int32_t run_bwd(VCase& c, int32_t algorithm, uint32_t flags = 0, int32_t* used = nullptr) {
  for (HostTensor* t : {&c.dq, &c.dk, &c.dv}) std::fill(t->bytes.begin(), t->bytes.end(), 0xFF);
  flash_bwd_args a;
  fill_bwd(c, &a, algorithm, flags);
  const int32_t s = flash_bwd(&a);
  if (used) *used = a.algorithm_used;
  return s;
}

// The whole call's gradients as [1, rows, h, d] references: each sequence's from reference_bwd.hpp at its rows.
struct PackedRefs {
  flash_ref::Dense dq, dk, dv, dq_naive, dk_naive, dv_naive, dq_in, dk_in, dv_in;
  std::vector<uint8_t> dq_empty, dk_unseen;
};

inline PackedRefs packed_references(const VCase& c) {
  const VSpec& s = c.spec;
  const int64_t rq = c.cu_q.back(), rk = c.cu_k.back();
  PackedRefs p;
  for (flash_ref::Dense* x : {&p.dq, &p.dq_naive, &p.dq_in}) *x = flash_ref::Dense(1, rq, s.hq, s.d);
  for (flash_ref::Dense* x : {&p.dk, &p.dk_naive, &p.dk_in, &p.dv, &p.dv_naive, &p.dv_in}) *x = flash_ref::Dense(1, rk, s.hkv, s.d);
  p.dq_empty.assign(rq * s.hq, 0);
  p.dk_unseen.assign(rk * s.hkv, 1);  // slot rows past seqused_k stay "must be 0"
  for (int64_t i = 0; i < s.batch(); ++i) {
    const int64_t sq = s.lq[i], sk = s.keys(i);
    // Without queries, or without keys, every gradient of the sequence is 0 by definition (rows that see no key, keys
    // no query sees: dq_empty and dk_unseen, as set above for zeros): the reference, written for a dense call's
    // positive lengths, is not asked.
    if (sk == 0) {
      for (int64_t r = 0; r < sq; ++r)
        for (int64_t h = 0; h < s.hq; ++h) p.dq_empty[(c.cu_q[i] + r) * s.hq + h] = 1;
      continue;
    }
    if (sq == 0) continue;
    const flash_ref::Problem pr{1, sq, sk, s.hq, s.hkv, s.d,
                                s.scale != 0.0f ? static_cast<double>(s.scale) : 1.0 / std::sqrt(double(s.d)), s.mask};
    const flash_ref::Dense q = flash_ref::to_dense(view4(c.q.desc, c.cu_q[i], sq)),
                           k = flash_ref::to_dense(view4(c.k.desc, c.cu_k[i], sk)),
                           v = flash_ref::to_dense(view4(c.v.desc, c.cu_k[i], sk)),
                           d_o = flash_ref::to_dense(view4(c.d_o.desc, c.cu_q[i], sq)),
                           o = flash_ref::to_dense(view4(c.o.desc, c.cu_q[i], sq));
    std::vector<double> lse(s.hq * sq);
    for (int64_t h = 0; h < s.hq; ++h)
      for (int64_t r = 0; r < sq; ++r)
        lse[h * sq + r] = reinterpret_cast<const float*>(
            c.lse.bytes.data())[h * c.lse.desc.strides[0] + (c.cu_q[i] + r) * c.lse.desc.strides[1]];
    const flash_ref::Grads ex = flash_ref::attention_backward(pr, q, k, v, d_o, s.dtype, 0, &o, &lse);
    const flash_ref::Grads nv = flash_ref::attention_backward(pr, q, k, v, d_o, s.dtype, 1);
    auto place = [&](flash_ref::Dense& to, const flash_ref::Dense& from, int64_t row0) {
      for (int64_t r = 0; r < from.s; ++r)
        for (int64_t h = 0; h < from.h; ++h)
          for (int64_t e = 0; e < from.d; ++e) to.at(0, row0 + r, h, e) = from.at(0, r, h, e);
    };
    place(p.dq, ex.dq, c.cu_q[i]), place(p.dq_naive, nv.dq, c.cu_q[i]), place(p.dq_in, ex.dq_in, c.cu_q[i]);
    place(p.dk, ex.dk, c.cu_k[i]), place(p.dk_naive, nv.dk, c.cu_k[i]), place(p.dk_in, ex.dk_in, c.cu_k[i]);
    place(p.dv, ex.dv, c.cu_k[i]), place(p.dv_naive, nv.dv, c.cu_k[i]), place(p.dv_in, ex.dv_in, c.cu_k[i]);
    for (int64_t r = 0; r < sq; ++r)
      for (int64_t h = 0; h < s.hq; ++h) p.dq_empty[(c.cu_q[i] + r) * s.hq + h] = ex.dq_empty[r * s.hq + h];
    for (int64_t r = 0; r < sk; ++r)
      for (int64_t h = 0; h < s.hkv; ++h) p.dk_unseen[(c.cu_k[i] + r) * s.hkv + h] = ex.dk_unseen[r * s.hkv + h];
  }
  return p;
}

// A copy of a packed gradient's buffer with a [1, rows, h, d] descriptor (check_grad reads bytes.data() + offset).
inline HostTensor as4(const HostTensor& t, int64_t rows) {
  HostTensor r;
  r.bytes = t.bytes;
  r.desc = view4(t.desc, 0, rows);
  r.desc.data = r.bytes.data();
  return r;
}

// dq, dk, dv against the references (harness_bwd.hpp's check_grad: its element-wise bound over the whole call) and
// every byte outside the sequences' rows untouched. "" when all pass.
inline std::string check_bwd(const VCase& c, const PackedRefs& r) {
  using flash_test::bwd::check_grad;
  const int32_t dt = c.spec.dtype;
  const int64_t rq = c.cu_q.back(), rk = c.cu_k.back();
  std::string out;
  const flash_test::bwd::GradCheck cq = check_grad("dq", as4(c.dq, rq), r.dq, r.dq_naive, r.dq_in, r.dq_empty, dt, 2.0);
  const flash_test::bwd::GradCheck ck = check_grad("dk", as4(c.dk, rk), r.dk, r.dk_naive, r.dk_in, r.dk_unseen, dt, 2.0);
  const flash_test::bwd::GradCheck cv = check_grad("dv", as4(c.dv, rk), r.dv, r.dv_naive, r.dv_in, r.dk_unseen, dt, 2.0);
  if (!(cq.ok && ck.ok && cv.ok)) out = cq.message + "\n  " + ck.message + "\n  " + cv.message;
  for (const std::string& u : {untouched_outside(c.dq, rq, "dq"), untouched_outside(c.dk, rk, "dk"),
                               untouched_outside(c.dv, rk, "dv")})
    if (!u.empty()) out += (out.empty() ? "" : "; ") + u;
  return out;
}

// ---- On a CUDA device --------------------------------------------------------------------------------------------
// A VCase's tensors and offsets mirrored to device 0 (outputs copied over poisoned), freed with it.
struct DeviceVCase {
  std::vector<void*> owned;
  bool ok = true;
  DeviceVCase() = default;
  DeviceVCase(const DeviceVCase&) = delete;
  DeviceVCase& operator=(const DeviceVCase&) = delete;
  ~DeviceVCase() {
    for (void* p : owned) flash_test::cuda_free(p);
  }
  void* put(const void* host, size_t bytes) {
    void* p = flash_test::cuda_alloc(std::max<size_t>(bytes, 16));
    if (p == nullptr) return ok = false, nullptr;
    owned.push_back(p);
    if (bytes > 0 && !flash_test::cuda_upload(p, host, bytes)) ok = false;
    return p;
  }
  flash_tensor mirror(const HostTensor& t) {
    flash_tensor d = t.desc;
    d.data = put(t.bytes.data(), t.bytes.size());
    d.device_type = FLASH_DEVICE_CUDA, d.device_id = 0;
    return d;
  }
  // cu_seqlens_q/k and seqused_k of c (or the given arrays) in device memory, into a's fields.
  template <class Args>
  void offsets(const VCase& c, Args* a) {
    a->cu_seqlens_q = static_cast<const int32_t*>(put(c.cu_q.data(), c.cu_q.size() * 4));
    a->cu_seqlens_k = static_cast<const int32_t*>(put(c.cu_k.data(), c.cu_k.size() * 4));
    a->seqused_k = c.used.empty() ? nullptr : static_cast<const int32_t*>(put(c.used.data(), c.used.size() * 4));
  }
};

// The forward of c on CUDA device 0 (offsets in device memory); o and lse come back into c. FLASH_ERROR_CUDA when a
// copy fails (a kernel fault shows there).
inline int32_t run_fwd_cuda(VCase& c, int32_t algorithm, int32_t* used = nullptr) {
  std::fill(c.o.bytes.begin(), c.o.bytes.end(), 0xFF);
  std::fill(c.lse.bytes.begin(), c.lse.bytes.end(), 0xFF);
  flash_fwd_args a;
  fill_fwd(c, &a, algorithm);
  DeviceVCase d;
  a.q = d.mirror(c.q), a.k = d.mirror(c.k), a.v = d.mirror(c.v), a.o = d.mirror(c.o);
  if (c.spec.want_lse) a.lse = d.mirror(c.lse);
  d.offsets(c, &a);
  if (!d.ok) return FLASH_ERROR_CUDA;
  const int32_t s = flash_fwd(&a);
  if (used) *used = a.algorithm_used;
  if (s != FLASH_OK) return s;
  if (!flash_test::cuda_download(c.o.bytes.data(), a.o.data, c.o.bytes.size())) return FLASH_ERROR_CUDA;
  if (c.spec.want_lse && !flash_test::cuda_download(c.lse.bytes.data(), a.lse.data, c.lse.bytes.size()))
    return FLASH_ERROR_CUDA;
  return FLASH_OK;
}

// The backward of c (its O and LSE from make_bwd_vcase) on CUDA device 0; dq, dk, dv come back into c.
inline int32_t run_bwd_cuda(VCase& c, int32_t algorithm, uint32_t flags = 0, int32_t* used = nullptr) {
  for (HostTensor* t : {&c.dq, &c.dk, &c.dv}) std::fill(t->bytes.begin(), t->bytes.end(), 0xFF);
  flash_bwd_args a;
  fill_bwd(c, &a, algorithm, flags);
  DeviceVCase d;
  a.q = d.mirror(c.q), a.k = d.mirror(c.k), a.v = d.mirror(c.v), a.o = d.mirror(c.o), a.lse = d.mirror(c.lse);
  a.d_o = d.mirror(c.d_o), a.dq = d.mirror(c.dq), a.dk = d.mirror(c.dk), a.dv = d.mirror(c.dv);
  d.offsets(c, &a);
  if (!d.ok) return FLASH_ERROR_CUDA;
  const int32_t s = flash_bwd(&a);
  if (used) *used = a.algorithm_used;
  if (s != FLASH_OK) return s;
  for (auto [t, ptr] : {std::pair<HostTensor*, void*>{&c.dq, a.dq.data}, {&c.dk, a.dk.data}, {&c.dv, a.dv.data}})
    if (!flash_test::cuda_download(t->bytes.data(), ptr, t->bytes.size())) return FLASH_ERROR_CUDA;
  return FLASH_OK;
}

}  // namespace varlen_test
