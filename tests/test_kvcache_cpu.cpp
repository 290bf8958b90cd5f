// tests/test_kvcache_cpu.cpp -- flash_fwd_kvcache and flash_combine on the CPU (issue 71).
//
// Every case: fresh random inputs, a cache whose slots no query may see hold NaN (a read of one would show in O),
// outputs poisoned with NaN before the call. The cache afterwards must equal the expected cache byte for byte
// (the appended rows in their slots, everything else untouched). O and LSE are checked against the fp64 reference
// (tests/support/reference.hpp) run per sequence over the keys it sees, gathered from the expected cache, with the
// error bounded as every forward test's: 2 x the naive same-dtype error + one output rounding.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "flash.h"
#include "support/harness.hpp"
#include "support/reference.hpp"

namespace {

using flash_test::base_seed;

size_t esize(int32_t dtype) { return dtype == FLASH_DTYPE_FP32 ? 4 : 2; }
const char* dtype_str(int32_t t) { return t == FLASH_DTYPE_FP32 ? "fp32" : t == FLASH_DTYPE_FP16 ? "fp16" : "bf16"; }

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

KvCase make_kv_case(const KvSpec& spec, std::mt19937_64& rng) {
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

void fill_kv_args(KvCase& c, flash_kvcache_args* a) {
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

int32_t run_kv(KvCase& c, flash_kvcache_args* out_args = nullptr, void* workspace = nullptr, size_t ws_size = 0) {
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
flash_test::Check check_kv(const KvCase& c) {
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

// Runs a spec end to end: append bit for bit, O and LSE against the reference.
void run_and_check(const KvSpec& spec, uint64_t seed, int32_t* splits_used = nullptr) {
  std::mt19937_64 rng(seed);
  KvCase c = make_kv_case(spec, rng);
  SCOPED_TRACE("LIBFLASH_TEST_SEED=" + std::to_string(base_seed()) + " case: " + c.spec.describe());
  flash_kvcache_args a;
  const int32_t s = run_kv(c, &a);
  ASSERT_EQ(s, FLASH_OK) << flash_status_string(s) << ": " << flash_last_error_message();
  EXPECT_EQ(a.algorithm_used, FLASH_ALGO_CPU);
  if (spec.num_splits > 0) EXPECT_EQ(a.num_splits_used, spec.num_splits);
  else EXPECT_GE(a.num_splits_used, 1);
  if (splits_used) *splits_used = a.num_splits_used;
  EXPECT_TRUE(c.k_cache.bytes == c.k_expected.bytes) << "k_cache after the call differs from the expected cache";
  EXPECT_TRUE(c.v_cache.bytes == c.v_expected.bytes) << "v_cache after the call differs from the expected cache";
  const flash_test::Check ch = check_kv(c);
  EXPECT_TRUE(ch.ok) << ch.message;
}

const int32_t kDtypes[] = {FLASH_DTYPE_FP32, FLASH_DTYPE_FP16, FLASH_DTYPE_BF16};

}  // namespace

TEST(KvcacheCpu, DecodeContiguousGqa) {
  uint64_t seed = base_seed() ^ 0x71001;
  for (int32_t dt : kDtypes)
    for (int ratio : {1, 4, 8}) {
      KvSpec s;
      s.batch = 3, s.heads_kv = 2, s.heads_q = 2 * ratio, s.head_dim = 64, s.dtype = dt;
      run_and_check(s, seed++);
    }
}

TEST(KvcacheCpu, PagedPageSizes) {
  uint64_t seed = base_seed() ^ 0x71002;
  for (int64_t ps : {1, 16, 64, 256})
    for (int32_t dt : kDtypes) {
      KvSpec s;
      s.paged = true, s.page_size = ps, s.batch = 4, s.heads_kv = 1, s.heads_q = 4, s.head_dim = 32, s.dtype = dt;
      s.seqlen_new = ps == 1 ? 3 : 1;
      s.max_cached = ps == 256 ? 600 : 300;
      run_and_check(s, seed++);
    }
}

TEST(KvcacheCpu, CacheBatchIdx) {
  uint64_t seed = base_seed() ^ 0x71003;
  for (int32_t dt : kDtypes)
    for (bool append : {true, false}) {
      KvSpec s;
      s.batch_idx = true, s.append = append, s.batch = 4, s.heads_kv = 2, s.heads_q = 8, s.head_dim = 40, s.dtype = dt;
      s.seqlen_new = 2;
      run_and_check(s, seed++);
    }
}

TEST(KvcacheCpu, SeqlensZeroAndOne) {
  uint64_t seed = base_seed() ^ 0x71004;
  for (bool append : {true, false})
    for (bool paged : {false, true}) {
      KvSpec s;
      s.append = append, s.paged = paged, s.page_size = 16, s.batch = 4, s.seqlen_new = 3, s.heads_q = 2, s.head_dim = 16;
      s.seqlens = {0, 1, 0, 17};
      s.causal = 1;
      run_and_check(s, seed++);
    }
}

TEST(KvcacheCpu, SeqlenNewOneToSixteenCausalAndWindows) {
  uint64_t seed = base_seed() ^ 0x71005;
  std::mt19937_64 rng(seed);
  for (int64_t sn = 1; sn <= 16; ++sn) {
    KvSpec s;
    s.seqlen_new = sn, s.batch = 2, s.heads_kv = 1, s.heads_q = 4, s.head_dim = 24;
    s.dtype = kDtypes[sn % 3];
    s.paged = sn % 2 == 0, s.page_size = sn % 4 == 0 ? 16 : 1;
    switch (sn % 4) {
      case 0: s.causal = 1; break;
      case 1: s.window_left = static_cast<int>(rng() % 40), s.window_right = 0; break;
      case 2: s.window_left = static_cast<int>(rng() % 40), s.window_right = static_cast<int>(rng() % 5); break;
      default: s.causal = 1, s.window_left = static_cast<int>(rng() % 100); break;
    }
    s.num_splits = static_cast<int32_t>(1 + sn % 3);
    run_and_check(s, seed++);
  }
}

TEST(KvcacheCpu, ChunkedPrefill200) {
  uint64_t seed = base_seed() ^ 0x71006;
  for (bool paged : {false, true}) {
    KvSpec s;
    s.seqlen_new = 200, s.batch = 2, s.heads_kv = 1, s.heads_q = 2, s.head_dim = 32, s.dtype = FLASH_DTYPE_BF16;
    s.paged = paged, s.page_size = 64, s.causal = 1, s.max_cached = 250, s.num_splits = paged ? 3 : 1;
    run_and_check(s, seed++);
  }
}

TEST(KvcacheCpu, NumSplitsOneThreeAuto) {
  uint64_t seed = base_seed() ^ 0x71007;
  for (int32_t dt : kDtypes)
    for (int32_t splits : {1, 3, 0}) {
      KvSpec s;
      s.batch = 1, s.heads_kv = 1, s.heads_q = 1, s.head_dim = 64, s.dtype = dt, s.num_splits = splits;
      s.seqlens = {1500};  // long enough that auto may split (one item, <= 2 threads in CI)
      s.paged = splits == 3, s.page_size = 16;
      s.window_left = splits == 3 ? 700 : -1;  // a window: some splits see no key at all
      int32_t used = 0;
      run_and_check(s, seed++, &used);
      if (splits == 0) {
        // One query item: auto uses every thread, bounded by 512 keys a split.
        EXPECT_LE(used, 1501 / 512);
      }
    }
  // More splits than keys: empty splits merge as nothing.
  KvSpec s;
  s.batch = 2, s.seqlens = {2, 0}, s.num_splits = 7, s.heads_q = 2, s.head_dim = 8;
  run_and_check(s, seed++);
}

TEST(KvcacheCpu, RandomSweep) {
  std::mt19937_64 rng(base_seed() ^ 0x71008);
  auto uni = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  static const int64_t dims[] = {8, 16, 40, 64, 72, 128, 256};
  static const int64_t pages[] = {1, 16, 64, 256, 7};
  for (int n = 0; n < 40; ++n) {
    KvSpec s;
    s.batch = uni(1, 4);
    s.heads_kv = uni(1, 2);
    static const int64_t ratios[] = {1, 4, 8};
    s.heads_q = s.heads_kv * ratios[uni(0, 2)];
    s.head_dim = dims[uni(0, 6)];
    s.dtype = kDtypes[uni(0, 2)];
    s.seqlen_new = uni(0, 4) == 0 ? uni(17, 70) : uni(1, 16);
    s.paged = uni(0, 1);
    s.page_size = pages[uni(0, 4)];
    s.batch_idx = !s.paged && uni(0, 1);
    s.append = uni(0, 3) != 0;
    s.causal = uni(0, 1);
    if (uni(0, 2) == 0) {
      s.window_left = uni(0, 1) ? static_cast<int>(uni(0, 200)) : -1;
      s.window_right = s.causal ? 0 : (uni(0, 1) ? static_cast<int>(uni(0, 20)) : -1);
    }
    s.num_splits = static_cast<int32_t>(uni(0, 4));
    s.want_lse = uni(0, 3) != 0;
    static const float scales[] = {0.0f, 0.0f, 0.3f, 1.0f};
    s.softmax_scale = scales[uni(0, 3)];
    s.max_cached = s.head_dim >= 128 ? 200 : 500;
    run_and_check(s, rng());
  }
}

TEST(KvcacheCpu, CallerWorkspace) {
  std::mt19937_64 rng(base_seed() ^ 0x71009);
  KvSpec s;
  s.batch = 2, s.heads_q = 4, s.heads_kv = 2, s.head_dim = 32, s.num_splits = 3, s.seqlen_new = 5, s.causal = 1;
  KvCase c = make_kv_case(s, rng);
  SCOPED_TRACE(c.spec.describe());
  flash_kvcache_args a;
  fill_kv_args(c, &a);
  size_t bytes = 0;
  ASSERT_EQ(flash_fwd_kvcache_workspace_size(&a, &bytes), FLASH_OK) << flash_last_error_message();
  // fp32 partials in double: 3 splits x b x hq x sn x (d + 1) x 8 bytes.
  EXPECT_EQ(bytes, size_t(3) * 2 * 4 * 5 * (32 + 1) * 8);
  std::vector<double> ws(bytes / 8 + 1, std::nan(""));
  const std::vector<unsigned char> k_before = c.k_cache.bytes, v_before = c.v_cache.bytes;
  EXPECT_EQ(run_kv(c, nullptr, ws.data(), bytes - 1), FLASH_ERROR_WORKSPACE_TOO_SMALL);
  EXPECT_NE(std::string(flash_last_error_message()).find("workspace_size"), std::string::npos);
  // Refused before anything was written: no appended row, outputs still poisoned.
  EXPECT_TRUE(c.k_cache.bytes == k_before && c.v_cache.bytes == v_before);
  EXPECT_TRUE(std::all_of(c.o.bytes.begin(), c.o.bytes.end(), [](unsigned char x) { return x == 0xFF; }));
  // The caller's (NaN-filled) workspace, exactly the size the query said.
  ASSERT_EQ(run_kv(c, nullptr, ws.data(), bytes), FLASH_OK) << flash_last_error_message();
  EXPECT_TRUE(c.k_cache.bytes == c.k_expected.bytes);
  const flash_test::Check ch = check_kv(c);
  EXPECT_TRUE(ch.ok) << ch.message;
  s.num_splits = 1;
  KvCase one = make_kv_case(s, rng);
  fill_kv_args(one, &a);
  ASSERT_EQ(flash_fwd_kvcache_workspace_size(&a, &bytes), FLASH_OK);
  EXPECT_EQ(bytes, 0u);
}

// ---- flash_combine ----------------------------------------------------------------------------------------

namespace {

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

CombineCase make_combine_case(std::mt19937_64& rng, int parts, int32_t part_dtype, int32_t in_dtype, int32_t out_dtype,
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

int32_t run_combine(CombineCase& c) {
  c.o.poison(), c.lse.poison();
  flash_combine_args a;
  flash_combine_args_init(&a);
  a.num_parts = static_cast<int32_t>(c.od.size());
  a.o_parts = c.od.data();
  a.lse_parts = c.ld.data();
  a.o = c.o.desc;
  a.lse = c.lse.desc;
  return flash_combine(&a);
}

}  // namespace

// fp32 partials (as a split-KV kernel keeps them) merged into a 16-bit output: against the one-shot fp64 reference
// with the forward's bound (2 x naive same-dtype + one output rounding). Empty parts and rows included.
TEST(Combine, AgainstOneShotReference) {
  std::mt19937_64 rng(base_seed() ^ 0x7100a);
  const double inf = std::numeric_limits<double>::infinity();
  for (int n = 0; n < 24; ++n) {
    const int32_t dt = n % 2 ? FLASH_DTYPE_BF16 : FLASH_DTYPE_FP16;
    const int parts = 1 + n % 5;
    CombineCase c = make_combine_case(rng, parts, FLASH_DTYPE_FP32, dt, dt, n % 3 == 0);
    SCOPED_TRACE("LIBFLASH_TEST_SEED=" + std::to_string(base_seed()) + " n=" + std::to_string(n) +
                 " parts=" + std::to_string(parts) + " sk=" + std::to_string(c.SK));
    ASSERT_EQ(run_combine(c), FLASH_OK) << flash_last_error_message();
    double err = 0, naive = 0, max_ref = 0, lse_err = 0, lse_naive = 0;
    for (int64_t b = 0; b < c.B; ++b)
      for (int64_t i = 0; i < c.S; ++i)
        for (int64_t h = 0; h < c.H; ++h) {
          const double lref = c.full_exact.lse[(b * c.H + h) * c.S + i];
          const double lgot = c.lse.get((b * c.H + h) * c.S + i);
          if (lref == -inf) {
            EXPECT_EQ(lgot, -inf);
          } else {
            ASSERT_FALSE(std::isnan(lgot));
            lse_err = std::max(lse_err, std::fabs(lgot - lref));
            lse_naive = std::max(lse_naive, std::fabs(c.full_naive.lse[(b * c.H + h) * c.S + i] - lref));
          }
          for (int64_t e = 0; e < c.D; ++e) {
            const int64_t x = ((b * c.S + i) * c.H + h) * c.D + e;
            const double got = c.o.get(x);
            ASSERT_FALSE(std::isnan(got)) << "O[" << x << "] is NaN";
            if (lref == -inf) {
              ASSERT_EQ(got, 0.0);
            }
            err = std::max(err, std::fabs(got - c.full_exact.o[x]));
            naive = std::max(naive, std::fabs(c.full_naive.o[x] - c.full_exact.o[x]));
            max_ref = std::max(max_ref, std::fabs(c.full_exact.o[x]));
          }
        }
    const double ulp = dt == FLASH_DTYPE_FP16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
    EXPECT_LE(err, 2 * naive + ulp * max_ref) << "naive " << naive;
    EXPECT_LE(lse_err, 2 * lse_naive + std::ldexp(1.0, -23) * 8 * 4) << "naive " << lse_naive;
  }
}

// Any part dtype into an fp32 output: the result is the fp64 combination of exactly the given (rounded) inputs,
// rounded once.
TEST(Combine, ExactArithmeticOnTheGivenParts) {
  std::mt19937_64 rng(base_seed() ^ 0x7100b);
  const double inf = std::numeric_limits<double>::infinity();
  for (int n = 0; n < 12; ++n) {
    const int32_t pdt = kDtypes[n % 3];
    CombineCase c = make_combine_case(rng, 1 + n % 4, pdt, FLASH_DTYPE_FP32, FLASH_DTYPE_FP32, n % 2);
    ASSERT_EQ(run_combine(c), FLASH_OK) << flash_last_error_message();
    for (int64_t b = 0; b < c.B; ++b)
      for (int64_t i = 0; i < c.S; ++i)
        for (int64_t h = 0; h < c.H; ++h) {
          const int64_t li = (b * c.H + h) * c.S + i;
          double m = -inf;
          for (auto& l : c.lse_parts) m = std::max(m, l.get(li));
          double sum = 0;
          std::vector<double> acc(c.D, 0.0);
          for (size_t p = 0; p < c.o_parts.size(); ++p) {
            const double l = c.lse_parts[p].get(li);
            if (l == -inf) continue;
            const double w = std::exp(l - m);
            sum += w;
            for (int64_t e = 0; e < c.D; ++e) acc[e] += w * c.o_parts[p].get(((b * c.S + i) * c.H + h) * c.D + e);
          }
          const double lse_want = m == -inf ? -inf : m + std::log(sum);
          if (m == -inf) EXPECT_EQ(c.lse.get(li), -inf);
          else EXPECT_NEAR(c.lse.get(li), lse_want, std::ldexp(1.0, -23) * std::max(1.0, std::fabs(lse_want)));
          for (int64_t e = 0; e < c.D; ++e) {
            const double want = m == -inf ? 0.0 : acc[e] / sum;
            EXPECT_NEAR(c.o.get(((b * c.S + i) * c.H + h) * c.D + e), want, std::ldexp(1.0, -23) * std::fabs(want) + 1e-30);
          }
        }
  }
}

// ---- Validation: each bad field refused with its name, nothing written ------------------------------------

namespace {

// A small valid paged call with an append; mutate one field, expect the refusal.
struct BadCase {
  KvCase c;
  flash_kvcache_args a;
  std::vector<unsigned char> k0, v0;
  explicit BadCase(bool paged = true, bool batch_idx = false) {
    std::mt19937_64 rng(base_seed() ^ 0x7100c);
    KvSpec s;
    s.batch = 3, s.seqlen_new = 2, s.heads_q = 4, s.heads_kv = 2, s.head_dim = 16, s.paged = paged, s.page_size = 4;
    s.batch_idx = batch_idx;
    s.seqlens = {5, 0, 9};
    c = make_kv_case(s, rng);
    fill_kv_args(c, &a);
    c.o.poison(), c.lse.poison();
    a.o.data = c.o.bytes.data(), a.lse.data = c.lse.bytes.data();
    k0 = c.k_cache.bytes, v0 = c.v_cache.bytes;
  }
  void expect(int32_t status, const std::string& needle) {
    const int32_t s = flash_fwd_kvcache(&a);
    EXPECT_EQ(s, status) << flash_status_string(s) << ": " << flash_last_error_message();
    EXPECT_NE(std::string(flash_last_error_message()).find(needle), std::string::npos)
        << "message was: " << flash_last_error_message();
    EXPECT_TRUE(c.k_cache.bytes == k0 && c.v_cache.bytes == v0) << "a refused call wrote the cache";
    EXPECT_TRUE(std::all_of(c.o.bytes.begin(), c.o.bytes.end(), [](unsigned char x) { return x == 0xFF; }))
        << "a refused call wrote o";
    EXPECT_TRUE(std::all_of(c.lse.bytes.begin(), c.lse.bytes.end(), [](unsigned char x) { return x == 0xFF; }))
        << "a refused call wrote lse";
    size_t bytes = 1;
    EXPECT_EQ(flash_fwd_kvcache_workspace_size(&a, &bytes), status);
  }
};

}  // namespace

TEST(KvcacheValidation, ValidCallSucceeds) {
  BadCase b;
  ASSERT_EQ(flash_fwd_kvcache(&b.a), FLASH_OK) << flash_last_error_message();
  EXPECT_TRUE(b.c.k_cache.bytes == b.c.k_expected.bytes);
}

TEST(KvcacheValidation, IndexArrays) {
  { BadCase b; b.c.seqlens[1] = -1; b.expect(FLASH_ERROR_INVALID_ARGUMENT, "cache_seqlens[1] is -1"); }
  {  // the append would run past the sequence's pages
    BadCase b;
    b.c.seqlens[2] = static_cast<int32_t>(b.c.max_pages * 4 - 1);
    b.expect(FLASH_ERROR_INVALID_ARGUMENT, "cache_seqlens[2]");
  }
  { BadCase b; b.c.block_table[1 * b.c.bt_stride + 0] = static_cast<int32_t>(b.c.rows); b.expect(FLASH_ERROR_INVALID_ARGUMENT, "block_table[1,0]"); }
  { BadCase b; b.c.block_table[2 * b.c.bt_stride + 1] = -3; b.expect(FLASH_ERROR_INVALID_ARGUMENT, "block_table[2,1] is -3"); }
  {  // two sequences appending into one page slot
    BadCase b;
    b.c.block_table[1 * b.c.bt_stride + 0] = b.c.block_table[0 * b.c.bt_stride + 1];  // seq 0 appends at 5, 6: page 1
    b.c.seqlens[1] = 1;  // seq 1 appends at positions 1, 2 of the same page
    b.expect(FLASH_ERROR_INVALID_ARGUMENT, "k_new: sequence");
  }
  {  // a sequence appending into a page another sequence reads
    BadCase b;
    b.c.block_table[1 * b.c.bt_stride + 0] = b.c.block_table[2 * b.c.bt_stride + 0];  // seq 1 appends into seq 2's page 0
    b.expect(FLASH_ERROR_INVALID_ARGUMENT, "reads as one of its cache_seqlens[2]");
  }
  { BadCase b; b.a.cache_seqlens = nullptr; b.expect(FLASH_ERROR_NULL_POINTER, "cache_seqlens is NULL"); }
  { BadCase b; b.a.max_pages_per_seq = 0; b.expect(FLASH_ERROR_INVALID_ARGUMENT, "max_pages_per_seq"); }
  { BadCase b; b.a.block_table_stride = -1; b.expect(FLASH_ERROR_INVALID_ARGUMENT, "block_table_stride"); }
  {
    BadCase b;
    std::vector<int32_t> idx = {0, 1, 2};
    b.a.cache_batch_idx = idx.data();
    b.expect(FLASH_ERROR_INVALID_ARGUMENT, "cache_batch_idx is set but block_table");
  }
  {
    BadCase b(false, true);
    b.c.batch_idx[2] = static_cast<int32_t>(b.c.rows);
    b.expect(FLASH_ERROR_INVALID_ARGUMENT, "cache_batch_idx[2]");
  }
  {  // repeated cache row with an append: the two sequences would write each other's keys
    BadCase b(false, true);
    b.c.batch_idx[1] = b.c.batch_idx[0];
    b.expect(FLASH_ERROR_INVALID_ARGUMENT, "k_new: sequence");
  }
  { BadCase b(false); b.c.seqlens[0] = static_cast<int32_t>(b.c.len); b.expect(FLASH_ERROR_INVALID_ARGUMENT, "max_len"); }
  {  // contiguous, no batch index: the cache needs a row per sequence
    BadCase b(false);
    b.a.k_cache.shape[0] = b.a.v_cache.shape[0] = 2;
    b.expect(FLASH_ERROR_BAD_SHAPE, "k_cache.shape[0] (batch_cache) is 2");
  }
}

TEST(KvcacheValidation, TensorsAndOptions) {
  { BadCase b; b.a.q.data = nullptr; b.expect(FLASH_ERROR_NULL_POINTER, "q.data is NULL"); }
  { BadCase b; b.a.v_new.data = nullptr; b.expect(FLASH_ERROR_NULL_POINTER, "v_new.data is NULL"); }
  { BadCase b; b.a.k_cache.shape[3] = 24; b.expect(FLASH_ERROR_BAD_SHAPE, "k_cache.shape[3] is 24"); }
  { BadCase b; b.a.v_cache.shape[1] = 3; b.expect(FLASH_ERROR_BAD_SHAPE, "v_cache.shape[1] is 3"); }
  { BadCase b; b.a.k_new.shape[1] = 1; b.expect(FLASH_ERROR_BAD_SHAPE, "k_new.shape[1] is 1"); }
  { BadCase b; b.a.v_new.shape[2] = 1; b.expect(FLASH_ERROR_BAD_SHAPE, "v_new.shape[2] is 1"); }
  { BadCase b; b.a.o.shape[2] = 2; b.expect(FLASH_ERROR_BAD_SHAPE, "o.shape[2] is 2"); }
  { BadCase b; b.a.lse.shape[2] = 7; b.expect(FLASH_ERROR_BAD_SHAPE, "lse.shape[2] is 7"); }
  { BadCase b; b.a.q.shape[2] = 3; b.a.o.shape[2] = 3; b.expect(FLASH_ERROR_BAD_SHAPE, "not a multiple of k_cache.shape[2]"); }
  { BadCase b; b.a.k_cache.dtype = FLASH_DTYPE_BF16; b.expect(FLASH_ERROR_DTYPE_MISMATCH, "k_cache.dtype is bf16"); }
  { BadCase b; b.a.lse.dtype = FLASH_DTYPE_FP16; b.expect(FLASH_ERROR_DTYPE_MISMATCH, "lse.dtype"); }
  { BadCase b; b.a.k_cache.strides[3] = 2; b.expect(FLASH_ERROR_BAD_STRIDE, "k_cache.strides[3]"); }
  { BadCase b; b.a.v_cache.strides[1] = 0; b.expect(FLASH_ERROR_BAD_STRIDE, "v_cache.strides[1]"); }  // written: no aliasing
  { BadCase b; b.a.o.data = b.a.q.data; b.expect(FLASH_ERROR_INVALID_ARGUMENT, "o overlaps q"); }
  // The tensor rules every entry point shares (capi/tensor_checks.h): a CPU tensor is device 0, data is element-aligned.
  { BadCase b; b.a.k_cache.device_id = 3; b.expect(FLASH_ERROR_INVALID_ARGUMENT, "k_cache.device_id is 3"); }
  { BadCase b; b.a.q.data = static_cast<char*>(b.a.q.data) + 1; b.expect(FLASH_ERROR_INVALID_ARGUMENT, "q.data is not aligned"); }
  { BadCase b; b.a.v_cache.data = b.a.k_cache.data; b.expect(FLASH_ERROR_INVALID_ARGUMENT, "v_cache overlaps k_cache"); }
  { BadCase b; b.a.k_new.data = b.a.k_cache.data; b.expect(FLASH_ERROR_INVALID_ARGUMENT, "k_cache overlaps k_new"); }
  {
    BadCase b;
    b.a.lse.data = const_cast<int32_t*>(b.a.block_table);
    // (lse's span is longer than the table: where the heap puts k_new right after it, that overlap is named first.)
    b.expect(FLASH_ERROR_INVALID_ARGUMENT, "lse overlaps ");
  }
  { BadCase b; b.a.num_splits = 257; b.expect(FLASH_ERROR_INVALID_ARGUMENT, "num_splits is 257"); }
  { BadCase b; b.a.num_splits = -1; b.expect(FLASH_ERROR_INVALID_ARGUMENT, "num_splits is -1"); }
  { BadCase b; b.a.causal = 2; b.expect(FLASH_ERROR_INVALID_ARGUMENT, "causal is 2"); }
  { BadCase b; b.a.window_left = -2; b.expect(FLASH_ERROR_BAD_MASK, "window_left is -2"); }
  { BadCase b; b.a.flags = 1; b.expect(FLASH_ERROR_INVALID_ARGUMENT, "flags"); }
  { BadCase b; b.a.softmax_scale = NAN; b.expect(FLASH_ERROR_INVALID_ARGUMENT, "softmax_scale"); }
  { BadCase b; b.a.algorithm = FLASH_ALGO_NAIVE; b.expect(FLASH_ERROR_UNSUPPORTED, "naive"); }
  { BadCase b; b.a.algorithm = FLASH_ALGO_SM90; b.expect(FLASH_ERROR_ALGORITHM_UNAVAILABLE, "sm90"); }
  { BadCase b; b.a.algorithm = 99; b.expect(FLASH_ERROR_INVALID_ARGUMENT, "algorithm is 99"); }
  {
    BadCase b;
    b.a.workspace = reinterpret_cast<char*>(b.c.o.bytes.data()) + 1;
    b.expect(FLASH_ERROR_INVALID_ARGUMENT, "8-byte aligned");
  }
  { BadCase b; b.a.struct_size = 8; b.expect(FLASH_ERROR_STRUCT_SIZE, "struct_size"); }
  { BadCase b; b.a.struct_size = sizeof(flash_kvcache_args) + 8; b.expect(FLASH_ERROR_STRUCT_SIZE, "newer flash.h"); }
  EXPECT_EQ(flash_fwd_kvcache(nullptr), FLASH_ERROR_NULL_POINTER);
}

// CUDA tensors: validated, then refused with a clear status (the GPU kernels are a later step of issue 71). The
// pointers are never dereferenced, so fake ones do.
TEST(KvcacheValidation, CudaTensorsRefusedForNow) {
  BadCase b;
  for (flash_tensor* t : {&b.a.q, &b.a.k_cache, &b.a.v_cache, &b.a.k_new, &b.a.v_new, &b.a.o}) {
    t->device_type = FLASH_DEVICE_CUDA;
    t->dtype = FLASH_DTYPE_BF16;
  }
  b.a.lse.device_type = FLASH_DEVICE_CUDA;
  b.expect(FLASH_ERROR_ALGORITHM_UNAVAILABLE, "no GPU kernel yet");
  b.a.q.device_id = 1;
  b.expect(FLASH_ERROR_DEVICE_MISMATCH, "q is on cuda:1");
}

TEST(CombineValidation, Refusals) {
  std::mt19937_64 rng(base_seed() ^ 0x7100d);
  auto fresh = [&] { return make_combine_case(rng, 3, FLASH_DTYPE_FP32, FLASH_DTYPE_FP16, FLASH_DTYPE_BF16, false); };
  auto expect = [&](CombineCase& c, flash_combine_args& a, int32_t status, const std::string& needle) {
    c.o.poison(), c.lse.poison();
    const int32_t s = flash_combine(&a);
    EXPECT_EQ(s, status) << flash_status_string(s) << ": " << flash_last_error_message();
    EXPECT_NE(std::string(flash_last_error_message()).find(needle), std::string::npos)
        << "message was: " << flash_last_error_message();
    EXPECT_TRUE(std::all_of(c.o.bytes.begin(), c.o.bytes.end(), [](unsigned char x) { return x == 0xFF; }));
  };
  auto args = [](CombineCase& c) {
    flash_combine_args a;
    flash_combine_args_init(&a);
    a.num_parts = static_cast<int32_t>(c.od.size());
    a.o_parts = c.od.data();
    a.lse_parts = c.ld.data();
    a.o = c.o.desc;
    a.lse = c.lse.desc;
    return a;
  };
  { CombineCase c = fresh(); auto a = args(c); a.num_parts = 0; expect(c, a, FLASH_ERROR_INVALID_ARGUMENT, "num_parts is 0"); }
  { CombineCase c = fresh(); auto a = args(c); a.o_parts = nullptr; expect(c, a, FLASH_ERROR_NULL_POINTER, "o_parts is NULL"); }
  { CombineCase c = fresh(); auto a = args(c); a.lse_parts = nullptr; expect(c, a, FLASH_ERROR_NULL_POINTER, "lse_parts is NULL"); }
  { CombineCase c = fresh(); c.od[1].shape[3] += 8; auto a = args(c); expect(c, a, FLASH_ERROR_BAD_SHAPE, "o_parts[1].shape[3]"); }
  { CombineCase c = fresh(); c.od[2].dtype = FLASH_DTYPE_FP16; auto a = args(c); expect(c, a, FLASH_ERROR_DTYPE_MISMATCH, "o_parts[2].dtype is fp16"); }
  { CombineCase c = fresh(); c.ld[1].dtype = FLASH_DTYPE_BF16; auto a = args(c); expect(c, a, FLASH_ERROR_DTYPE_MISMATCH, "lse_parts[1].dtype"); }
  { CombineCase c = fresh(); c.ld[0].shape[1] += 1; auto a = args(c); expect(c, a, FLASH_ERROR_BAD_SHAPE, "lse_parts[0].shape[1]"); }
  { CombineCase c = fresh(); c.ld[2].data = nullptr; auto a = args(c); expect(c, a, FLASH_ERROR_NULL_POINTER, "lse_parts[2].data is NULL"); }
  { CombineCase c = fresh(); auto a = args(c); a.o.data = c.od[1].data; expect(c, a, FLASH_ERROR_INVALID_ARGUMENT, "o overlaps o_parts[1]"); }
  { CombineCase c = fresh(); auto a = args(c); a.lse.data = c.ld[0].data; expect(c, a, FLASH_ERROR_INVALID_ARGUMENT, "lse overlaps lse_parts[0]"); }
  {
    // (A zero stride is refused only on a dimension of extent > 1: seqlen 1 would take any stride.)
    CombineCase c = fresh();
    while (c.S < 2) c = fresh();
    auto a = args(c);
    a.o.strides[1] = 0;
    expect(c, a, FLASH_ERROR_BAD_STRIDE, "o.strides[1]");
  }
  {
    CombineCase c = fresh();
    for (auto& t : c.od) t.device_type = FLASH_DEVICE_CUDA;
    for (auto& t : c.ld) t.device_type = FLASH_DEVICE_CUDA;
    auto a = args(c);
    a.o.device_type = a.lse.device_type = FLASH_DEVICE_CUDA;
    expect(c, a, FLASH_ERROR_ALGORITHM_UNAVAILABLE, "no GPU kernel yet");
  }
  EXPECT_EQ(flash_combine(nullptr), FLASH_ERROR_NULL_POINTER);
}
