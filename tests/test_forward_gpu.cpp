// tests/test_forward_gpu.cpp -- every CUDA algorithm against the fp64 reference (label: gpu). Skips
// cleanly on a machine without a GPU; CI has none, so these run on the H100 and their log is committed
// under bench_results/.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "libflash/cuda/sm90/fwd/plan.h"
#include "support/harness.hpp"
#include "support/cases.hpp"

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
  // A mask whose diagonal or right edge falls at a chosen place in a key block (the D64DiagonalHalfBlocks and
  // D256DiagonalSkip tests): causal (bottom-right, or top-left) or a window (wl, wr); dtypes, batch and GQA varied from
  // case to case.
  struct Diag {
    int64_t sq, sk;
    int causal, top_left, wl, wr;
  };
  template <size_t N>
  void expect_diag_cases(const Diag (&diags)[N], int64_t head_dim) {
    int n = 0;
    for (const Diag& d : diags) {
      CaseSpec s = base(d.sq, d.sk, head_dim, n % 2 ? FLASH_DTYPE_BF16 : FLASH_DTYPE_FP16);
      s.batch = 1 + n % 2, s.heads_q = 2, s.heads_kv = n % 3 == 0 ? 1 : 2;
      s.mask.causal = d.causal;
      if (d.top_left) s.mask.alignment = FLASH_ALIGN_TOP_LEFT;
      s.mask.window_left = d.wl, s.mask.window_right = d.wr;
      ++n;
      expect_ok(s);
    }
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

// Last tiles with few real rows: sm90 d64 runs 192-row tiles, so seqlen_q % 192 in 1..64 (or seqlen_q <= 64) leaves a
// tile of one warpgroup's real rows and two of junk. Key counts of 1 to 17 blocks, with and without a left window edge (no right edge:
// the tiles are not shifted, so the partial tile is the last), GQA, tiles before it in the same CTA.
TEST_P(GpuEdges, ShortLastTiles) {
  REQUIRE_GPU_ALGORITHM(GetParam());
  const int64_t seqlen_qs[] = {1, 37, 64, 192 + 64, 5 * 192 + 40};
  const int64_t seqlen_ks[] = {1, 128, 129, 300, 385, 1000, 2049};
  int n = 0;
  for (int64_t sq : seqlen_qs)
    for (int64_t sk : seqlen_ks) {
      CaseSpec s = base(sq, sk, 64, ++n % 2 ? FLASH_DTYPE_BF16 : FLASH_DTYPE_FP16);
      s.batch = 1, s.heads_q = 3, s.heads_kv = 1;
      if (n % 3 == 0) s.mask.window_left = 200;  // (no right edge: the tiles are not shifted, the last is partial)
      expect_ok(s);
    }
}

// d64 dense in two kernels on sm90 (plan.h, d64_split_rows): seqlen_q mod 192 in 1..64 (the last 192 + r rows on the
// two-warpgroup kernel), in 65..128 (the last r), 0 and > 128 (no split), and seqlen_q <= 128 (the second kernel
// alone); seqlen_k != seqlen_q, GQA, both dtypes, LSE. Every algorithm runs the same cases.
TEST_P(GpuEdges, D64DenseRowSplits) {
  REQUIRE_GPU_ALGORITHM(GetParam());
  const int64_t seqlen_qs[] = {1, 100, 128, 193, 256, 292, 384, 512, 1000, 1024, 1100, 2048};
  const int64_t seqlen_ks[] = {1, 129, 700, 1024};
  int n = 0;
  for (int64_t sq : seqlen_qs) {
    CaseSpec s = base(sq, seqlen_ks[n % 4], 64, n % 2 ? FLASH_DTYPE_BF16 : FLASH_DTYPE_FP16);
    s.batch = 1 + n % 2, s.heads_q = 3, s.heads_kv = n % 3 == 0 ? 1 : 3;
    ++n;
    expect_ok(s);
  }
}

// d64 causal's first rows apart on sm90 (plan.h, d64_causal_top_rows): the first seqlen_q mod 192 rows
// on the top-rows kernel, the rest as whole 192-row tiles on the three-warpgroup one, where that remainder is 1..64 below
// 2048 rows (193, 232, 1000, 1024, 1984) and the top rows see at most 128 keys; not split: 128 (512), 1024 with 77 keys
// more. Both alignments, seqlen_k below seqlen_q (bottom-right: the top rows see no key, O = 0 and LSE = -inf) and above
// it, a one-sided window (-1, 37), GQA, both dtypes. Every algorithm runs the same cases.
TEST_P(GpuEdges, D64CausalTopRows) {
  REQUIRE_GPU_ALGORITHM(GetParam());
  struct Top {
    int64_t sq, sk;
    bool top_left, window;
  };
  const Top tops[] = {{193, 193, false, false},  {232, 260, false, false},  {1000, 1000, true, false},
                      {1024, 1024, false, false}, {1024, 1080, false, false}, {1024, 1101, false, false},
                      {1024, 900, false, false},  {1024, 2000, true, false},  {1984, 1984, false, false},
                      {1024, 1024, false, true},  {512, 512, false, false}};
  int n = 0;
  for (const Top& t : tops) {
    CaseSpec s = base(t.sq, t.sk, 64, n % 2 ? FLASH_DTYPE_BF16 : FLASH_DTYPE_FP16);
    s.batch = 1 + n % 2, s.heads_q = 3, s.heads_kv = n % 3 == 0 ? 1 : 3;
    if (t.window) {
      s.mask.window_left = -1, s.mask.window_right = 37;
    } else {
      s.mask.causal = 1;
      if (t.top_left) s.mask.alignment = FLASH_ALIGN_TOP_LEFT;
    }
    ++n;
    expect_ok(s);
  }
}

// d64 tiles whose first (diagonal) key block the rows see none, half or all of (sm90's three-warpgroup kernel takes
// S_0's softmax on only those columns, sm90/fwd/traits.h kHalfDiag): causal with the diagonal at several offsets
// into a 128-key block (both alignments, seqlen_k above and below seqlen_q), right window edges that end inside a block's
// first half or past it, a left edge as well, and dense problems whose sequence end lies in a block's first half.
TEST_P(GpuEdges, D64DiagonalHalfBlocks) {
  REQUIRE_GPU_ALGORITHM(GetParam());
  const Diag diags[] = {{2100, 2100, 1, 0, -1, -1}, {2100, 2117, 1, 0, -1, -1}, {2100, 2164, 1, 0, -1, -1},
                        {700, 650, 1, 0, -1, -1},   {2100, 3000, 1, 1, -1, -1}, {2100, 2100, 0, 0, -1, 5},
                        {2100, 2100, 0, 0, -1, 70}, {2100, 2100, 0, 0, 30, 40}, {1000, 1088, 0, 0, -1, -1},
                        {1000, 1153, 0, 0, -1, -1}};
  expect_diag_cases(diags, 64);
}

// Tiles whose first (diagonal) key block one warpgroup's rows see none of (sm90 d256's 128-row tiles end 16-64 keys into
// an 80-key block, so warpgroup 0 starts at the next block, sm90/fwd/traits.h kSkipDiag; d64's three warpgroups as
// well, D64DiagonalHalfBlocks): causal 1024 and odd lengths with both alignments, seqlen_k above and below seqlen_q,
// right window edges inside and past a block, a two-sided window (the skipping warpgroup's next block partly left of its
// window), a tile of one block (nothing to start at: no skip), GQA, both dtypes.
TEST_P(GpuEdges, D256DiagonalSkip) {
  REQUIRE_GPU_ALGORITHM(GetParam());
  const Diag diags[] = {{1024, 1024, 1, 0, -1, -1}, {1000, 1000, 1, 0, -1, -1}, {1000, 1037, 1, 0, -1, -1},
                        {700, 650, 1, 0, -1, -1},   {900, 1500, 1, 1, -1, -1},  {1000, 1000, 0, 0, -1, 5},
                        {1000, 1000, 0, 0, -1, 70}, {1000, 1000, 0, 0, 30, 40}, {1000, 1000, 0, 0, 100, 0},
                        {77, 77, 1, 0, -1, -1}};
  expect_diag_cases(diags, 256);
}

// Long key ranges at d128 (sm90 runs >= 8192 keys without a left window edge on 192-key blocks, plan.h
// use_long_kernel): dense, both causal alignments with seqlen_q != seqlen_k, GQA, a one-sided window (still routed
// there) and a two-sided one (not), key counts that cut the last 192-key block; and dense just above 4096 keys (on
// 128-key blocks).
TEST_P(GpuEdges, LongKeyRangesD128) {
  REQUIRE_GPU_ALGORITHM(GetParam());
  CaseSpec s = base(300, 8192 + 37, 128, FLASH_DTYPE_BF16);
  expect_ok(s);
  s = base(259, 4096 + 101, 128, FLASH_DTYPE_FP16);
  expect_ok(s);
  s = base(251, 9000, 128, FLASH_DTYPE_FP16);
  s.mask.causal = 1;  // bottom-right
  expect_ok(s);
  s = base(400, 8192, 128, FLASH_DTYPE_BF16);
  s.mask.causal = 1, s.mask.alignment = FLASH_ALIGN_TOP_LEFT;
  expect_ok(s);
  s = base(333, 8300, 128, FLASH_DTYPE_FP16);
  s.mask.window_right = 700;
  expect_ok(s);
  s.mask.window_left = 900;
  expect_ok(s);
}

// Whole query tiles that see no key (O = 0, LSE = -inf), at every sm90 head dim: bottom-right causal with
// seqlen_q > seqlen_k (the first 600 rows see nothing) and a top-left diagonal band past seqlen_k. (sm90 d256 stages O
// in the tile's last key block's ring slots, so its empty tiles visit one wholly masked block.)
TEST_P(GpuEdges, TilesThatSeeNoKey) {
  REQUIRE_GPU_ALGORITHM(GetParam());
  for (int64_t d : {64, 128, 256}) {
    CaseSpec s = base(700, 100, d, FLASH_DTYPE_BF16);
    s.mask.causal = 1;
    expect_ok(s);
    CaseSpec t = base(500, 200, d, FLASH_DTYPE_FP16);
    t.mask.window_left = 0, t.mask.window_right = 0;
    t.mask.alignment = FLASH_ALIGN_TOP_LEFT;
    expect_ok(t);
  }
}

// sm90 runs d64 sliding windows no wider than 768 keys on its block-sparse instantiation, every key block of a tile's
// range listed (plan.h, use_listed_kernel), and wider ones, one-sided ones and causal masks on the
// dense one: both sides of the threshold, both alignments, seqlen_q != seqlen_k, GQA, shifted tiles, tiles that see no
// key; and causal at the sizes that once routed there (seqlen_q <= 1024, v37's first form).
TEST_P(GpuEdges, D64WindowsOnEitherKernel) {
  REQUIRE_GPU_ALGORITHM(GetParam());
  int n = 0;
  const int windows[][2] = {{255, 0}, {767, 0}, {768, 0}, {700, 67}, {700, 68}, {100, 100}, {0, 0}, {-1, 5}, {5, -1}};
  for (const auto& w : windows) {
    CaseSpec s = base(900, 1000 + 64 * (++n % 3), 64, n % 2 ? FLASH_DTYPE_BF16 : FLASH_DTYPE_FP16);
    s.batch = 1, s.heads_q = 3, s.heads_kv = 1;
    s.mask.window_left = w[0];
    s.mask.window_right = w[1];
    s.mask.alignment = n % 4 ? FLASH_ALIGN_BOTTOM_RIGHT : FLASH_ALIGN_TOP_LEFT;
    expect_ok(s);
  }
  for (int64_t sq : {700, 1025}) {  // shifted tiles; rows that see no key (seqlen_k < seqlen_q, bottom-right)
    CaseSpec s = base(sq, sq / 2 + 7, 64, ++n % 2 ? FLASH_DTYPE_BF16 : FLASH_DTYPE_FP16);
    s.batch = 1, s.heads_q = 3, s.heads_kv = 1;
    s.mask.window_left = 200, s.mask.window_right = 0;
    expect_ok(s);
    s.mask.window_left = -1;  // causal
    expect_ok(s);
  }
}

// A negative softmax scale (allowed by the ABI) turns the row max into a min: sm80 folds it into Q's sign;
// sm90 refuses it with the reason, and AUTO then runs sm80 (GpuAuto.NegativeScaleFallsBack).
TEST_P(GpuEdges, NegativeScale) {
  REQUIRE_GPU_ALGORITHM(GetParam());
  for (int causal : {0, 1}) {
    CaseSpec s = base(300, 257, 128, FLASH_DTYPE_BF16);
    s.softmax_scale = -0.2f;
    s.mask.causal = causal;
    std::mt19937_64 rng(base_seed() ^ (0x5ca1e + causal));
    Case c = make_case(s, rng);
    const int32_t st = run_cuda(c, GetParam(), 0);
    if (GetParam() == FLASH_ALGO_SM90) {
      EXPECT_EQ(st, FLASH_ERROR_UNSUPPORTED);
      EXPECT_NE(std::string(flash_last_error_message()).find("softmax_scale"), std::string::npos) << flash_last_error_message();
      continue;
    }
    ASSERT_EQ(st, FLASH_OK) << flash_last_error_message() << "\n  case: " << s.describe();
    const Check ch = check_case(c);
    EXPECT_TRUE(ch.ok) << ch.message << "\n  case: " << s.describe() << " seed " << base_seed();
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
      if (st == FLASH_ERROR_UNSUPPORTED && GetParam() != FLASH_ALGO_SM80) {
        EXPECT_NE(std::string(flash_last_error_message()).find("block"), std::string::npos);
        continue;
      }
      ASSERT_EQ(st, FLASH_OK) << flash_last_error_message();
      const Check ch = check_case(c);
      EXPECT_TRUE(ch.ok) << ch.message << "\n  case: " << s.describe();
    }
}

namespace {
// Block masks of every mix of 64 and 128 against the kernels' tiles (sm80: 128 query rows, 128 keys at
// d <= 64, 64 keys above; 64 x 64 for d256 on small-memory parts). Patterns: random, a checkerboard
// (neighbouring 64-row or 64-key halves of a tile list different blocks, so every listed tile is cut),
// and lists that differ between batches and heads.
void fill_block_mask(CaseSpec& s, int block_m, int block_n, int pattern, uint64_t seed) {
  flash_ref::Mask& m = s.mask;
  m.block_m = block_m, m.block_n = block_n;
  m.n_qb = static_cast<int>((s.seqlen_q + block_m - 1) / block_m);
  m.n_kb = static_cast<int>((s.seqlen_k + block_n - 1) / block_n);
  m.mask_batch = static_cast<int>(s.batch), m.mask_heads = static_cast<int>(s.heads_q);
  std::mt19937_64 rng(seed);
  m.listed.assign(size_t(m.mask_batch) * m.mask_heads * m.n_qb * m.n_kb, 0);
  for (size_t i = 0; i < m.listed.size(); ++i) {
    const int qb = static_cast<int>(i / m.n_kb % m.n_qb), kb = static_cast<int>(i % m.n_kb);
    m.listed[i] = pattern == 0 ? (rng() % 3 == 0) : pattern == 1 ? ((qb + kb) % 2 == 0) : (rng() % 4 != 0);
  }
}

// Device-resident masks are not checked entry by entry (capi/validate.cpp): a kernel must read a list as
// the set it names -- any order, an index given twice counted once, out-of-range entries skipped --
// which is the reference's dense map. Adds a repeat and a junk index to each row that has room
// (max_kv_blocks = n_kb) and shuffles the row (make_case already shuffles).
void add_repeats_and_junk(Case& c, std::mt19937_64& rng) {
  const int32_t n_kb = c.spec.mask.n_kb;
  for (size_t row = 0; row < c.kv_num_blocks.size(); ++row) {
    int32_t& n = c.kv_num_blocks[row];
    int32_t* list = c.kv_indices.data() + row * size_t(n_kb);
    if (n >= 1 && n < n_kb) {
      const int32_t again = list[rng() % uint64_t(n)];
      list[n++] = again;
    }
    if (n < n_kb) list[n++] = (rng() & 1) ? -3 : n_kb + 5;
    std::shuffle(list, list + n, rng);
  }
}
}  // namespace

// sm80 runs every block size itself (no fallback); the others may decline with a message.
TEST_P(GpuEdges, BlockSparseEveryBlockSize) {
  REQUIRE_GPU_ALGORITHM(GetParam());
  struct Shape {
    int64_t sq, sk, d;
    int32_t dtype;
  };
  const Shape shapes[] = {{333, 517, 64, FLASH_DTYPE_BF16}, {600, 385, 128, FLASH_DTYPE_FP16},
                          {129, 700, 32, FLASH_DTYPE_BF16}, {257, 191, 256, FLASH_DTYPE_BF16},
                          {65, 63, 96, FLASH_DTYPE_FP16}};
  int n = 0;
  for (const Shape& sh : shapes)
    for (int bm : {64, 128})
      for (int bn : {64, 128}) {
        // 20 cases: pattern n % 3 and window n % 4 meet in all 12 combinations.
        const int pattern = ++n % 3;
        CaseSpec s = base(sh.sq, sh.sk, sh.d, sh.dtype);
        fill_block_mask(s, bm, bn, pattern, base_seed() + 131 * n);
        // Compose with the window: none, causal (both alignments), a two-sided window.
        const int variant = n % 4;
        if (variant == 1) s.mask.causal = 1;
        if (variant == 2) s.mask.causal = 1, s.mask.alignment = FLASH_ALIGN_TOP_LEFT;
        if (variant == 3) s.mask.window_left = 100, s.mask.window_right = 30;
        std::mt19937_64 rng(base_seed() ^ (0xb10c + n));
        Case c = make_case(s, rng);
        const int32_t st = run_cuda(c, GetParam(), 0);
        if (st == FLASH_ERROR_UNSUPPORTED && GetParam() != FLASH_ALGO_SM80) {
          // sm90 refuses head dims other than 64/128/256 for that reason, the rest for the block size.
          const bool sm90_dim = GetParam() == FLASH_ALGO_SM90 && sh.d != 64 && sh.d != 128 && sh.d != 256;
          EXPECT_NE(std::string(flash_last_error_message()).find(sm90_dim ? "head_dim" : "block"), std::string::npos)
              << flash_last_error_message();
          continue;
        }
        ASSERT_EQ(st, FLASH_OK) << flash_last_error_message() << "\n  case: " << s.describe();
        const Check ch = check_case(c);
        EXPECT_TRUE(ch.ok) << ch.message << "\n  case: " << s.describe() << " pattern " << pattern
                           << " seed " << base_seed();
      }
}

TEST_P(GpuEdges, BlockSparseUnsortedRepeatedAndJunkIndices) {
  REQUIRE_GPU_ALGORITHM(GetParam());
  int n = 0;
  for (int64_t d : {64, 128})
    for (int bm : {64, 128})
      for (int bn : {64, 128}) {
        CaseSpec s = base(450, 389, d, FLASH_DTYPE_BF16);
        fill_block_mask(s, bm, bn, ++n % 2 == 0 ? 0 : 2, base_seed() + 977 * n);
        if (n % 3 == 0) s.mask.causal = 1;
        std::mt19937_64 rng(base_seed() ^ (0xd0b1e + n));
        Case c = make_case(s, rng);
        add_repeats_and_junk(c, rng);
        const int32_t st = run_cuda(c, GetParam(), 0);
        if (st == FLASH_ERROR_UNSUPPORTED && GetParam() != FLASH_ALGO_SM80) continue;
        ASSERT_EQ(st, FLASH_OK) << flash_last_error_message() << "\n  case: " << s.describe();
        const Check ch = check_case(c);
        EXPECT_TRUE(ch.ok) << ch.message << "\n  case: " << s.describe() << " seed " << base_seed();
      }
}

// sm90 runs a persistent grid (one CTA per SM) whose block-sparse schedules and Q buffers are reused tile
// after tile through two slots each; the other cases have fewer tiles than SMs, so each CTA sees one tile.
// Here every CTA takes several (2 x 8 heads x 20 query blocks = 320 tiles on 132 SMs), with per-head random
// lists, rows that list nothing, GQA, seqlen_q != seqlen_k, and the causal composition; fp16 as well (at d128 these
// lists of 8 key blocks run on the instantiation with SFU turns, plan.h sfu_turns_by_length, in both dtypes).
TEST_P(GpuEdges, BlockSparseManyTilesPerCta) {
  if (GetParam() != FLASH_ALGO_SM90) GTEST_SKIP() << "tests sm90's persistent tile order (the others launch a CTA per tile)";
  REQUIRE_GPU_ALGORITHM(GetParam());
  int n = 0;
  for (int64_t d : {64, 128})
    for (int variant = 0; variant < 3; ++variant) {
      CaseSpec s = base(2560, 900, d, variant == 2 ? FLASH_DTYPE_FP16 : FLASH_DTYPE_BF16);
      s.heads_q = 8, s.heads_kv = 4;
      fill_block_mask(s, 128, 128, variant == 1 ? 2 : 0, base_seed() + 7919 * ++n);
      // A whole query block of one (batch, head) lists nothing: its rows see no key.
      flash_ref::Mask& m = s.mask;
      std::fill_n(m.listed.begin() + ((1 * m.mask_heads + 3) * m.n_qb + 5) * size_t(m.n_kb), m.n_kb, uint8_t{0});
      if (variant == 1) s.mask.causal = 1;
      std::mt19937_64 rng(base_seed() ^ (0x7113 + n));
      Case c = make_case(s, rng);
      ASSERT_EQ(run_cuda(c, GetParam(), 0), FLASH_OK) << flash_last_error_message() << "\n  case: " << s.describe();
      const Check ch = check_case(c);
      EXPECT_TRUE(ch.ok) << ch.message << "\n  case: " << s.describe() << " seed " << base_seed();
    }
}

// sm90 runs d64 masks of 128-row blocks on 192-row tiles whose warpgroups follow two lists through two K/V rings
// (plan.h, use_two_rings): the pair of warpgroups in one mask row block and the single one in the next,
// the single's rows at the tile's end in even tiles and at its start in odd ones. Lengths that leave one or two warpgroups of the last tile past seqlen_q (with or
// without real rows beside them), lists of very different lengths between neighbouring row blocks (one lists nothing,
// the next everything), per-head lists, GQA, seqlen_q != seqlen_k, the causal and window compositions, and many tiles
// per CTA, so the rings' positions carry across tiles whose sides differ. (The two-ring kernel takes lists of at least
// 6 key blocks since (12 before) -- the harness gives max_kv_blocks = every key block -- so seqlen_k > 640;
// the sizes below, chosen for the threshold of 12, are all past 1408.)
TEST_P(GpuEdges, BlockSparseD64TwoRings) {
  REQUIRE_GPU_ALGORITHM(GetParam());
  struct Size {
    int64_t sq, sk;
  };
  const Size sizes[] = {{130, 1500}, {320, 1537}, {447, 2100}, {1000, 1600}, {1537, 1409}};
  int n = 0;
  for (const Size& sz : sizes)
    for (int variant = 0; variant < 3; ++variant) {
      CaseSpec s = base(sz.sq, sz.sk, 64, ++n % 2 ? FLASH_DTYPE_BF16 : FLASH_DTYPE_FP16);
      s.batch = 2, s.heads_q = 6, s.heads_kv = variant == 2 ? 2 : 6;
      fill_block_mask(s, 128, 128, n % 3, base_seed() + 613 * n);
      flash_ref::Mask& m = s.mask;
      if (variant == 0 && m.n_qb >= 2) {  // head 1 of batch 0: row block 0 lists nothing, row block 1 every block
        std::fill_n(m.listed.begin() + (1 * m.n_qb + 0) * size_t(m.n_kb), m.n_kb, uint8_t{0});
        std::fill_n(m.listed.begin() + (1 * m.n_qb + 1) * size_t(m.n_kb), m.n_kb, uint8_t{1});
      }
      if (variant == 1) s.mask.causal = 1, s.mask.alignment = n % 2 ? FLASH_ALIGN_BOTTOM_RIGHT : FLASH_ALIGN_TOP_LEFT;
      if (variant == 2) s.mask.window_left = 300, s.mask.window_right = 40;
      std::mt19937_64 rng(base_seed() ^ (0x2419 + n));
      Case c = make_case(s, rng);
      ASSERT_EQ(run_cuda(c, GetParam(), 0), FLASH_OK) << flash_last_error_message() << "\n  case: " << s.describe();
      const Check ch = check_case(c);
      EXPECT_TRUE(ch.ok) << ch.message << "\n  case: " << s.describe() << " seed " << base_seed();
    }
}

// sm90's two-ring kernel ends a launch on smaller tiles where its whole 192-row tiles overflow the grid's rounds by a
// few (plan.h ring_tail_plan, RingOrder): the last c heads' last 256 rows run as two
// 128-row tiles after every whole tile, whose third warpgroup has no rows of its own (its rows are the next tile's: they
// must be neither listed nor stored), and the other heads' last 64 rows after them. Shapes with seqlen_q = 192 F + 64,
// F odd, and enough heads that F x heads overflows a round of 132 (or 114) SMs: 640 x 48 heads (c = 12 on 132 SMs),
// 1024 x 30 (c = 18), with causal and window edges, GQA, rows that list nothing or every key block in the tiles the plan
// moves; on the other algorithms the same cases as more block-sparse coverage.
TEST_P(GpuEdges, BlockSparseD64TwoRingsTail) {
  REQUIRE_GPU_ALGORITHM(GetParam());
  struct Size {
    int64_t sq, sk;
    int batch, heads_q, heads_kv;
  };
  const Size sizes[] = {{640, 777, 3, 16, 16}, {1024, 900, 2, 15, 5}};
  int n = 0;
  for (const Size& sz : sizes)
    for (int variant = 0; variant < 3; ++variant) {
      CaseSpec s = base(sz.sq, sz.sk, 64, ++n % 2 ? FLASH_DTYPE_BF16 : FLASH_DTYPE_FP16);
      s.batch = sz.batch, s.heads_q = sz.heads_q, s.heads_kv = sz.heads_kv;
      fill_block_mask(s, 128, 128, 0, base_seed() + 677 * n);
      flash_ref::Mask& m = s.mask;
      // The last heads (the plan's) and the first: their last two mask row blocks list nothing / every key block, and
      // the other way round in the first head, so a 128-row tile and the 64-row one each see both.
      const int nbh = m.mask_batch * m.mask_heads;
      for (int bh : {0, nbh - 1, nbh - 2})
        for (int qb = m.n_qb - 2; qb < m.n_qb; ++qb) {
          const bool all = (qb == m.n_qb - 1) == (bh == 0);
          std::fill_n(m.listed.begin() + (size_t(bh) * m.n_qb + qb) * m.n_kb, m.n_kb, uint8_t(all ? 1 : 0));
        }
      if (variant == 1) s.mask.causal = 1, s.mask.alignment = n % 2 ? FLASH_ALIGN_BOTTOM_RIGHT : FLASH_ALIGN_TOP_LEFT;
      if (variant == 2) s.mask.window_left = 250, s.mask.window_right = 60;
      std::mt19937_64 rng(base_seed() ^ (0x7a11 + n));
      Case c = make_case(s, rng);
      ASSERT_EQ(run_cuda(c, GetParam(), 0), FLASH_OK) << flash_last_error_message() << "\n  case: " << s.describe();
      const Check ch = check_case(c);
      EXPECT_TRUE(ch.ok) << ch.message << "\n  case: " << s.describe() << " seed " << base_seed() << " (plan on 132 SMs: "
                         << flash::sm90::ring_tail_plan(sz.sq, int64_t(sz.batch) * sz.heads_q, 132) << " heads)";
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

TEST(GpuAuto, NegativeScaleFallsBack) {
  std::string why;
  if (!usable(FLASH_ALGO_SM80, &why)) GTEST_SKIP() << why;
  std::mt19937_64 rng(base_seed() ^ 0xa070);
  CaseSpec s;
  s.batch = 1, s.heads_q = 2, s.heads_kv = 1, s.seqlen_q = 200, s.seqlen_k = 333, s.head_dim = 64;
  s.dtype = FLASH_DTYPE_FP16;
  s.softmax_scale = -0.125f;
  Case c = make_case(s, rng);
  int32_t used = -1;
  ASSERT_EQ(run_cuda(c, FLASH_ALGO_AUTO, 0, &used), FLASH_OK) << flash_last_error_message();
  EXPECT_NE(used, FLASH_ALGO_SM90);
  const Check ch = check_case(c);
  EXPECT_TRUE(ch.ok) << ch.message;
}

// sm90 hands causal and block-sparse tiles out from a counter in the caller's workspace that no memset zeroes: each
// launch claims the word for its epoch, and its last take leaves 0 behind (sm90/fwd/tile_scheduler.cuh, take_claim). A caller's
// workspace (not 8-byte aligned) holding anything -- 0xff bytes, small counts as the tail split leaves, a word that was
// never a counter, or what the previous call left -- must give the right answer on each kernel that takes tiles (d128
// causal: the dense producer, whose claim is a consumer thread's; d64 and d128 block-sparse: the two-ring and
// two-warpgroup schedulers), each with more tiles than SMs, and every call must leave the word at 0 (else each later
// call pays the claim's extra round trips). A counter read as if it were fresh would skip tiles and leave O poisoned.
// A host buffer is refused.
TEST(GpuWorkspace, Sm90TileCounterInCallersWorkspace) {
  REQUIRE_GPU_ALGORITHM(FLASH_ALGO_SM90);
  std::mt19937_64 rng(base_seed() ^ 0x3c0f);
  std::vector<CaseSpec> specs;
  {
    CaseSpec s;  // 2 x 16 heads x 8 query blocks = 256 tiles
    s.batch = 2, s.heads_q = 16, s.heads_kv = 4, s.seqlen_q = 1000, s.seqlen_k = 1100, s.head_dim = 128;
    s.dtype = FLASH_DTYPE_BF16;
    s.mask.causal = 1;  // bottom-right
    specs.push_back(s);
    // Block-sparse with more tiles than SMs (2 x 8 heads x 14 or 20 query blocks; ~3 in 4 of 8 key blocks listed: d64's
    // lists of >= 3 run on two rings), so every CTA takes several tiles from the claimed word.
    for (const int d : {64, 128}) {
      CaseSpec t = s;
      t.mask = flash_ref::Mask{};
      t.head_dim = d, t.heads_q = 8, t.seqlen_q = 2560, t.seqlen_k = 900;
      fill_block_mask(t, 128, 128, 2, base_seed() ^ (0x3c1f + d));
      specs.push_back(t);
    }
  }
  constexpr size_t kBytes = 64;
  void* ws = cuda_alloc(kBytes);
  ASSERT_NE(ws, nullptr);
  char* const at = static_cast<char*>(ws) + 1;  // the caller's pointer: odd
  // The counter's word: the library's, at the first 8-byte boundary of the caller's workspace.
  const uintptr_t word = (reinterpret_cast<uintptr_t>(at) + 7) & ~uintptr_t{7};
  std::vector<std::vector<unsigned char>> before;
  before.emplace_back(kBytes - 1, 0xff);
  {
    std::vector<unsigned char> counts(kBytes - 1, 0);  // int32 counts of 3 and 2, as a split tail's
    for (size_t i = 0; i + 4 <= counts.size(); i += 4) counts[i] = (i / 4) % 2 ? 2 : 3;
    before.push_back(counts);
    std::vector<unsigned char> junk(kBytes - 1);
    for (auto& x : junk) x = static_cast<unsigned char>(rng());
    before.push_back(junk);
  }
  before.emplace_back();  // (empty: what the previous call left)
  int run = 0;
  for (const CaseSpec& s : specs)
    for (const auto& bytes : before) {
      if (!bytes.empty()) ASSERT_TRUE(cuda_upload(at, bytes.data(), bytes.size()));
      Case c = make_case(s, rng);
      int32_t used = -1;
      ASSERT_EQ(run_cuda(c, FLASH_ALGO_SM90, 0, &used, at, kBytes - 1), FLASH_OK) << flash_last_error_message();
      EXPECT_EQ(used, FLASH_ALGO_SM90);
      const Check ch = check_case(c);
      EXPECT_TRUE(ch.ok) << "run " << run << ": " << ch.message << "\n  case: " << s.describe();
      unsigned long long left = ~0ull;
      ASSERT_TRUE(cuda_download(&left, reinterpret_cast<const void*>(word), sizeof(left)));
      EXPECT_EQ(left, 0ull) << "run " << run << ": the counter's word after the call\n  case: " << s.describe();
      ++run;
    }
  cuda_free(ws);
  std::vector<char> host(64);
  Case c = make_case(specs[0], rng);
  EXPECT_NE(run_cuda(c, FLASH_ALGO_SM90, 0, nullptr, host.data(), host.size()), FLASH_OK);
  EXPECT_NE(std::string(flash_last_error_message()).find("workspace"), std::string::npos) << flash_last_error_message();
}

// sm90 splits the static order's last round along the keys on dense d128 and d256 from 8192 keys (plan.h, TailSplit,
// use_split_kernel). Problems sized from the device's SM count so that they split: one query tile per
// head (MQA and MHA), grid + grid / 3 or grid + grid / 5 tiles, 44-105 key blocks with a partial last one (runs of
// 9-35 blocks, 2-6 pieces per tile). The test asserts that each problem splits, so it cannot pass without running
// pieces and merges. One query row keeps the fp64 reference short (so the second consumer warpgroup's merge runs on
// rows past seqlen_q, which are not compared). MQA runs with the library's workspace; MHA with a caller's of exactly the size the split
// needs at an odd address (the kernel rounds it up), twice (the counters the first call leaves must be zeroed by the
// second), and one byte short (refused, naming the size query).
class GpuTailSplit : public ::testing::TestWithParam<int> {};  // head dim (128: on 192-key blocks)

// A fresh case of this spec run on sm90 (the library's own workspace), which must take it, checked against the fp64
// reference.
static void expect_sm90_ok(const CaseSpec& s, std::mt19937_64& rng) {
  Case c = make_case(s, rng);
  int32_t used = -1;
  ASSERT_EQ(run_cuda(c, FLASH_ALGO_SM90, 0, &used), FLASH_OK) << flash_last_error_message() << "\n  " << s.describe();
  EXPECT_EQ(used, FLASH_ALGO_SM90);
  const Check ch = check_case(c);
  EXPECT_TRUE(ch.ok) << ch.message << "\n  case: " << s.describe() << " seed " << base_seed();
}

// A problem that splits its last round (GpuTailSplit, GpuSmallGrid) in a caller's workspace of exactly `need` bytes at
// an odd address (the kernel rounds it up), twice (the counters the first call leaves must be zeroed by the second),
// then one byte short (refused, naming the size query).
static void expect_split_in_callers_workspace(const CaseSpec& s, std::mt19937_64& rng, size_t need) {
  void* ws = cuda_alloc(need + 1);
  ASSERT_NE(ws, nullptr);
  for (int run = 0; run < 2; ++run) {
    Case c = make_case(s, rng);
    ASSERT_EQ(run_cuda(c, FLASH_ALGO_SM90, 0, nullptr, static_cast<char*>(ws) + 1, need), FLASH_OK)
        << flash_last_error_message() << "\n  " << s.describe();
    const Check ch = check_case(c);
    EXPECT_TRUE(ch.ok) << "caller's workspace, run " << run << ": " << ch.message << "\n  case: " << s.describe()
                       << " seed " << base_seed();
  }
  Case c = make_case(s, rng);
  EXPECT_EQ(run_cuda(c, FLASH_ALGO_SM90, 0, nullptr, static_cast<char*>(ws) + 1, need - 1), FLASH_ERROR_WORKSPACE_TOO_SMALL);
  EXPECT_NE(std::string(flash_last_error_message()).find("flash_fwd_workspace_size"), std::string::npos)
      << flash_last_error_message();
  cuda_free(ws);
}

TEST_P(GpuTailSplit, Sm90DenseLastRoundSplit) {
  REQUIRE_GPU_ALGORITHM(FLASH_ALGO_SM90);
  flash_device_info info;
  flash_device_info_init(&info);
  ASSERT_EQ(flash_get_device_info(FLASH_DEVICE_CUDA, 0, &info), FLASH_OK);
  const int grid = info.multiprocessors;
  std::mt19937_64 rng(base_seed() ^ (0x5171 + GetParam()));
  int n = 0;
  const int d = GetParam();
  {
    for (int variant = 0; variant < 2; ++variant) {
      const int head_dim = d;
      const flash::sm90::Shape sh = flash::sm90::shape_of(head_dim == 128 ? flash::sm90::Variant::kD128Long : flash::sm90::Variant::kD256);
      const int64_t tiles = grid + (variant == 0 ? grid / 3 : grid / 5);
      const int64_t key_blocks = head_dim == 128 ? 44 + 4 * variant : 104 + variant;  // >= 8192 keys
      CaseSpec s;
      s.batch = 1, s.heads_q = tiles, s.heads_kv = variant == 0 ? 1 : tiles;
      s.seqlen_q = 1, s.seqlen_k = (key_blocks - 1) * sh.block_n + 29, s.head_dim = head_dim;
      ASSERT_GE(s.seqlen_k, flash::sm90::kSplitMinKeys);
      s.dtype = ++n % 2 ? FLASH_DTYPE_BF16 : FLASH_DTYPE_FP16;
      const flash::sm90::TailSplit t =
          flash::sm90::tail_split(tiles, grid, key_blocks, flash::sm90::tail_split_margin(head_dim));
      ASSERT_GT(t.units, 0) << "the problem must split: " << s.describe();
      if (variant == 0) {
        expect_sm90_ok(s, rng);
        continue;
      }
      expect_split_in_callers_workspace(s, rng, size_t(flash::sm90::tail_workspace_bytes(t, grid, head_dim, sh.consumers)));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(HeadDims, GpuTailSplit, ::testing::Values(128, 256),
                         [](const auto& info) { return "d" + std::to_string(info.param); });

namespace {
// LIBFLASH_MAX_CTAS set for a scope; the caller's own setting, if any, is put back after.
struct ScopedMaxCtas {
  const char* old = std::getenv("LIBFLASH_MAX_CTAS");
  std::string saved = old != nullptr ? old : "";
  bool had = old != nullptr;
  explicit ScopedMaxCtas(const char* value) { setenv("LIBFLASH_MAX_CTAS", value, 1); }
  ~ScopedMaxCtas() {
    if (had) setenv("LIBFLASH_MAX_CTAS", saved.c_str(), 1);
    else unsetenv("LIBFLASH_MAX_CTAS");
  }
};
}  // namespace

// The same kernels on a persistent grid of 6 CTAs (LIBFLASH_MAX_CTAS, runtime.h persistent_ctas): problems a few
// heads large that still split, and d128 causal long key ranges on the 192-key kernel (dynamic order, 9 tiles on 6
// CTAs). Small enough for compute-sanitizer's racecheck (the device script's sanitize-split phase), and 128 query rows,
// so both consumer warpgroups' merged rows are compared. The caller's workspace is sized for 6 CTAs: accepted only if
// the library planned the split for 6 too (132 CTAs need more).
TEST(GpuSmallGrid, Sm90SplitAndLongCausal) {
  REQUIRE_GPU_ALGORITHM(FLASH_ALGO_SM90);
  constexpr int kGrid = 6;
  const ScopedMaxCtas env("6");
  std::mt19937_64 rng(base_seed() ^ 0x6c7d);
  int n = 0;
  for (int head_dim : {128, 256}) {
    const flash::sm90::Shape sh = flash::sm90::shape_of(head_dim == 128 ? flash::sm90::Variant::kD128Long : flash::sm90::Variant::kD256);
    for (int variant = 0; variant < 2; ++variant) {
      const int64_t tiles = kGrid + 2 + variant;  // one 128-row query tile per head
      const int64_t key_blocks = head_dim == 128 ? 44 + variant : 104 + 3 * variant;
      CaseSpec s;
      s.batch = 1, s.heads_q = tiles, s.heads_kv = variant == 0 ? 1 : tiles;
      s.seqlen_q = sh.block_m(), s.seqlen_k = (key_blocks - 1) * sh.block_n + 29 + 40 * variant, s.head_dim = head_dim;
      s.dtype = ++n % 2 ? FLASH_DTYPE_BF16 : FLASH_DTYPE_FP16;
      const flash::sm90::TailSplit t =
          flash::sm90::tail_split(tiles, kGrid, key_blocks, flash::sm90::tail_split_margin(head_dim));
      ASSERT_GT(t.units, 0) << "the problem must split: " << s.describe();
      const size_t need = size_t(flash::sm90::tail_workspace_bytes(t, kGrid, head_dim, sh.consumers));
      void* ws = cuda_alloc(need + 1);
      ASSERT_NE(ws, nullptr);
      Case c = make_case(s, rng);
      ASSERT_EQ(run_cuda(c, FLASH_ALGO_SM90, 0, nullptr, static_cast<char*>(ws) + 1, need), FLASH_OK)
          << flash_last_error_message() << "\n  " << s.describe();
      const Check ch = check_case(c);
      EXPECT_TRUE(ch.ok) << ch.message << "\n  case: " << s.describe() << " seed " << base_seed();
      cuda_free(ws);
    }
  }
  const int32_t alignments[] = {FLASH_ALIGN_BOTTOM_RIGHT, FLASH_ALIGN_TOP_LEFT};
  for (int32_t alignment : alignments) {
    CaseSpec s;
    s.batch = 1, s.heads_q = 3, s.heads_kv = 1, s.seqlen_q = 300, s.seqlen_k = 8192 + 77, s.head_dim = 128;
    s.dtype = ++n % 2 ? FLASH_DTYPE_BF16 : FLASH_DTYPE_FP16;
    s.mask.causal = 1, s.mask.alignment = alignment;
    expect_sm90_ok(s, rng);
  }
}

// d64 dense's two kernels (plan.h, d64_split_rows) on persistent grids of 2 CTAs each: every CTA runs many tiles of
// both, and the second kernel's CTAs, launched behind the first with PDL, find free SMs at once -- they run beside the
// first kernel and finish long before it. run_cuda copies the outputs back in stream order right behind the call, so
// this fails if the second kernel's end let the stream go on while the first still wrote (Rows::kPdlSecondary's wait).
// seqlen_q mod 192: 64 (1024: two 128-row tiles per head on the second kernel), 128 (512: one), and 40 (1000: two).
TEST(GpuSmallGrid, Sm90D64TwoKernels) {
  REQUIRE_GPU_ALGORITHM(FLASH_ALGO_SM90);
  const ScopedMaxCtas env("2");
  std::mt19937_64 rng(base_seed() ^ 0xd64);
  const int64_t seqlen_qs[] = {1024, 512, 1000};
  int n = 0;
  for (int64_t sq : seqlen_qs) {
    CaseSpec s;
    s.batch = 2, s.heads_q = 4, s.heads_kv = n == 1 ? 1 : 4, s.seqlen_q = sq, s.seqlen_k = 900 + 77 * n, s.head_dim = 64;
    s.dtype = ++n % 2 ? FLASH_DTYPE_BF16 : FLASH_DTYPE_FP16;
    flash::FwdParams fp{};  // (what d64_split_rows reads: a dense problem)
    fp.head_dim = 64, fp.seqlen_q = int32_t(sq), fp.seqlen_k = int32_t(s.seqlen_k), fp.window_left = fp.window_right = -1;
    ASSERT_GE(flash::sm90::d64_split_rows(fp), 192) << s.describe();
    expect_sm90_ok(s, rng);
  }
}

// d64 causal's first rows apart (plan.h, d64_causal_top_rows) behind a three-warpgroup kernel on a persistent grid of 2
// CTAs: the top-rows kernel's CTAs, launched behind it with PDL, find free SMs at once, run beside it and finish long
// before it; run_cuda copies the outputs back in stream order right behind the call, so this fails if their end let the
// stream go on while the first kernel still wrote (top_rows_kernel's griddepcontrol.wait). 1024 (64 top rows, bottom-right)
// and 1000 (40, top-left, GQA, 24 keys more).
TEST(GpuSmallGrid, Sm90D64CausalTopRows) {
  REQUIRE_GPU_ALGORITHM(FLASH_ALGO_SM90);
  const ScopedMaxCtas env("2");
  std::mt19937_64 rng(base_seed() ^ 0x70b);
  const int64_t seqlen_qs[] = {1024, 1000};
  int n = 0;
  for (int64_t sq : seqlen_qs) {
    CaseSpec s;
    s.batch = 2, s.heads_q = 4, s.heads_kv = n == 1 ? 1 : 4, s.seqlen_q = sq, s.seqlen_k = sq + 24 * n, s.head_dim = 64;
    s.mask.causal = 1;
    if (n == 1) s.mask.alignment = FLASH_ALIGN_TOP_LEFT;
    s.dtype = ++n % 2 ? FLASH_DTYPE_BF16 : FLASH_DTYPE_FP16;
    flash::FwdParams fp{};  // (what d64_causal_top_rows reads)
    fp.head_dim = 64, fp.seqlen_q = int32_t(sq), fp.seqlen_k = int32_t(s.seqlen_k), fp.window_left = -1, fp.window_right = 0;
    fp.batch = int32_t(s.batch), fp.heads_q = int32_t(s.heads_q);
    fp.diag_offset = s.mask.alignment == FLASH_ALIGN_TOP_LEFT ? 0 : s.seqlen_k - sq;
    ASSERT_EQ(flash::sm90::d64_causal_top_rows(fp), sq % 192) << s.describe();
    expect_sm90_ok(s, rng);
  }
}

// d256 causal on a persistent grid of 2 CTAs, each taking eight tiles or more. d256 causal walks its key blocks upwards
// (plan.h use_upward_kernel, traits.h kUpward): in most tiles warpgroup 0 sees none of the last
// (diagonal) 80-key block and hands its K and V slots back unread after its drain, with an empty turn, so the ring's
// phases run on across tiles with one warpgroup's arrivals out of step (Traits::kSkipDiag did the same at the first
// block when the walk went down) -- small enough for the sanitizers (scripts/device.sh sanitize). 1000 rows bottom-right;
// 1000 top-left with 37 keys more (GQA); a right extension of 37 keys (window (-1, 37)) over 700 rows and 1900 keys; and
// 1000 rows over 600 keys, whose first 400 rows see none (O = 0, LSE = -inf).
TEST(GpuSmallGrid, Sm90D256CausalSkip) {
  REQUIRE_GPU_ALGORITHM(FLASH_ALGO_SM90);
  ASSERT_TRUE(flash::sm90::use_upward_kernel(256, false, -1, 0));
  const ScopedMaxCtas env("2");
  std::mt19937_64 rng(base_seed() ^ 0x5d1a);
  for (int n = 0; n < 4; ++n) {
    CaseSpec s;
    s.batch = 1, s.heads_q = 2, s.heads_kv = n == 1 ? 1 : 2, s.seqlen_q = 1000, s.seqlen_k = 1000 + 37 * n, s.head_dim = 256;
    s.mask.causal = 1;
    if (n == 1) s.mask.alignment = FLASH_ALIGN_TOP_LEFT;
    if (n == 2) s.mask.causal = 0, s.mask.window_right = 37, s.seqlen_q = 700, s.seqlen_k = 1900;
    if (n == 3) s.seqlen_k = 600;
    s.dtype = n % 2 ? FLASH_DTYPE_FP16 : FLASH_DTYPE_BF16;
    expect_sm90_ok(s, rng);
  }
}

// The balanced grid (plan.h, balanced_grid) on a grid of 20 CTAs: dense problems of 152 tiles (8 rounds
// of 19) run on 19 CTAs, each taking 8 tiles of the static order -- d128 and d256 (128-row tiles: 2 query blocks, the
// last partial, x 38 heads x 2) and d64 on its three-warpgroup kernel alone (192 rows, a whole tile: no rows kernel).
// The test asserts that each grid shrinks, so it cannot pass without the balanced launch.
TEST(GpuSmallGrid, Sm90BalancedGrid) {
  REQUIRE_GPU_ALGORITHM(FLASH_ALGO_SM90);
  const ScopedMaxCtas env("20");
  std::mt19937_64 rng(base_seed() ^ 0xba1);
  int n = 0;
  for (int head_dim : {128, 256, 64}) {
    CaseSpec s;
    s.batch = 2, s.heads_q = head_dim == 64 ? 76 : 38, s.heads_kv = n == 1 ? 19 : s.heads_q;
    s.seqlen_q = head_dim == 64 ? 192 : 250, s.seqlen_k = 333 + 41 * n, s.head_dim = head_dim;
    s.dtype = ++n % 2 ? FLASH_DTYPE_BF16 : FLASH_DTYPE_FP16;
    const flash::sm90::Shape sh = flash::sm90::shape_of(head_dim == 64    ? flash::sm90::Variant::kD64
                                                          : head_dim == 128 ? flash::sm90::Variant::kD128
                                                                            : flash::sm90::Variant::kD256);
    const int64_t tiles = (s.seqlen_q + sh.block_m() - 1) / sh.block_m() * s.heads_q * s.batch;
    ASSERT_EQ(tiles, 152) << s.describe();
    ASSERT_EQ(flash::sm90::balanced_grid(tiles, 20), 19) << "the grid must shrink: " << s.describe();
    if (head_dim == 64) {
      flash::FwdParams fp{};  // (what d64_split_rows reads)
      fp.head_dim = 64, fp.seqlen_q = int32_t(s.seqlen_q), fp.seqlen_k = int32_t(s.seqlen_k);
      fp.window_left = fp.window_right = -1;
      ASSERT_LT(flash::sm90::d64_split_rows(fp), 0) << "one kernel: " << s.describe();
    }
    expect_sm90_ok(s, rng);
  }
}

// d128 dense on 128-key blocks as a PDL pair (plan.h, pair_split): the whole rounds on the dense instantiation, the
// last round's pieces on the split one behind it. On 2 CTAs the pieces' CTAs find free SMs at once and run beside the
// primary, so their counts must wait for the primary's end (its CTA 0 zeroes them); on 6 they start as the primary's
// CTAs leave. 15 and 21 tiles: one and three left for the last round, in runs of half a tile (26-27 key blocks). A
// caller's workspace of exactly the pair's size at an odd address, run twice (the counts the first call leaves must be
// zeroed again), then one byte short (refused).
TEST(GpuSmallGrid, Sm90D128TailPairs) {
  REQUIRE_GPU_ALGORITHM(FLASH_ALGO_SM90);
  std::mt19937_64 rng(base_seed() ^ 0x9a17);
  int n = 0;
  for (int grid : {2, 6}) {
    const ScopedMaxCtas env(grid == 2 ? "2" : "6");
    for (int variant = 0; variant < 2; ++variant) {
      CaseSpec s;
      s.batch = 1, s.heads_q = variant == 0 ? 5 : 7, s.heads_kv = variant == 0 ? 1 : 7;
      s.seqlen_q = variant == 0 ? 300 : 333;  // three 128-row tiles per head, the last partial
      s.seqlen_k = 3300 + 61 * variant, s.head_dim = 128;
      s.dtype = ++n % 2 ? FLASH_DTYPE_BF16 : FLASH_DTYPE_FP16;
      flash::FwdParams fp{};  // (what pair_split reads)
      fp.head_dim = 128, fp.seqlen_q = int32_t(s.seqlen_q), fp.seqlen_k = int32_t(s.seqlen_k);
      fp.batch = int32_t(s.batch), fp.heads_q = int32_t(s.heads_q), fp.window_left = fp.window_right = -1;
      const flash::sm90::TailSplit t = flash::sm90::pair_split(fp, grid);
      ASSERT_GT(t.units, 0) << "the problem must run as a pair: " << s.describe();
      if (variant == 0) {
        expect_sm90_ok(s, rng);
        continue;
      }
      expect_split_in_callers_workspace(s, rng, size_t(flash::sm90::tail_workspace_bytes(t, grid, 128, 2)));
    }
  }
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

// ---- Packed variable-length batches (flash.h 1.3; issue 72) ----------------------------------------------------------
// The cases of support/cases.hpp (varlen_test) mirrored to device memory, offsets included: each sequence against the
// fp64 reference, outputs poisoned before the call and checked untouched outside the sequences' rows. Algorithms sm80,
// sm90, naive and AUTO (which runs sm90 on sm_90 where it supports the case -- head dims 64, 128, 256 -- and sm80
// otherwise). Filter: --gtest_filter='*Varlen*'.
namespace {

const int32_t kVarlenAlgorithms[] = {FLASH_ALGO_SM80, FLASH_ALGO_SM90, FLASH_ALGO_NAIVE, FLASH_ALGO_AUTO};

std::string varlen_algo_name(int32_t a) { return a == FLASH_ALGO_AUTO ? "auto" : flash_algorithm_name(a); }

// Skips unless a GPU is present and `algorithm` (AUTO: sm80) is usable on device 0.
#define REQUIRE_VARLEN_ALGORITHM(algo) REQUIRE_GPU_ALGORITHM((algo) == FLASH_ALGO_AUTO ? FLASH_ALGO_SM80 : (algo))

// sm90 runs head dims 64, 128 and 256 (fp16/bf16, 16-byte aligned strides); the cases it does not take are skipped for it.
bool sm90_takes(const varlen_test::VSpec& s) {
  return (s.d == 64 || s.d == 128 || s.d == 256) && s.dtype != FLASH_DTYPE_FP32 && s.scale >= 0.f;
}

void expect_varlen_fwd_ok(const varlen_test::VSpec& s, int32_t algorithm, uint64_t salt) {
  if (algorithm == FLASH_ALGO_SM90 && !sm90_takes(s)) return;
  std::mt19937_64 rng(base_seed() ^ (0x9a7f + salt));
  varlen_test::VCase c = varlen_test::make_vcase(s, rng);
  int32_t used = -1;
  const int32_t st = varlen_test::run_fwd_cuda(c, algorithm, &used);
  ASSERT_EQ(st, FLASH_OK) << flash_status_string(st) << ": " << flash_last_error_message() << "\n  case: " << s.describe();
  if (algorithm == FLASH_ALGO_AUTO)  // sm90 where it is usable and takes the case (layout 1's padding may refuse it)
    EXPECT_TRUE(used == FLASH_ALGO_SM80 || (used == FLASH_ALGO_SM90 && sm90_takes(s))) << "case: " << s.describe();
  else
    EXPECT_EQ(used, algorithm) << "case: " << s.describe();
  const std::string problems = varlen_test::check_fwd(c);
  EXPECT_TRUE(problems.empty()) << varlen_algo_name(algorithm) << ": " << problems << "\n  case: " << s.describe()
                                << "\n  LIBFLASH_TEST_SEED=" << base_seed();
}

varlen_test::VSpec varlen_fixed(std::vector<int64_t> lq, std::vector<int64_t> lk, int32_t dtype, int64_t d = 64) {
  varlen_test::VSpec s;
  s.lq = std::move(lq), s.lk = std::move(lk), s.dtype = dtype;
  s.hq = 4, s.hkv = 2, s.d = d;
  return s;
}

}  // namespace

class VarlenGpuForwardSweep : public ::testing::TestWithParam<std::tuple<int32_t, int>> {};

TEST_P(VarlenGpuForwardSweep, MatchesReferencePerSequence) {
  const auto [algorithm, index] = GetParam();
  REQUIRE_VARLEN_ALGORITHM(algorithm);
  std::mt19937_64 rng(base_seed() + 6151u * static_cast<uint64_t>(index + 1) + 97u * static_cast<uint64_t>(algorithm));
  varlen_test::VSpec s = varlen_test::random_vspec(rng, index % 4 == 3 ? 1500 : 400, /*gpu=*/true);
  if (algorithm == FLASH_ALGO_SM90) s.d = index % 3 == 0 ? 64 : index % 3 == 1 ? 128 : 256;  // (its head dims)
  varlen_test::cap_vspec(s, 200'000'000);  // the fp64 reference's cost
  expect_varlen_fwd_ok(s, algorithm, static_cast<uint64_t>(index));
}

INSTANTIATE_TEST_SUITE_P(Random, VarlenGpuForwardSweep,
                         ::testing::Combine(::testing::ValuesIn(kVarlenAlgorithms), ::testing::Range(0, 32)),
                         [](const auto& info) {
                           return varlen_algo_name(std::get<0>(info.param)) + "_" + std::to_string(std::get<1>(info.param));
                         });

class VarlenGpuForward : public ::testing::TestWithParam<int32_t> {};

TEST_P(VarlenGpuForward, ZeroOneAndOddLengths) {
  REQUIRE_VARLEN_ALGORITHM(GetParam());
  // Empty sequences first, in the middle and last; queries without keys (O = 0, LSE = -inf); keys without queries.
  varlen_test::VSpec s = varlen_fixed({0, 5, 0, 1, 7, 129, 0, 63}, {4, 0, 6, 1, 1, 9, 0, 65}, FLASH_DTYPE_BF16);
  expect_varlen_fwd_ok(s, GetParam(), 1);
  s.mask.causal = 1;
  expect_varlen_fwd_ok(s, GetParam(), 2);
  expect_varlen_fwd_ok(varlen_fixed({0, 0}, {0, 3}, FLASH_DTYPE_FP16), GetParam(), 3);  // nothing to compute
}

TEST_P(VarlenGpuForward, CausalBothAlignmentsPerSequence) {
  REQUIRE_VARLEN_ALGORITHM(GetParam());
  // seqlen_q > and < seqlen_k per sequence, across block edges (the kernels' 64 and 128).
  for (int align : {FLASH_ALIGN_BOTTOM_RIGHT, FLASH_ALIGN_TOP_LEFT})
    for (int32_t dt : {FLASH_DTYPE_FP16, FLASH_DTYPE_BF16}) {
      varlen_test::VSpec s = varlen_fixed({70, 3, 300, 129, 1}, {20, 65, 257, 128, 200}, dt, 128);
      s.mask.causal = 1, s.mask.alignment = align, s.max_slack = 11;
      expect_varlen_fwd_ok(s, GetParam(), 10 + align);
    }
}

TEST_P(VarlenGpuForward, SlidingWindowsPerSequence) {
  REQUIRE_VARLEN_ALGORITHM(GetParam());
  const int windows[][2] = {{0, 0}, {16, 0}, {-1, 5}, {3, -1}, {100, 40}, {200, -1}};
  for (const auto& w : windows)
    for (int align : {FLASH_ALIGN_BOTTOM_RIGHT, FLASH_ALIGN_TOP_LEFT}) {
      varlen_test::VSpec s = varlen_fixed({190, 17, 1, 350}, {320, 17, 33, 70}, FLASH_DTYPE_FP16);
      s.mask.window_left = w[0], s.mask.window_right = w[1], s.mask.alignment = align;
      expect_varlen_fwd_ok(s, GetParam(), 20 + w[0] + 7 * align);
    }
}

TEST_P(VarlenGpuForward, GqaMqaAndEveryHeadDim) {
  REQUIRE_VARLEN_ALGORITHM(GetParam());
  for (int64_t d : {8, 32, 40, 64, 96, 128, 192, 200, 256}) {
    varlen_test::VSpec s = varlen_fixed({33, 180, 5, 0}, {47, 12, 260, 9}, d % 3 ? FLASH_DTYPE_BF16 : FLASH_DTYPE_FP16, d);
    s.hq = 8, s.hkv = d % 3 == 0 ? 8 : (d % 16 == 0 ? 1 : 2);  // MHA, MQA and groups of 4
    s.mask.causal = d % 5 == 0;
    expect_varlen_fwd_ok(s, GetParam(), 30 + d);
  }
}

TEST_P(VarlenGpuForward, StridedAndHeadMajorLayouts) {
  REQUIRE_VARLEN_ALGORITHM(GetParam());
  for (int layout : {1, 2}) {
    varlen_test::VSpec s = varlen_fixed({40, 0, 177}, {63, 9, 165}, FLASH_DTYPE_FP16, 128);
    s.layout = layout;
    s.extra_q = 3, s.extra_k = 5;  // rows after the last sequence: never written
    expect_varlen_fwd_ok(s, GetParam(), 40 + layout);
  }
}

TEST_P(VarlenGpuForward, SequsedKAndLargeMaxSeqlens) {
  REQUIRE_VARLEN_ALGORITHM(GetParam());
  varlen_test::VSpec s = varlen_fixed({20, 131, 8, 5}, {150, 131, 64, 10}, FLASH_DTYPE_BF16);
  s.used = {13, 131, 0, 10};
  expect_varlen_fwd_ok(s, GetParam(), 50);
  s.mask.causal = 1, s.max_slack = 300, s.dtype = FLASH_DTYPE_FP16;
  expect_varlen_fwd_ok(s, GetParam(), 51);
}

TEST_P(VarlenGpuForward, ManySequencesAndLongOnes) {
  REQUIRE_VARLEN_ALGORITHM(GetParam());
  std::mt19937_64 rng(base_seed() ^ 0x10ad);
  varlen_test::VSpec s = varlen_fixed({}, {}, FLASH_DTYPE_BF16, 128);
  for (int i = 0; i < 40; ++i) s.lq.push_back(varlen_test::uni(rng, 0, 90)), s.lk.push_back(varlen_test::uni(rng, 0, 90));
  s.lq.push_back(2100), s.lk.push_back(1900);  // one long sequence: many query and key blocks
  s.mask.causal = 1;
  expect_varlen_fwd_ok(s, GetParam(), 60);
}

INSTANTIATE_TEST_SUITE_P(Algorithms, VarlenGpuForward, ::testing::ValuesIn(kVarlenAlgorithms),
                         [](const auto& info) { return varlen_algo_name(info.param); });

// Each sequence of a varlen call is the dense call of batch 1 on its rows: with sm80, bit for bit (the same kernel,
// tiles and order; only the addressing differs).
TEST(VarlenGpu, Sm80EachSequenceIsBitwiseTheDenseCall) {
  REQUIRE_GPU_ALGORITHM(FLASH_ALGO_SM80);
  std::mt19937_64 rng(base_seed() ^ 0xb17);
  for (int64_t d : {64, 128, 256}) {
    varlen_test::VSpec s = varlen_fixed({70, 0, 300, 1, 129}, {65, 8, 400, 0, 40}, FLASH_DTYPE_BF16, d);
    s.used = {60, 8, 333, 0, 21};
    s.mask.causal = 1, s.layout = 1;
    varlen_test::VCase c = varlen_test::make_vcase(s, rng);
    ASSERT_EQ(varlen_test::run_fwd_cuda(c, FLASH_ALGO_SM80), FLASH_OK) << flash_last_error_message();
    varlen_test::DeviceVCase dev;
    const flash_tensor q = dev.mirror(c.q), k = dev.mirror(c.k), v = dev.mirror(c.v);
    for (int64_t i = 0; i < s.batch(); ++i) {
      const int64_t sq = s.lq[i], sk = s.keys(i);
      if (sq == 0 || sk == 0) continue;  // (a dense call has positive lengths)
      SCOPED_TRACE("d " + std::to_string(d) + " sequence " + std::to_string(i));
      const size_t obytes = size_t(sq * s.hq * s.d) * 2;
      const std::vector<unsigned char> poison(obytes, 0xFF);
      std::vector<float> lse_poison(size_t(s.hq * sq), NAN);
      const int64_t qshape[4] = {1, sq, s.hq, s.d}, lshape[3] = {1, s.hq, sq};
      flash_fwd_args f;
      flash_fwd_args_init(&f);
      f.q = varlen_test::view4(q, c.cu_q[i], sq), f.k = varlen_test::view4(k, c.cu_k[i], sk);
      f.v = varlen_test::view4(v, c.cu_k[i], sk);
      f.o = flash_tensor_contiguous(dev.put(poison.data(), obytes), s.dtype, FLASH_DEVICE_CUDA, 0, 4, qshape);
      f.lse = flash_tensor_contiguous(dev.put(lse_poison.data(), lse_poison.size() * 4), FLASH_DTYPE_FP32, FLASH_DEVICE_CUDA,
                                      0, 3, lshape);
      f.causal = 1;
      f.algorithm = FLASH_ALGO_SM80;
      ASSERT_TRUE(dev.ok);
      ASSERT_EQ(flash_fwd(&f), FLASH_OK) << flash_last_error_message();
      std::vector<unsigned char> o(obytes);
      std::vector<float> lse(size_t(s.hq * sq));
      ASSERT_TRUE(cuda_download(o.data(), f.o.data, obytes) && cuda_download(lse.data(), f.lse.data, lse.size() * 4));
      for (int64_t r = 0; r < sq; ++r)
        for (int64_t h = 0; h < s.hq; ++h) {
          ASSERT_EQ(0, std::memcmp(&o[size_t((r * s.hq + h) * s.d) * 2],
                                   &c.o.bytes[size_t(varlen_test::off3(c.o.desc, c.cu_q[i] + r, h, 0)) * 2], size_t(s.d) * 2))
              << "o row " << r << " head " << h;
          const float packed = reinterpret_cast<const float*>(
              c.lse.bytes.data())[h * c.lse.desc.strides[0] + (c.cu_q[i] + r) * c.lse.desc.strides[1]];
          ASSERT_EQ(0, std::memcmp(&lse[size_t(h * sq + r)], &packed, 4)) << "lse row " << r << " head " << h;
        }
    }
  }
}

// The sm90 forward runs varlen (issue 72: its general kernels' varlen mode) and matches the per-sequence reference at
// every head dim it has, causal both ways, windows and seqused_k; AUTO picks it on sm_90. The backward named sm90 is
// the backward family's (the kernels sm80 runs) and runs varlen too.
TEST(VarlenGpu, Sm90RunsVarlenAndAutoPicksIt) {
  REQUIRE_GPU_ALGORITHM(FLASH_ALGO_SM90);
  std::mt19937_64 rng(base_seed() ^ 0x590);
  for (int64_t d : {64, 128, 256}) {
    SCOPED_TRACE("d " + std::to_string(d));
    // Sequences longer than a tile (192 rows at d64, 128 otherwise), empty ones, queries without keys.
    varlen_test::VSpec s = varlen_fixed({70, 0, 130, 401, 3, 0}, {65, 8, 129, 300, 0, 0}, FLASH_DTYPE_BF16, d);
    varlen_test::VCase c;
    ASSERT_EQ(varlen_test::make_bwd_vcase(s, rng, &c), FLASH_OK) << flash_last_error_message();
    int32_t used = -1;
    ASSERT_EQ(varlen_test::run_fwd_cuda(c, FLASH_ALGO_SM90, &used), FLASH_OK) << flash_last_error_message();
    EXPECT_EQ(used, FLASH_ALGO_SM90);
    EXPECT_EQ(varlen_test::check_fwd(c), "");
    ASSERT_EQ(varlen_test::run_fwd_cuda(c, FLASH_ALGO_AUTO, &used), FLASH_OK) << flash_last_error_message();
    EXPECT_EQ(used, FLASH_ALGO_SM90);
    EXPECT_EQ(varlen_test::check_fwd(c), "");
    ASSERT_EQ(varlen_test::run_bwd_cuda(c, FLASH_ALGO_SM90, 0, &used), FLASH_OK) << flash_last_error_message();
    EXPECT_EQ(used, FLASH_ALGO_SM90);
    for (int align : {FLASH_ALIGN_BOTTOM_RIGHT, FLASH_ALIGN_TOP_LEFT}) {
      varlen_test::VSpec m = s;
      m.mask.causal = 1, m.mask.alignment = align, m.used = {60, 8, 100, 300, 0, 0}, m.dtype = FLASH_DTYPE_FP16;
      expect_varlen_fwd_ok(m, FLASH_ALGO_SM90, 0x590 + d + align);
      m.mask.causal = 0, m.mask.window_left = 37, m.mask.window_right = 5;
      expect_varlen_fwd_ok(m, FLASH_ALGO_SM90, 0x591 + d + align);
    }
  }
}

// The offsets of a CUDA call must be device memory on the tensors' device, and no output (o, lse, the workspace) may
// overlap them: both checked on the host before anything runs.
TEST(VarlenGpu, OffsetsAreCheckedForDeviceAndOverlap) {
  REQUIRE_GPU_ALGORITHM(FLASH_ALGO_SM80);
  std::mt19937_64 rng(base_seed() ^ 0xc4ec);
  varlen_test::VCase c = varlen_test::make_vcase(varlen_fixed({5, 9}, {7, 3}, FLASH_DTYPE_FP16), rng);
  varlen_test::DeviceVCase d;
  flash_fwd_args a;
  varlen_test::fill_fwd(c, &a, FLASH_ALGO_AUTO);
  a.q = d.mirror(c.q), a.k = d.mirror(c.k), a.v = d.mirror(c.v), a.o = d.mirror(c.o), a.lse = d.mirror(c.lse);
  ASSERT_TRUE(d.ok);
  // Host offsets with CUDA tensors.
  EXPECT_EQ(flash_fwd(&a), FLASH_ERROR_DEVICE_MISMATCH) << flash_last_error_message();
  EXPECT_NE(std::string(flash_last_error_message()).find("cu_seqlens_q"), std::string::npos) << flash_last_error_message();
  d.offsets(c, &a);
  ASSERT_TRUE(d.ok);
  const int32_t* good_q = a.cu_seqlens_q;
  // cu_seqlens_q inside o (its values copied there first: only the overlap is wrong).
  ASSERT_TRUE(cuda_upload(a.o.data, c.cu_q.data(), c.cu_q.size() * 4));
  a.cu_seqlens_q = static_cast<const int32_t*>(a.o.data);
  EXPECT_EQ(flash_fwd(&a), FLASH_ERROR_INVALID_ARGUMENT) << flash_last_error_message();
  EXPECT_NE(std::string(flash_last_error_message()).find("o overlaps cu_seqlens_q"), std::string::npos)
      << flash_last_error_message();
  // The workspace over cu_seqlens_k.
  a.cu_seqlens_q = good_q;
  a.workspace = const_cast<int32_t*>(a.cu_seqlens_k);
  a.workspace_size = 64;
  EXPECT_EQ(flash_fwd(&a), FLASH_ERROR_INVALID_ARGUMENT) << flash_last_error_message();
  EXPECT_NE(std::string(flash_last_error_message()).find("workspace overlaps cu_seqlens_k"), std::string::npos)
      << flash_last_error_message();
  a.workspace = nullptr, a.workspace_size = 0;
  EXPECT_EQ(flash_fwd(&a), FLASH_OK) << flash_last_error_message();
}

// Device offsets are the caller's promise, never read by the host: whatever they hold -- huge, negative, decreasing,
// past the tensors, seqused_k past the slots, lengths past max_seqlen_* -- no kernel may touch memory outside the
// tensors (run under compute-sanitizer memcheck: scripts/device.sh sanitize) nor hang (deterministic backward
// included). The results are unspecified; the calls succeed and the device stays healthy.
TEST(VarlenGpu, GarbageDeviceOffsetsNeverFault) {
  std::string why;
  if (!usable(FLASH_ALGO_SM80, &why) && !usable(FLASH_ALGO_NAIVE, &why)) GTEST_SKIP() << why;
  // (sm90's forward reads the offsets itself; its backward is the family's that sm80 runs.)
  const int32_t big = 0x7fffffff, small = -0x7fffffff - 1;
  const std::vector<std::vector<int32_t>> offsets = {
      {0, big, 5, small, 300, -7, 70},         // huge, negative, past total
      {300, 200, 100, 50, 0, 0, 600},          // decreasing, past total
      {0, 1, 2, 3, 4, 5, 6},                   // valid but tiny
      {0, 0, 0, 0, 0, 0, 0},                   // all empty
      {-1, 150, 151, 260, 261, 262, big},      // starts negative, ends huge
  };
  const std::vector<int32_t> used = {big, -3, 7, 0, small, 250};
  std::mt19937_64 rng(base_seed() ^ 0x9a8b);
  varlen_test::VSpec s = varlen_fixed({40, 50, 60, 30, 40, 41}, {50, 40, 30, 60, 40, 41}, FLASH_DTYPE_BF16);  // 261 rows each
  s.extra_q = 6, s.extra_k = 6;
  varlen_test::VCase c;
  ASSERT_EQ(varlen_test::make_bwd_vcase(s, rng, &c), FLASH_OK) << flash_last_error_message();
  int n = 0;
  for (int32_t algo : {FLASH_ALGO_SM80, FLASH_ALGO_SM90, FLASH_ALGO_NAIVE, FLASH_ALGO_AUTO}) {
    if (!usable(algo == FLASH_ALGO_AUTO ? FLASH_ALGO_SM80 : algo, &why)) continue;
    for (const auto& oq : offsets)
      for (const auto& ok : offsets) {
        if ((++n) % 3 != 0 && &oq != &ok) continue;  // a sample of the pairs (each array against itself, a third of the rest)
        for (int variant = 0; variant < 4; ++variant) {  // seqused_k or not; max_seqlen_* at the promise or below it
          SCOPED_TRACE(varlen_algo_name(algo) + " pair " + std::to_string(n) + " variant " + std::to_string(variant));
          varlen_test::DeviceVCase d;
          flash_fwd_args f;
          varlen_test::fill_fwd(c, &f, algo);
          f.q = d.mirror(c.q), f.k = d.mirror(c.k), f.v = d.mirror(c.v), f.o = d.mirror(c.o), f.lse = d.mirror(c.lse);
          f.cu_seqlens_q = static_cast<const int32_t*>(d.put(oq.data(), oq.size() * 4));
          f.cu_seqlens_k = static_cast<const int32_t*>(d.put(ok.data(), ok.size() * 4));
          f.seqused_k = variant & 1 ? static_cast<const int32_t*>(d.put(used.data(), used.size() * 4)) : nullptr;
          f.max_seqlen_q = variant & 2 ? 17 : 300, f.max_seqlen_k = variant & 2 ? 33 : 300;
          f.causal = variant == 1;
          flash_bwd_args b;
          varlen_test::fill_bwd(c, &b, algo, variant >= 2 ? FLASH_FLAG_DETERMINISTIC : 0);
          b.q = f.q, b.k = f.k, b.v = f.v, b.o = f.o, b.lse = f.lse;
          b.d_o = d.mirror(c.d_o), b.dq = d.mirror(c.dq), b.dk = d.mirror(c.dk), b.dv = d.mirror(c.dv);
          b.cu_seqlens_q = f.cu_seqlens_q, b.cu_seqlens_k = f.cu_seqlens_k, b.seqused_k = f.seqused_k;
          b.max_seqlen_q = f.max_seqlen_q, b.max_seqlen_k = f.max_seqlen_k;
          b.causal = f.causal;
          ASSERT_TRUE(d.ok);
          EXPECT_EQ(flash_fwd(&f), FLASH_OK) << flash_last_error_message();
          EXPECT_EQ(flash_bwd(&b), FLASH_OK) << flash_last_error_message();
          std::vector<unsigned char> back(c.dq.bytes.size());
          ASSERT_TRUE(cuda_download(back.data(), b.dq.data, back.size())) << "the device faulted";
        }
      }
  }
}
