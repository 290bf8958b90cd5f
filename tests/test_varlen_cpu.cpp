// tests/test_varlen_cpu.cpp -- packed variable-length batches (flash.h, since 1.3) on the host: flash_fwd and flash_bwd
// with cu_seqlens_q / cu_seqlens_k / seqused_k, algorithms cpu and naive, against the fp64 reference of
// tests/support/reference.hpp and reference_bwd.hpp run sequence by sequence (each sequence is its own attention
// problem of batch 1: the references see 4-D views of its rows and know nothing of varlen). Random length mixes with
// 0, 1 and odd lengths, seqlen_q != seqlen_k per sequence, GQA/MQA, causal in both alignments, windows, strided and
// head-major layouts, seqused_k, rows after the last sequence; outputs poisoned (NaN) before every call, and every
// byte of an output outside the sequences' rows checked untouched afterwards. Then: each sequence bitwise equal to the
// dense call of batch 1 it is, bitwise determinism across thread counts, every refusal, and the sm90 algorithm's
// refusal message (host code: no GPU needed). The cases and checks: tests/support/cases.hpp (namespace varlen_test),
// which the GPU suites share.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "libflash/cuda/sm90/fwd/plan.h"
#include "libflash/varlen.h"
#include "support/cases.hpp"

using flash_test::HostTensor;
using flash_test::base_seed;
using namespace varlen_test;

namespace {

void expect_fwd_ok(const VSpec& s, uint64_t salt, std::vector<int32_t> algorithms = {FLASH_ALGO_CPU, FLASH_ALGO_NAIVE}) {
  std::mt19937_64 rng(base_seed() ^ (0x7a11 + salt));
  VCase c = make_vcase(s, rng);
  for (int32_t algo : algorithms) {
    int32_t used = -1;
    const int32_t st = run_fwd(c, algo, &used);
    ASSERT_EQ(st, FLASH_OK) << flash_status_string(st) << ": " << flash_last_error_message() << "\n  case: " << s.describe();
    EXPECT_EQ(used, algo);
    const std::string problems = check_fwd(c);
    EXPECT_TRUE(problems.empty()) << flash_algorithm_name(algo) << ": " << problems << "\n  case: " << s.describe()
                                  << "\n  LIBFLASH_TEST_SEED=" << base_seed();
  }
}

void expect_bwd_ok(const VSpec& s, uint64_t salt, std::vector<int32_t> algorithms = {FLASH_ALGO_CPU, FLASH_ALGO_NAIVE}) {
  std::mt19937_64 rng(base_seed() ^ (0xb7a1 + salt));
  VCase c;
  ASSERT_EQ(make_bwd_vcase(s, rng, &c), FLASH_OK) << flash_last_error_message() << "\n  case: " << s.describe();
  const PackedRefs r = packed_references(c);
  for (int32_t algo : algorithms) {
    int32_t used = -1;
    const int32_t st = run_bwd(c, algo, 0, &used);
    ASSERT_EQ(st, FLASH_OK) << flash_status_string(st) << ": " << flash_last_error_message() << "\n  case: " << s.describe();
    EXPECT_EQ(used, algo);
    const std::string problems = check_bwd(c, r);
    EXPECT_TRUE(problems.empty()) << flash_algorithm_name(algo) << ": " << problems << "\n  case: " << s.describe()
                                  << "\n  LIBFLASH_TEST_SEED=" << base_seed();
  }
}

VSpec fixed(std::vector<int64_t> lq, std::vector<int64_t> lk, int32_t dtype = FLASH_DTYPE_FP32) {
  VSpec s;
  s.lq = std::move(lq), s.lk = std::move(lk), s.dtype = dtype;
  s.hq = 4, s.hkv = 2, s.d = 32;
  return s;
}

}  // namespace

// ---- Random mixes ---------------------------------------------------------------------------------------------

class VarlenForwardSweep : public ::testing::TestWithParam<int> {};
TEST_P(VarlenForwardSweep, MatchesReferencePerSequence) {
  std::mt19937_64 rng(base_seed() + 7919u * static_cast<uint64_t>(GetParam() + 1));
  expect_fwd_ok(random_vspec(rng, 300), static_cast<uint64_t>(GetParam()));
}
INSTANTIATE_TEST_SUITE_P(Random, VarlenForwardSweep, ::testing::Range(0, 24));

class VarlenBackwardSweep : public ::testing::TestWithParam<int> {};
TEST_P(VarlenBackwardSweep, MatchesReferencePerSequence) {
  std::mt19937_64 rng(base_seed() + 104729u * static_cast<uint64_t>(GetParam() + 1));
  expect_bwd_ok(random_vspec(rng, 160), static_cast<uint64_t>(GetParam()));
}
INSTANTIATE_TEST_SUITE_P(Random, VarlenBackwardSweep, ::testing::Range(0, 16));

// ---- Chosen cases -----------------------------------------------------------------------------------------------

TEST(Varlen, ZeroAndOneLengthSequences) {
  // Empty sequences at the start, middle and end; a sequence with queries and no keys (O = 0, LSE = -inf, dq = 0);
  // one with keys and no queries (dk = dv = 0); single rows and single keys.
  VSpec s = fixed({0, 5, 0, 1, 7, 3, 0}, {4, 0, 6, 1, 1, 9, 0});
  expect_fwd_ok(s, 1);
  expect_bwd_ok(s, 1);
  s.mask.causal = 1;
  expect_fwd_ok(s, 2);
  expect_bwd_ok(s, 2);
  VSpec all_empty = fixed({0, 0}, {0, 0});  // nothing to do (the tensors still have one row, left untouched)
  expect_fwd_ok(all_empty, 3);
  expect_bwd_ok(all_empty, 3);
}

TEST(Varlen, CausalBothAlignmentsPerSequence) {
  // seqlen_q > seqlen_k and < per sequence: bottom-right leaves each sequence's first rows empty, top-left its last
  // keys unseen; the diagonal must follow each sequence's own lengths, not the call's maxima.
  for (int align : {FLASH_ALIGN_BOTTOM_RIGHT, FLASH_ALIGN_TOP_LEFT})
    for (int32_t dt : {FLASH_DTYPE_FP32, FLASH_DTYPE_BF16}) {
      VSpec s = fixed({70, 3, 130, 64}, {20, 65, 129, 1}, dt);
      s.mask.causal = 1;
      s.mask.alignment = align;
      s.max_slack = 11;
      expect_fwd_ok(s, 10 + align);
      expect_bwd_ok(s, 10 + align);
    }
}

TEST(Varlen, SlidingWindowsPerSequence) {
  const int windows[][2] = {{0, 0}, {16, 0}, {-1, 5}, {3, -1}, {40, 40}};
  for (const auto& w : windows)
    for (int align : {FLASH_ALIGN_BOTTOM_RIGHT, FLASH_ALIGN_TOP_LEFT}) {
      VSpec s = fixed({90, 17, 1, 150}, {120, 17, 33, 70}, FLASH_DTYPE_FP16);
      s.mask.window_left = w[0], s.mask.window_right = w[1], s.mask.alignment = align;
      expect_fwd_ok(s, 20 + w[0]);
      expect_bwd_ok(s, 20 + w[1]);
    }
}

TEST(Varlen, GqaAndMqa) {
  VSpec s = fixed({33, 80, 5}, {47, 12, 100}, FLASH_DTYPE_BF16);
  s.hq = 8, s.hkv = 1;
  expect_fwd_ok(s, 30);
  expect_bwd_ok(s, 30);
  s.hq = 6, s.hkv = 3, s.mask.causal = 1;
  expect_fwd_ok(s, 31);
  expect_bwd_ok(s, 31);
}

TEST(Varlen, StridedAndHeadMajorLayouts) {
  for (int layout : {1, 2}) {
    VSpec s = fixed({40, 0, 77}, {63, 9, 65}, FLASH_DTYPE_FP16);
    s.layout = layout;
    s.extra_q = 3, s.extra_k = 5;  // rows after the last sequence: never written
    expect_fwd_ok(s, 40 + layout);
    expect_bwd_ok(s, 40 + layout);
  }
}

TEST(Varlen, SequsedK) {
  // Key slots with room to spare: only the first seqused_k[i] keys count (0 included: the rows see no key); the
  // backward writes dk = dv = 0 in the rest of each slot.
  VSpec s = fixed({20, 31, 8, 5}, {50, 31, 64, 10});
  s.used = {13, 31, 0, 10};
  expect_fwd_ok(s, 50);
  expect_bwd_ok(s, 50);
  s.mask.causal = 1, s.mask.alignment = FLASH_ALIGN_BOTTOM_RIGHT, s.dtype = FLASH_DTYPE_BF16;
  expect_fwd_ok(s, 51);
  expect_bwd_ok(s, 51);
}

TEST(Varlen, LargerMaxSeqlensAreAllowed) {
  VSpec s = fixed({10, 3}, {4, 12});
  s.max_slack = 200;
  expect_fwd_ok(s, 60);
  expect_bwd_ok(s, 60);
}

// Each sequence of a varlen call is the dense call of batch 1 on its rows: with algorithm cpu, bit for bit.
TEST(Varlen, EachSequenceIsBitwiseTheDenseCall) {
  std::mt19937_64 rng(base_seed() ^ 0xde45e);
  VSpec s = fixed({70, 0, 129, 1, 33}, {65, 8, 100, 0, 40}, FLASH_DTYPE_BF16);
  s.used = {60, 8, 100, 0, 21};
  s.mask.causal = 1;
  s.layout = 1;
  VCase c;
  ASSERT_EQ(make_bwd_vcase(s, rng, &c), FLASH_OK) << flash_last_error_message();
  ASSERT_EQ(run_bwd(c, FLASH_ALGO_CPU), FLASH_OK) << flash_last_error_message();
  for (int64_t i = 0; i < s.batch(); ++i) {
    const int64_t sq = s.lq[i], sk = s.keys(i);
    if (sq == 0 || sk == 0) continue;  // (a dense call has positive lengths)
    SCOPED_TRACE("sequence " + std::to_string(i));
    const int64_t es = static_cast<int64_t>(esize(s.dtype));
    std::vector<unsigned char> o(sq * s.hq * s.d * es, 0xFF), dq(o.size(), 0xFF), dk(sk * s.hkv * s.d * es, 0xFF),
        dv(dk.size(), 0xFF);
    std::vector<float> lse(s.hq * sq);
    const int64_t qshape[4] = {1, sq, s.hq, s.d}, kshape[4] = {1, sk, s.hkv, s.d}, lshape[3] = {1, s.hq, sq};
    flash_fwd_args f;
    flash_fwd_args_init(&f);
    f.q = view4(c.q.desc, c.cu_q[i], sq), f.k = view4(c.k.desc, c.cu_k[i], sk), f.v = view4(c.v.desc, c.cu_k[i], sk);
    f.o = flash_tensor_contiguous(o.data(), s.dtype, FLASH_DEVICE_CPU, 0, 4, qshape);
    f.lse = flash_tensor_contiguous(lse.data(), FLASH_DTYPE_FP32, FLASH_DEVICE_CPU, 0, 3, lshape);
    f.causal = 1;
    f.algorithm = FLASH_ALGO_CPU;
    ASSERT_EQ(flash_fwd(&f), FLASH_OK) << flash_last_error_message();
    for (int64_t r = 0; r < sq; ++r)
      for (int64_t h = 0; h < s.hq; ++h) {
        ASSERT_EQ(0, std::memcmp(&o[((r * s.hq + h) * s.d) * es], &c.o.bytes[off3(c.o.desc, c.cu_q[i] + r, h, 0) * es], s.d * es))
            << "o row " << r << " head " << h;
        const float packed = reinterpret_cast<const float*>(
            c.lse.bytes.data())[h * c.lse.desc.strides[0] + (c.cu_q[i] + r) * c.lse.desc.strides[1]];
        ASSERT_EQ(0, std::memcmp(&lse[h * sq + r], &packed, 4)) << "lse row " << r << " head " << h;
      }
    flash_bwd_args b;
    flash_bwd_args_init(&b);
    b.q = f.q, b.k = f.k, b.v = f.v, b.o = f.o, b.lse = f.lse;
    b.d_o = view4(c.d_o.desc, c.cu_q[i], sq);
    b.dq = flash_tensor_contiguous(dq.data(), s.dtype, FLASH_DEVICE_CPU, 0, 4, qshape);
    b.dk = flash_tensor_contiguous(dk.data(), s.dtype, FLASH_DEVICE_CPU, 0, 4, kshape);
    b.dv = flash_tensor_contiguous(dv.data(), s.dtype, FLASH_DEVICE_CPU, 0, 4, kshape);
    b.causal = 1;
    b.algorithm = FLASH_ALGO_CPU;
    ASSERT_EQ(flash_bwd(&b), FLASH_OK) << flash_last_error_message();
    for (int64_t r = 0; r < sq; ++r)
      for (int64_t h = 0; h < s.hq; ++h)
        ASSERT_EQ(0, std::memcmp(&dq[((r * s.hq + h) * s.d) * es], &c.dq.bytes[off3(c.dq.desc, c.cu_q[i] + r, h, 0) * es],
                                 s.d * es))
            << "dq row " << r << " head " << h;
    for (int64_t r = 0; r < sk; ++r)
      for (int64_t h = 0; h < s.hkv; ++h) {
        ASSERT_EQ(0, std::memcmp(&dk[((r * s.hkv + h) * s.d) * es], &c.dk.bytes[off3(c.dk.desc, c.cu_k[i] + r, h, 0) * es],
                                 s.d * es))
            << "dk row " << r << " head " << h;
        ASSERT_EQ(0, std::memcmp(&dv[((r * s.hkv + h) * s.d) * es], &c.dv.bytes[off3(c.dv.desc, c.cu_k[i] + r, h, 0) * es],
                                 s.d * es))
            << "dv row " << r << " head " << h;
      }
  }
}

TEST(Varlen, DeterministicAcrossThreadCounts) {
  const char* old = std::getenv("LIBFLASH_NUM_THREADS");
  const std::string saved = old ? old : "";
  std::mt19937_64 rng(base_seed() ^ 0xd37);
  VSpec s = fixed({150, 0, 64, 1, 200, 37}, {130, 20, 65, 5, 260, 0}, FLASH_DTYPE_BF16);
  s.hq = 8, s.hkv = 2, s.mask.causal = 1;
  for (int32_t algo : {FLASH_ALGO_CPU, FLASH_ALGO_NAIVE}) {
    VCase c;
    ASSERT_EQ(make_bwd_vcase(s, rng, &c), FLASH_OK);
    std::vector<unsigned char> first[5];
    const char* threads[] = {"1", "3", "8"};
    for (int run = 0; run < 3; ++run) {
      setenv("LIBFLASH_NUM_THREADS", threads[run], 1);
      ASSERT_EQ(run_fwd(c, algo), FLASH_OK) << flash_last_error_message();
      ASSERT_EQ(run_bwd(c, algo, FLASH_FLAG_DETERMINISTIC), FLASH_OK) << flash_last_error_message();
      const HostTensor* out[5] = {&c.o, &c.lse, &c.dq, &c.dk, &c.dv};
      for (int t = 0; t < 5; ++t) {
        if (run == 0) first[t] = out[t]->bytes;
        else EXPECT_TRUE(first[t] == out[t]->bytes) << flash_algorithm_name(algo) << ": output " << t
                                                     << " differs with LIBFLASH_NUM_THREADS=" << threads[run];
      }
    }
  }
  if (old) setenv("LIBFLASH_NUM_THREADS", saved.c_str(), 1);
  else unsetenv("LIBFLASH_NUM_THREADS");
}

TEST(Varlen, AutoPicksCpuAndWorkspaceIsHonoured) {
  std::mt19937_64 rng(base_seed() ^ 0x3a5);
  VSpec s = fixed({70, 0, 9}, {30, 40, 70});
  VCase c;
  ASSERT_EQ(make_bwd_vcase(s, rng, &c), FLASH_OK);
  int32_t used = -1;
  ASSERT_EQ(run_fwd(c, FLASH_ALGO_AUTO, &used), FLASH_OK);
  EXPECT_EQ(used, FLASH_ALGO_CPU);
  ASSERT_EQ(run_bwd(c, FLASH_ALGO_AUTO, 0, &used), FLASH_OK) << flash_last_error_message();
  EXPECT_EQ(used, FLASH_ALGO_CPU);
  const std::vector<unsigned char> dq = c.dq.bytes;
  flash_bwd_args a;
  fill_bwd(c, &a, FLASH_ALGO_CPU);
  size_t bytes = 0;
  ASSERT_EQ(flash_bwd_workspace_size(&a, &bytes), FLASH_OK) << flash_last_error_message();
  // The sum of the sequences' dense workspaces: fp32 dQacc and D per query row and head, one counter per
  // (kv head, query block of 64) of each sequence: sequences of 70, 0, 9 queries have 2 + 0 + 1 blocks.
  EXPECT_EQ(bytes, 4 * (size_t(4) * 79 * (32 + 1) + size_t(2) * 3));
  std::vector<unsigned char> ws(bytes, 0xFF);
  a.workspace = ws.data();
  a.workspace_size = bytes - 1;
  EXPECT_EQ(flash_bwd(&a), FLASH_ERROR_WORKSPACE_TOO_SMALL);
  a.workspace_size = bytes;
  std::fill(c.dq.bytes.begin(), c.dq.bytes.end(), 0xFF);
  ASSERT_EQ(flash_bwd(&a), FLASH_OK) << flash_last_error_message();
  EXPECT_EQ(dq, c.dq.bytes);
}

// ---- Refusals ---------------------------------------------------------------------------------------------------

namespace {

// A small valid varlen call: 3 sequences of (3, 5), (0, 2), (4, 0) rows; one extra row after each.
struct VFixture {
  std::vector<float> q, k, v, o, lse, d_o, dq, dk, dv;
  std::vector<int32_t> cu_q{0, 3, 3, 7}, cu_k{0, 5, 7, 7}, used{5, 1, 0};
  flash_fwd_args f;
  flash_bwd_args b;
  static constexpr int64_t kTq = 8, kTk = 8, kHq = 4, kHkv = 2, kD = 16;
  VFixture() {
    q.assign(kTq * kHq * kD, 0.5f), o.assign(q.size(), NAN), d_o.assign(q.size(), 0.25f), dq.assign(q.size(), NAN);
    k.assign(kTk * kHkv * kD, 0.25f), v.assign(k.size(), 1.0f), dk.assign(k.size(), NAN), dv.assign(k.size(), NAN);
    lse.assign(kHq * kTq, NAN);
    const int64_t qs[3] = {kTq, kHq, kD}, ks[3] = {kTk, kHkv, kD}, ls[2] = {kHq, kTq};
    auto t = [](std::vector<float>& x, int ndim, const int64_t* shape) {
      return flash_tensor_contiguous(x.data(), FLASH_DTYPE_FP32, FLASH_DEVICE_CPU, 0, ndim, shape);
    };
    flash_fwd_args_init(&f);
    f.q = t(q, 3, qs), f.k = t(k, 3, ks), f.v = t(v, 3, ks), f.o = t(o, 3, qs), f.lse = t(lse, 2, ls);
    f.cu_seqlens_q = cu_q.data(), f.cu_seqlens_k = cu_k.data(), f.varlen_batch = 3;
    f.max_seqlen_q = 4, f.max_seqlen_k = 5;
    flash_bwd_args_init(&b);
    b.q = f.q, b.k = f.k, b.v = f.v, b.o = t(o, 3, qs), b.lse = f.lse, b.d_o = t(d_o, 3, qs);
    b.dq = t(dq, 3, qs), b.dk = t(dk, 3, ks), b.dv = t(dv, 3, ks);
    b.cu_seqlens_q = cu_q.data(), b.cu_seqlens_k = cu_k.data(), b.varlen_batch = 3;
    b.max_seqlen_q = 4, b.max_seqlen_k = 5;
  }
  bool fwd_untouched() const {
    for (float x : o) if (!std::isnan(x)) return false;
    for (float x : lse) if (!std::isnan(x)) return false;
    return true;
  }
  bool bwd_untouched() const {
    for (const auto* x : {&dq, &dk, &dv})
      for (float y : *x) if (!std::isnan(y)) return false;
    return true;
  }
};

// The forward (and, with both = true, the backward given the same change) refused with `status` and `needle`;
// nothing written; the workspace queries refuse alike.
template <class Change>
void expect_refused(Change change, int32_t status, const std::string& needle, bool both = true) {
  VFixture x;
  change(x.f);
  int32_t s = flash_fwd(&x.f);
  EXPECT_EQ(s, status) << flash_status_string(s) << ": " << flash_last_error_message();
  EXPECT_NE(std::string(flash_last_error_message()).find(needle), std::string::npos)
      << "forward message was: " << flash_last_error_message() << " (wanted: " << needle << ")";
  EXPECT_TRUE(x.fwd_untouched()) << "a refused forward wrote its outputs";
  size_t bytes = 123;
  EXPECT_EQ(flash_fwd_workspace_size(&x.f, &bytes), status);
  EXPECT_EQ(bytes, 0u);
  if (!both) return;
  change(x.b);
  s = flash_bwd(&x.b);
  EXPECT_EQ(s, status) << flash_status_string(s) << ": " << flash_last_error_message();
  EXPECT_NE(std::string(flash_last_error_message()).find(needle), std::string::npos)
      << "backward message was: " << flash_last_error_message() << " (wanted: " << needle << ")";
  EXPECT_TRUE(x.bwd_untouched()) << "a refused backward wrote its outputs";
  bytes = 123;
  EXPECT_EQ(flash_bwd_workspace_size(&x.b, &bytes), status);
  EXPECT_EQ(bytes, 0u);
}

}  // namespace

TEST(VarlenValidation, ValidFixtureRuns) {
  VFixture x;
  ASSERT_EQ(flash_fwd(&x.f), FLASH_OK) << flash_last_error_message();
  ASSERT_EQ(flash_bwd(&x.b), FLASH_OK) << flash_last_error_message();
  // Rows after the last sequence (row 7 of q, o, dq, lse; row 7 of k, dk, dv) are not written.
  for (int64_t e = 0; e < VFixture::kHq * VFixture::kD; ++e) {
    EXPECT_TRUE(std::isnan(x.o[7 * VFixture::kHq * VFixture::kD + e]));
    EXPECT_TRUE(std::isnan(x.dq[7 * VFixture::kHq * VFixture::kD + e]));
  }
  for (int64_t h = 0; h < VFixture::kHq; ++h) EXPECT_TRUE(std::isnan(x.lse[h * VFixture::kTq + 7]));
  for (int64_t e = 0; e < VFixture::kHkv * VFixture::kD; ++e) EXPECT_TRUE(std::isnan(x.dk[7 * VFixture::kHkv * VFixture::kD + e]));
  // Sequence 2 (4 queries, no keys): O = 0, LSE = -inf, dq = 0.
  for (int64_t r = 3; r < 7; ++r) {
    EXPECT_EQ(x.o[r * VFixture::kHq * VFixture::kD], 0.0f);
    EXPECT_EQ(x.lse[r], -INFINITY);
    EXPECT_EQ(x.dq[r * VFixture::kHq * VFixture::kD], 0.0f);
  }
  // Sequence 1 (no queries, 2 keys): dk = dv = 0.
  EXPECT_EQ(x.dk[5 * VFixture::kHkv * VFixture::kD], 0.0f);
  EXPECT_EQ(x.dv[6 * VFixture::kHkv * VFixture::kD], 0.0f);
}

TEST(VarlenValidation, BadOffsets) {
  expect_refused([](auto& a) { const_cast<int32_t*>(a.cu_seqlens_q)[0] = 1; }, FLASH_ERROR_INVALID_ARGUMENT,
                 "cu_seqlens_q[0] is 1 but must be 0");
  expect_refused([](auto& a) { const_cast<int32_t*>(a.cu_seqlens_k)[0] = -2; }, FLASH_ERROR_INVALID_ARGUMENT,
                 "cu_seqlens_k[0] is -2 but must be 0");
  expect_refused([](auto& a) { const_cast<int32_t*>(a.cu_seqlens_q)[2] = 2; }, FLASH_ERROR_INVALID_ARGUMENT,
                 "cu_seqlens_q[2] is 2, less than cu_seqlens_q[1] = 3: the offsets must not decrease");
  expect_refused([](auto& a) { const_cast<int32_t*>(a.cu_seqlens_k)[3] = 6; }, FLASH_ERROR_INVALID_ARGUMENT,
                 "cu_seqlens_k[3] is 6, less than cu_seqlens_k[2] = 7");
}

TEST(VarlenValidation, OffsetsOutOfRange) {
  expect_refused([](auto& a) { const_cast<int32_t*>(a.cu_seqlens_q)[3] = 9; }, FLASH_ERROR_INVALID_ARGUMENT,
                 "cu_seqlens_q[3] is 9 but q has 8 rows (q.shape[0])");
  expect_refused([](auto& a) { const_cast<int32_t*>(a.cu_seqlens_k)[3] = 100; }, FLASH_ERROR_INVALID_ARGUMENT,
                 "cu_seqlens_k[3] is 100 but k has 8 rows (k.shape[0])");
}

TEST(VarlenValidation, MaxSeqlenTooSmall) {
  expect_refused([](auto& a) { a.max_seqlen_q = 3; }, FLASH_ERROR_INVALID_ARGUMENT,
                 "max_seqlen_q is 3 but a sequence has 4 queries");
  expect_refused([](auto& a) { a.max_seqlen_k = 4; }, FLASH_ERROR_INVALID_ARGUMENT,
                 "max_seqlen_k is 4 but a sequence has 5 keys (cu_seqlens_k)");
  expect_refused([](auto& a) { a.max_seqlen_k = -1; }, FLASH_ERROR_INVALID_ARGUMENT, "max_seqlen_k is -1 but must be >= 0");
}

TEST(VarlenValidation, SequsedK) {
  // used = {5, 1, 0}: valid, and max_seqlen_k may then be 5.
  expect_refused([](auto& a) { a.seqused_k = nullptr; a.cu_seqlens_q = nullptr; }, FLASH_ERROR_NULL_POINTER,
                 "cu_seqlens_q is NULL but cu_seqlens_k is set");
  {
    VFixture x;
    x.f.seqused_k = x.used.data();
    EXPECT_EQ(flash_fwd(&x.f), FLASH_OK) << flash_last_error_message();
  }
  expect_refused(
      [](auto& a) {
        static std::vector<int32_t> used{5, 3, 0};  // sequence 1's slot holds 2 keys
        a.seqused_k = used.data();
      },
      FLASH_ERROR_INVALID_ARGUMENT, "seqused_k[1] is 3 but sequence 1's slot holds 2 keys");
  expect_refused(
      [](auto& a) {
        static std::vector<int32_t> used{-1, 0, 0};
        a.seqused_k = used.data();
      },
      FLASH_ERROR_INVALID_ARGUMENT, "seqused_k[0] is -1");
  expect_refused(
      [](auto& a) {
        static std::vector<int32_t> used{5, 2, 0};
        a.seqused_k = used.data();
        a.max_seqlen_k = 4;
      },
      FLASH_ERROR_INVALID_ARGUMENT, "max_seqlen_k is 4 but a sequence has 5 keys (seqused_k)");
}

TEST(VarlenValidation, FieldsThatGoTogether) {
  expect_refused([](auto& a) { a.cu_seqlens_k = nullptr; }, FLASH_ERROR_NULL_POINTER,
                 "cu_seqlens_k is NULL but cu_seqlens_q is set");
  expect_refused([](auto& a) { a.varlen_batch = 0; }, FLASH_ERROR_INVALID_ARGUMENT, "varlen_batch is 0 but must be >= 1");
  expect_refused([](auto& a) { a.reserved_1_3 = 7; }, FLASH_ERROR_INVALID_ARGUMENT, "reserved_1_3 is 7 but must be 0");
  expect_refused(
      [](auto& a) {
        a.cu_seqlens_q = a.cu_seqlens_k = nullptr;
        static std::vector<int32_t> used{1, 1, 1};
        a.seqused_k = used.data();
      },
      FLASH_ERROR_INVALID_ARGUMENT, "seqused_k is set but cu_seqlens_q is NULL");
  expect_refused([](auto& a) { a.cu_seqlens_q = a.cu_seqlens_k = nullptr; }, FLASH_ERROR_INVALID_ARGUMENT,
                 "is set but cu_seqlens_q is NULL");  // varlen_batch / max_seqlen_* left set
  expect_refused(
      [](auto& a) {
        a.cu_seqlens_q = reinterpret_cast<const int32_t*>(reinterpret_cast<const char*>(a.cu_seqlens_q) + 2);
      },
      FLASH_ERROR_INVALID_ARGUMENT, "cu_seqlens_q is not aligned to its int32 elements");
}

TEST(VarlenValidation, ShapesAreThePackedOnes) {
  expect_refused([](auto& a) { a.q.ndim = 4; a.q.shape[3] = 16; a.q.strides[3] = 1; }, FLASH_ERROR_BAD_SHAPE,
                 "q.ndim is 4 but must be 3");
  expect_refused([](auto& a) { a.lse.ndim = 3; a.lse.shape[2] = 1; a.lse.strides[2] = 1; }, FLASH_ERROR_BAD_SHAPE,
                 "lse.ndim is 3 but must be 2");
  expect_refused([](auto& a) { a.lse.shape[1] = 7; }, FLASH_ERROR_BAD_SHAPE, "lse.shape[1] is 7 but q.shape[0] is 8");
  expect_refused([](auto& a) { a.v.shape[0] = 7; }, FLASH_ERROR_BAD_SHAPE, "v.shape[0] is 7 but k.shape[0] is 8");
  expect_refused([](auto& a) { a.o.shape[1] = 2; }, FLASH_ERROR_BAD_SHAPE, "o.shape[1] is 2 but q.shape[1] is 4");
  expect_refused([](auto& a) { a.k.shape[1] = 3, a.v.shape[1] = 3; }, FLASH_ERROR_BAD_SHAPE,
                 "q.shape[1] (heads_q) is 4, not a multiple of k.shape[1] (heads_kv) 3", /*both=*/false);
  {
    VFixture x;  // (the backward's own tensors)
    x.b.dk.shape[0] = 4;
    EXPECT_EQ(flash_bwd(&x.b), FLASH_ERROR_BAD_SHAPE);
    EXPECT_NE(std::string(flash_last_error_message()).find("dk.shape[0] is 4 but k.shape[0] is 8"), std::string::npos)
        << flash_last_error_message();
    EXPECT_TRUE(x.bwd_untouched());
  }
}

TEST(VarlenValidation, BlockMaskIsUnsupported) {
  flash_block_mask m;
  flash_block_mask_init(&m);
  int32_t nb = 0;
  m.num_q_blocks = 1, m.max_kv_blocks = 0, m.kv_num_blocks = &nb;
  expect_refused([&](auto& a) { a.block_mask = &m; }, FLASH_ERROR_UNSUPPORTED,
                 "block-sparse masks are not supported with packed variable-length batches");
}

TEST(VarlenValidation, OutputsMayNotOverlapTheIndexArrays) {
  {
    VFixture x;
    x.f.cu_seqlens_q = reinterpret_cast<const int32_t*>(x.o.data() + 8);  // inside o
    EXPECT_EQ(flash_fwd(&x.f), FLASH_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(flash_last_error_message()).find("o overlaps cu_seqlens_q"), std::string::npos)
        << flash_last_error_message();
  }
  {
    VFixture x;  // the LSE over cu_seqlens_k (its values copied there first, so only the overlap is wrong)
    std::memcpy(x.lse.data() + 4, x.cu_k.data(), 16);
    x.f.cu_seqlens_k = reinterpret_cast<const int32_t*>(x.lse.data() + 4);
    EXPECT_EQ(flash_fwd(&x.f), FLASH_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(flash_last_error_message()).find("lse overlaps cu_seqlens_k"), std::string::npos)
        << flash_last_error_message();
  }
  {
    VFixture x;  // a gradient over seqused_k
    std::vector<int32_t> used{5, 1, 0};
    std::memcpy(x.dv.data() + 3, used.data(), 12);
    x.b.seqused_k = reinterpret_cast<const int32_t*>(x.dv.data() + 3);
    EXPECT_EQ(flash_bwd(&x.b), FLASH_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(flash_last_error_message()).find("dv overlaps seqused_k"), std::string::npos)
        << flash_last_error_message();
  }
  {
    VFixture x;  // the workspace over cu_seqlens_q
    x.b.workspace = const_cast<int32_t*>(x.cu_q.data());
    x.b.workspace_size = 8;
    EXPECT_EQ(flash_bwd(&x.b), FLASH_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(flash_last_error_message()).find("workspace overlaps cu_seqlens_q"), std::string::npos)
        << flash_last_error_message();
  }
}

// The sm90 forward runs varlen on the general kernel of each head dim (issue 72): its plan (host code, compiled into
// this test) picks kD64 / kD128 / kD256 -- never a split, pair or specialised variant -- with no shift, and the
// dynamic order's counter for causal masks.
TEST(VarlenGpu, Sm90PlansVarlenOnTheGeneralKernels) {
  flash::FwdParams q{};
  q.dtype = flash::DType::BF16;
  q.batch = 2, q.heads_q = q.heads_kv = 4, q.head_ratio = 1;
  q.seqlen_q = q.seqlen_k = 9000;  // dense: d128's long-key and d256's split kernels from 8192 keys
  q.window_left = q.window_right = -1;
  q.scale = 0.125f;
  q.q = q.k = q.v = reinterpret_cast<void*>(uintptr_t(1) << 20);
  q.o = reinterpret_cast<void*>(uintptr_t(1) << 20);
  q.bottom_right = true;
  const flash::sm90::Device dev;  // an H100's
  for (int d : {64, 128, 256}) {
    SCOPED_TRACE("d " + std::to_string(d));
    q.head_dim = d;
    q.varlen = false;
    q.q_row_stride = q.k_row_stride = q.v_row_stride = q.o_row_stride = 4 * d;
    q.q_head_stride = q.k_head_stride = q.v_head_stride = q.o_head_stride = d;
    q.q_batch_stride = q.k_batch_stride = q.v_batch_stride = q.o_batch_stride = int64_t(9000) * 4 * d;
    q.cu_seqlens_q = q.cu_seqlens_k = nullptr;
    q.total_q = q.total_k = 0;
    ASSERT_TRUE(flash::sm90::plan(q, dev).ok());
    q.varlen = true;
    const int32_t cu[3] = {0, 100, 9100};
    q.cu_seqlens_q = q.cu_seqlens_k = cu;
    q.total_q = q.total_k = 9100;
    q.q_batch_stride = q.k_batch_stride = q.v_batch_stride = q.o_batch_stride = 0;
    const flash::sm90::Variant general = d == 64    ? flash::sm90::Variant::kD64
                                         : d == 128 ? flash::sm90::Variant::kD128
                                                    : flash::sm90::Variant::kD256;
    for (int causal : {0, 1}) {
      q.window_right = causal ? 0 : -1;
      const flash::sm90::FwdPlan pl = flash::sm90::plan(q, dev);
      ASSERT_TRUE(pl.ok()) << pl.why;
      ASSERT_EQ(pl.launches, 1);
      const flash::sm90::Launch& l = pl.launch[0];
      EXPECT_EQ(l.variant, general);
      EXPECT_EQ(l.pdl, flash::sm90::Launch::kNoPdl);
      EXPECT_EQ(l.tail_role, flash::sm90::Launch::kNoTail);
      EXPECT_EQ(l.q_shift, 0);
      EXPECT_EQ(l.dynamic, causal == 1);
      const int64_t bm = flash::sm90::shape_of(general).block_m();
      EXPECT_EQ(l.num_m_blocks, (9000 + bm - 1) / bm);
      EXPECT_EQ(l.num_tiles, l.num_m_blocks * 4 * 2);
      EXPECT_EQ(pl.workspace, causal ? flash::sm90::kTileCounterBytes : 0u);
    }
    q.window_right = -1;
  }
  // A block mask never comes with varlen (validation refuses it); the plan refuses it too.
  q.has_block_mask = true;
  EXPECT_FALSE(flash::sm90::plan(q, dev).ok());
}

// CUDA tensors on a machine (or a build) without a GPU: the call is refused before anything runs.
TEST(VarlenGpu, CudaTensorsWithoutAGpu) {
  int32_t n = 0;
  flash_device_count(FLASH_DEVICE_CUDA, &n);
  if (n > 0) GTEST_SKIP() << "this machine has a CUDA device (tests/test_forward_gpu.cpp covers varlen there)";
  VFixture x;
  for (flash_tensor* t : {&x.f.q, &x.f.k, &x.f.v, &x.f.o, &x.f.lse}) t->device_type = FLASH_DEVICE_CUDA, t->dtype = t == &x.f.lse ? FLASH_DTYPE_FP32 : FLASH_DTYPE_BF16;
  const int32_t s = flash_fwd(&x.f);
  EXPECT_EQ(s, FLASH_ERROR_NO_CUDA_DEVICE) << flash_status_string(s) << ": " << flash_last_error_message();
}
