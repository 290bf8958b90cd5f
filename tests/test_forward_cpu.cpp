// tests/test_forward_cpu.cpp -- the CPU algorithms (cpu = FlashAttention, naive = materialised) against
// the fp64 reference: a randomized sweep plus the edge cases a sweep may miss.
#include <gtest/gtest.h>

#include <cmath>

#include "support/harness.hpp"
#include "support/cases.hpp"

using namespace flash_test;

class CpuSweep : public ::testing::TestWithParam<std::tuple<int32_t, int>> {};

TEST_P(CpuSweep, MatchesReference) {
  const auto [algorithm, index] = GetParam();
  sweep_case(index, FLASH_DEVICE_CPU, algorithm, /*with_masks=*/true);
}

INSTANTIATE_TEST_SUITE_P(Random, CpuSweep,
                         ::testing::Combine(::testing::Values(FLASH_ALGO_CPU, FLASH_ALGO_NAIVE), ::testing::Range(0, 40)),
                         [](const auto& info) {
                           return std::string(flash_algorithm_name(std::get<0>(info.param))) + "_" +
                                  std::to_string(std::get<1>(info.param));
                         });

namespace {
CaseSpec base(int64_t sq, int64_t sk, int64_t d, int32_t dtype) {
  CaseSpec s;
  s.batch = 2, s.heads_q = 4, s.heads_kv = 2, s.seqlen_q = sq, s.seqlen_k = sk, s.head_dim = d, s.dtype = dtype;
  return s;
}
void expect_ok(CaseSpec spec, int32_t algorithm = FLASH_ALGO_CPU) {
  std::mt19937_64 rng(base_seed() ^ 0x5eed);
  Case c = make_case(spec, rng);
  const int32_t s = run_cpu(c, algorithm);
  ASSERT_EQ(s, FLASH_OK) << flash_last_error_message();
  const Check ch = check_case(c);
  EXPECT_TRUE(ch.ok) << ch.message << "\n  case: " << spec.describe() << " seed " << base_seed();
}
}  // namespace

TEST(CpuForward, EveryHeadDim) {
  for (int64_t d = 8; d <= 256; d += 8) expect_ok(base(37, 70, d, FLASH_DTYPE_BF16));
}

TEST(CpuForward, EmptyRowsGiveZeroAndMinusInfinity) {
  // Bottom-right causal with seqlen_q > seqlen_k: the first sq - sk rows see no key.
  for (int32_t algo : {FLASH_ALGO_CPU, FLASH_ALGO_NAIVE}) {
    CaseSpec s = base(150, 40, 64, FLASH_DTYPE_FP16);
    s.mask.causal = 1;
    expect_ok(s, algo);
  }
}

TEST(CpuForward, TopLeftAndBottomRightDiffer) {
  for (int align : {FLASH_ALIGN_TOP_LEFT, FLASH_ALIGN_BOTTOM_RIGHT}) {
    CaseSpec s = base(70, 200, 32, FLASH_DTYPE_FP32);
    s.mask.causal = 1;
    s.mask.alignment = align;
    expect_ok(s);
  }
}

TEST(CpuForward, SlidingWindows) {
  const int windows[][2] = {{0, 0}, {16, 0}, {-1, 5}, {100, 100}, {3, -1}, {0, -1}};
  for (const auto& w : windows) {
    CaseSpec s = base(300, 257, 64, FLASH_DTYPE_BF16);
    s.mask.window_left = w[0];
    s.mask.window_right = w[1];
    expect_ok(s);
    expect_ok(s, FLASH_ALGO_NAIVE);
  }
}

TEST(CpuForward, LargeMagnitudeNoNaN) {
  // |x| up to ~30 in bf16: scores of order 10^4 must not overflow the online softmax.
  CaseSpec s = base(200, 300, 128, FLASH_DTYPE_BF16);
  s.magnitude = 10.0;
  expect_ok(s);
  s.mask.causal = 1;
  expect_ok(s);
}

TEST(CpuForward, SingleKeyAndSingleQuery) {
  expect_ok(base(1, 1, 8, FLASH_DTYPE_FP32));
  expect_ok(base(1, 500, 256, FLASH_DTYPE_FP16));
  expect_ok(base(500, 1, 40, FLASH_DTYPE_BF16));
}

TEST(CpuForward, MultiQueryAttention) {
  CaseSpec s = base(100, 130, 64, FLASH_DTYPE_BF16);
  s.heads_q = 8, s.heads_kv = 1;
  expect_ok(s);
}

TEST(CpuForward, BlockSparseDenseEmptyAndRandom) {
  for (int pattern = 0; pattern < 3; ++pattern)
    for (int bs : {64, 128}) {
      CaseSpec s = base(300, 333, 64, FLASH_DTYPE_FP16);
      flash_ref::Mask& m = s.mask;
      m.block_m = bs, m.block_n = bs == 64 ? 128 : 64;
      m.n_qb = static_cast<int>((s.seqlen_q + m.block_m - 1) / m.block_m);
      m.n_kb = static_cast<int>((s.seqlen_k + m.block_n - 1) / m.block_n);
      m.mask_batch = 1, m.mask_heads = static_cast<int>(s.heads_q);  // broadcast over batch
      std::mt19937_64 rng(base_seed() + pattern);
      m.listed.resize(m.mask_heads * m.n_qb * m.n_kb);
      for (auto& x : m.listed) x = pattern == 0 ? 1 : pattern == 1 ? 0 : (rng() % 3 == 0);
      expect_ok(s);
      expect_ok(s, FLASH_ALGO_NAIVE);
      s.mask.causal = 1;  // composes with causal: the intersection
      expect_ok(s);
    }
}

TEST(CpuForward, BlockSparseEveryBlockSizeWithWindows) {
  // Every mix of 64 and 128 (the GPU kernels tile by both), odd lengths, composed with a two-sided
  // window and with top-left causal; lists differ per batch and head.
  int n = 0;
  for (int bm : {64, 128})
    for (int bn : {64, 128}) {
      CaseSpec s = base(201, 389, 32, FLASH_DTYPE_BF16);
      flash_ref::Mask& m = s.mask;
      m.block_m = bm, m.block_n = bn;
      m.n_qb = static_cast<int>((s.seqlen_q + bm - 1) / bm);
      m.n_kb = static_cast<int>((s.seqlen_k + bn - 1) / bn);
      m.mask_batch = static_cast<int>(s.batch), m.mask_heads = static_cast<int>(s.heads_q);
      std::mt19937_64 rng(base_seed() + 31 * ++n);
      m.listed.resize(size_t(m.mask_batch) * m.mask_heads * m.n_qb * m.n_kb);
      for (auto& x : m.listed) x = rng() % 2;
      s.mask.window_left = 90, s.mask.window_right = 20;
      expect_ok(s);
      s.mask.window_left = s.mask.window_right = -1;
      s.mask.causal = 1, s.mask.alignment = FLASH_ALIGN_TOP_LEFT;
      expect_ok(s);
    }
}

TEST(CpuForward, Deterministic) {
  std::mt19937_64 rng(base_seed());
  Case c = make_case(base(129, 257, 96, FLASH_DTYPE_BF16), rng);
  ASSERT_EQ(run_cpu(c, FLASH_ALGO_CPU), FLASH_OK);
  const auto first = c.o.bytes;
  ASSERT_EQ(run_cpu(c, FLASH_ALGO_CPU), FLASH_OK);
  EXPECT_EQ(first, c.o.bytes);
}
