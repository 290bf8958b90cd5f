// tests/test_forward_gpu.cpp -- every CUDA algorithm against the fp64 reference (label: gpu). Skips
// cleanly on a machine without a GPU; CI has none, so these run on the H100 and their log is committed
// under bench_results/.
#include <gtest/gtest.h>

#include <cmath>

#include "support/harness.hpp"
#include "sweep.hpp"

using namespace flash_test;

namespace {
// Skips unless a GPU is present and `algorithm` is usable on device 0.
bool usable(int32_t algorithm, std::string* why) {
  if (!cuda_available()) return *why = "no CUDA device", false;
  flash_device_info info;
  flash_device_info_init(&info);
  if (flash_get_device_info(FLASH_DEVICE_CUDA, 0, &info) != FLASH_OK) return *why = flash_last_error_message(), false;
  if (!(info.algorithms & (1u << algorithm)))
    return *why = std::string("algorithm ") + flash_algorithm_name(algorithm) + " not available on " + info.name, false;
  return true;
}
#define REQUIRE_GPU_ALGORITHM(algo)                 \
  do {                                              \
    std::string why_;                               \
    if (!usable((algo), &why_)) GTEST_SKIP() << why_; \
  } while (0)

constexpr int32_t kGpuAlgorithms[] = {FLASH_ALGO_SM80, FLASH_ALGO_SM90, FLASH_ALGO_NAIVE};
}  // namespace

class GpuSweep : public ::testing::TestWithParam<std::tuple<int32_t, int>> {};

TEST_P(GpuSweep, MatchesReference) {
  const auto [algorithm, index] = GetParam();
  REQUIRE_GPU_ALGORITHM(algorithm);
  sweep_case(index, FLASH_DEVICE_CUDA, algorithm, /*with_masks=*/true);
}

INSTANTIATE_TEST_SUITE_P(Random, GpuSweep,
                         ::testing::Combine(::testing::ValuesIn(kGpuAlgorithms), ::testing::Range(0, 60)),
                         [](const auto& info) {
                           return std::string(flash_algorithm_name(std::get<0>(info.param))) + "_" +
                                  std::to_string(std::get<1>(info.param));
                         });

class GpuEdges : public ::testing::TestWithParam<int32_t> {
 protected:
  void expect_ok(const CaseSpec& spec) {
    std::mt19937_64 rng(base_seed() ^ 0xed9e);
    Case c = make_case(spec, rng);
    int32_t used = -1;
    const int32_t s = run_cuda(c, GetParam(), 0, &used);
    if (GetParam() == FLASH_ALGO_SM90 && spec.head_dim != 64 && spec.head_dim != 128 && spec.head_dim != 256) {
      // sm90 runs head dims 64, 128 and 256; it must refuse the others cleanly, naming the head dim.
      EXPECT_EQ(s, FLASH_ERROR_UNSUPPORTED);
      EXPECT_NE(std::string(flash_last_error_message()).find("head_dim"), std::string::npos) << flash_last_error_message();
      return;
    }
    ASSERT_EQ(s, FLASH_OK) << flash_status_string(s) << ": " << flash_last_error_message() << "\n  " << spec.describe();
    const Check ch = check_case(c);
    EXPECT_TRUE(ch.ok) << ch.message << "\n  case: " << spec.describe() << " seed " << base_seed();
  }
  static CaseSpec base(int64_t sq, int64_t sk, int64_t d, int32_t dtype) {
    CaseSpec s;
    s.batch = 2, s.heads_q = 4, s.heads_kv = 2, s.seqlen_q = sq, s.seqlen_k = sk, s.head_dim = d, s.dtype = dtype;
    return s;
  }
};

TEST_P(GpuEdges, EveryHeadDim) {
  REQUIRE_GPU_ALGORITHM(GetParam());
  for (int64_t d = 8; d <= 256; d += 8) expect_ok(base(77, 130, d, d % 16 ? FLASH_DTYPE_FP16 : FLASH_DTYPE_BF16));
}

TEST_P(GpuEdges, LargeMagnitudeBf16NoNaNOrInf) {
  REQUIRE_GPU_ALGORITHM(GetParam());
  for (int causal : {0, 1}) {
    CaseSpec s = base(300, 513, 128, FLASH_DTYPE_BF16);
    s.magnitude = 10.0;  // |x| up to ~30-40
    s.mask.causal = causal;
    expect_ok(s);
  }
}

TEST_P(GpuEdges, EmptyRowsAndAlignments) {
  REQUIRE_GPU_ALGORITHM(GetParam());
  for (int align : {FLASH_ALIGN_BOTTOM_RIGHT, FLASH_ALIGN_TOP_LEFT}) {
    CaseSpec s = base(333, 100, 64, FLASH_DTYPE_FP16);
    s.mask.causal = 1;
    s.mask.alignment = align;
    expect_ok(s);
    CaseSpec t = base(100, 333, 128, FLASH_DTYPE_BF16);
    t.mask.causal = 1;
    t.mask.alignment = align;
    expect_ok(t);
  }
}

TEST_P(GpuEdges, LongSequenceCausal) {
  REQUIRE_GPU_ALGORITHM(GetParam());
  CaseSpec s = base(2111, 2111, 128, FLASH_DTYPE_BF16);
  s.batch = 1, s.heads_q = 2, s.heads_kv = 1;
  s.mask.causal = 1;
  expect_ok(s);
}

TEST_P(GpuEdges, SlidingWindows) {
  REQUIRE_GPU_ALGORITHM(GetParam());
  const int windows[][2] = {{0, 0}, {16, 0}, {-1, 5}, {100, 100}, {3, -1}, {256, 0}};
  for (const auto& w : windows) {
    CaseSpec s = base(700, 555, 64, FLASH_DTYPE_BF16);
    s.mask.window_left = w[0];
    s.mask.window_right = w[1];
    expect_ok(s);
  }
}

TEST_P(GpuEdges, BlockSparse) {
  REQUIRE_GPU_ALGORITHM(GetParam());
  for (int pattern = 0; pattern < 3; ++pattern)
    for (int bs : {64, 128}) {
      CaseSpec s = base(600, 700, 128, FLASH_DTYPE_BF16);
      flash_ref::Mask& m = s.mask;
      m.block_m = bs, m.block_n = bs;
      m.n_qb = static_cast<int>((s.seqlen_q + bs - 1) / bs);
      m.n_kb = static_cast<int>((s.seqlen_k + bs - 1) / bs);
      m.mask_batch = static_cast<int>(s.batch), m.mask_heads = 1;  // broadcast over heads
      std::mt19937_64 rng(base_seed() + pattern);
      m.listed.resize(m.mask_batch * m.n_qb * m.n_kb);
      for (auto& x : m.listed) x = pattern == 0 ? 1 : pattern == 1 ? 0 : (rng() % 3 == 0);
      // An algorithm without block-sparse support says so; AUTO still answers.
      std::mt19937_64 r2(base_seed());
      Case c = make_case(s, r2);
      const int32_t st = run_cuda(c, GetParam(), 0);
      if (st == FLASH_ERROR_UNSUPPORTED) {
        EXPECT_NE(std::string(flash_last_error_message()).find("block"), std::string::npos);
        continue;
      }
      ASSERT_EQ(st, FLASH_OK) << flash_last_error_message();
      const Check ch = check_case(c);
      EXPECT_TRUE(ch.ok) << ch.message << "\n  case: " << s.describe();
    }
}

INSTANTIATE_TEST_SUITE_P(Algorithms, GpuEdges, ::testing::ValuesIn(kGpuAlgorithms),
                         [](const auto& info) { return std::string(flash_algorithm_name(info.param)); });

TEST(GpuAuto, PicksAFusedKernelAndFallsBackWhenNeeded) {
  std::string why;
  if (!usable(FLASH_ALGO_NAIVE, &why) && !usable(FLASH_ALGO_SM80, &why)) GTEST_SKIP() << why;
  std::mt19937_64 rng(base_seed());
  CaseSpec s;
  s.batch = 1, s.heads_q = 2, s.heads_kv = 2, s.seqlen_q = 300, s.seqlen_k = 300, s.head_dim = 128;
  s.dtype = FLASH_DTYPE_BF16;
  Case c = make_case(s, rng);
  int32_t used = -1;
  ASSERT_EQ(run_cuda(c, FLASH_ALGO_AUTO, 0, &used), FLASH_OK) << flash_last_error_message();
  EXPECT_TRUE(used == FLASH_ALGO_SM80 || used == FLASH_ALGO_SM90) << "auto picked " << flash_algorithm_name(used);
  EXPECT_TRUE(check_case(c).ok);
}

TEST(GpuErrors, HostPointerLabelledCuda) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  std::mt19937_64 rng(base_seed());
  CaseSpec s;
  s.dtype = FLASH_DTYPE_BF16;
  Case c = make_case(s, rng);
  flash_fwd_args args;
  fill_args(c, &args, FLASH_ALGO_AUTO);
  for (flash_tensor* t : {&args.q, &args.k, &args.v, &args.o, &args.lse}) t->device_type = FLASH_DEVICE_CUDA;
  EXPECT_EQ(flash_fwd(&args), FLASH_ERROR_DEVICE_MISMATCH) << flash_last_error_message();
  EXPECT_NE(std::string(flash_last_error_message()).find("host memory"), std::string::npos) << flash_last_error_message();
}
