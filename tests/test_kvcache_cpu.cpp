// tests/test_kvcache_cpu.cpp -- flash_fwd_kvcache and flash_combine on the CPU (issue 71).
//
// The cases and their check against the fp64 reference: support/cases.hpp.
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
#include "support/cases.hpp"
#include "support/reference.hpp"

namespace {

using flash_test::base_seed;
using namespace kv_test;

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

// CUDA tensors: validated like CPU ones, then, without a GPU, refused with FLASH_ERROR_NO_CUDA_DEVICE; with one,
// the host buffers behind these descriptors are refused as host memory (the GPU tests run the kernels).
TEST(KvcacheValidation, CudaTensorsNeedADeviceAndDeviceMemory) {
  BadCase b;
  for (flash_tensor* t : {&b.a.q, &b.a.k_cache, &b.a.v_cache, &b.a.k_new, &b.a.v_new, &b.a.o}) {
    t->device_type = FLASH_DEVICE_CUDA;
    t->dtype = FLASH_DTYPE_BF16;
  }
  b.a.lse.device_type = FLASH_DEVICE_CUDA;
  if (flash_test::cuda_available()) b.expect(FLASH_ERROR_DEVICE_MISMATCH, "host memory");
  else b.expect(FLASH_ERROR_NO_CUDA_DEVICE, "no CUDA device");
  b.a.q.device_id = 1;
  b.expect(FLASH_ERROR_DEVICE_MISMATCH, "q is on cuda:1");
  b.a.q.device_id = 0;
  b.a.algorithm = FLASH_ALGO_SM90;
  if (flash_test::cuda_available()) b.expect(FLASH_ERROR_ALGORITHM_UNAVAILABLE, "pass auto or sm80");
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
    if (flash_test::cuda_available()) expect(c, a, FLASH_ERROR_DEVICE_MISMATCH, "host memory");
    else expect(c, a, FLASH_ERROR_NO_CUDA_DEVICE, "no CUDA device");
  }
  EXPECT_EQ(flash_combine(nullptr), FLASH_ERROR_NULL_POINTER);
}
