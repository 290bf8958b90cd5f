// tests/test_sm90_host.cpp -- host-side checks of two per-tile decisions of the sm90 forward that the kernel takes
// from libflash/cuda/sm90/plan.h:
// - the causal tile order (CausalOrder): the GPU tests' problems are too small to reach more than one group (their
//   last group alone holds 2 x grid tiles), so the order's groups are checked here, in CI;
// - which key blocks need the element mask (mask_bounds): a block wrongly taken as wholly visible would let masked
//   keys through, so the bounds are compared with a row-by-row test on random windows, offsets and tiles;
// - which instantiation runs a problem (use_listed_kernel): block masks always the block-sparse one, which also takes
//   d64's short-tile problems, and never a problem whose schedules would not fit in shared memory;
// - the dense kernels' split last round (TailSplit, plan_tail, tail_slot): every key block of the split tiles is run by
//   exactly one CTA, and a tile's merging piece finds every other piece of it;
// - d64 dense's split into two kernels (d64_split_rows), d64 causal's first rows apart (d64_causal_top_rows);
// - d128 block-sparse's kernel with SFU turns for long lists (sfu_turns_by_length).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "libflash/cuda/sm90/fwd/plan.h"

namespace {

using flash::sm90::CausalOrder;
using flash::sm90::causal_order;
using flash::sm90::mask_bounds;
using flash::sm90::MaskBounds;

// Every work tile maps to a distinct (query block, batch*head) and every pair is reached; inside a group the query
// blocks come longest first (descending m_block); a group's pairs are consecutive; groups fit the L2 budget; the last
// group holds at least tail_grids x grid tiles (or every pair).
void check_order(int64_t num_bh, int num_m_blocks, int grid, int64_t kv_bytes, int64_t budget, double tail_grids) {
  const CausalOrder o = causal_order(num_bh, num_m_blocks, grid, kv_bytes, budget, tail_grids);
  SCOPED_TRACE(::testing::Message() << "num_bh " << num_bh << " m_blocks " << num_m_blocks << " grid " << grid << " kv "
                                    << kv_bytes << " budget " << budget << " -> group " << o.group << " full "
                                    << o.full_groups);
  ASSERT_GE(o.group, 1);
  ASSERT_LE(int64_t(o.group), num_bh);
  if (o.group > 1) EXPECT_LE(int64_t(o.group) * kv_bytes, budget);
  if (int64_t(o.group + 1) <= num_bh) EXPECT_GT(int64_t(o.group + 1) * kv_bytes, budget);  // as many as fit
  const int64_t last = num_bh - int64_t(o.full_groups) * o.group;
  ASSERT_GE(last, 0);
  const int64_t want_tail = std::min<int64_t>(num_bh, int64_t(std::ceil(tail_grids * grid / num_m_blocks)));
  if (o.full_groups > 0) EXPECT_GE(last, want_tail);
  if (o.full_groups > 0) EXPECT_LT(last, want_tail + o.group);  // no full group left in the tail that could stand alone

  const int64_t tiles = num_bh * num_m_blocks;
  std::vector<uint8_t> seen(size_t(tiles), 0);
  int prev_m = 0, prev_group = -1;
  for (int64_t x = 0; x < tiles; ++x) {
    int m = -1, bh = -1;
    o.tile(int(x), m, bh);
    ASSERT_GE(m, 0);
    ASSERT_LT(m, num_m_blocks);
    ASSERT_GE(bh, 0);
    ASSERT_LT(int64_t(bh), num_bh);
    uint8_t& s = seen[size_t(int64_t(bh) * num_m_blocks + m)];
    ASSERT_EQ(s, 0) << "tile " << x << " repeats (m " << m << ", bh " << bh << ")";
    s = 1;
    const int group = bh < int64_t(o.full_groups) * o.group ? bh / o.group : o.full_groups;
    if (group == prev_group) EXPECT_LE(m, prev_m) << "tile " << x << ": not longest first inside its group";
    else EXPECT_GT(group, prev_group) << "tile " << x << ": groups out of order";
    prev_m = m, prev_group = group;
  }
}

TEST(Sm90CausalOrder, StandardGridShapes) {
  // H100 (132 SMs, 50 MB of L2) on the standard grid: d64 192-row tiles with half of L2, d128 / d256 128-row tiles
  // with a third (d256 1k, walked upwards: two heads); batch * seqlen = 16k, heads 2048 / d.
  const int64_t l2 = 50 << 20;
  for (int n : {512, 1024, 2048, 4096, 8192, 16384})
    for (int d : {64, 128, 256}) {
      const int block_m = d == 64 ? 192 : 128;
      const int64_t num_bh = int64_t(16384 / n) * (2048 / d);
      const int m_blocks = (n + block_m - 1) / block_m;
      const int grid = int(std::min<int64_t>(num_bh * m_blocks, 132));
      const int64_t kv = int64_t(n) * d * 4;
      const bool up = flash::sm90::use_upward_kernel(d, false, -1, 0);
      check_order(num_bh, m_blocks, grid, kv, flash::sm90::causal_l2_budget(d, m_blocks, up, kv, l2),
                  flash::sm90::causal_tail_grids(d, m_blocks));
    }
}

// The last group's size in grids (schedule.h causal_tail_grids): one grid only at d256 with at most 8 query
// blocks a head (1k rows), two everywhere else.
TEST(Sm90CausalOrder, TailGrids) {
  using flash::sm90::causal_tail_grids;
  EXPECT_EQ(causal_tail_grids(256, 8), 1.0);
  EXPECT_EQ(causal_tail_grids(256, 1), 1.0);
  EXPECT_EQ(causal_tail_grids(256, 9), 2.0);
  EXPECT_EQ(causal_tail_grids(256, 16), 2.0);
  EXPECT_EQ(causal_tail_grids(128, 8), 2.0);
  EXPECT_EQ(causal_tail_grids(64, 6), 2.0);
  // At d256 1k on 132 CTAs: a last group of 32 pairs (17 wanted, rounded up to whole 16-pair groups) instead of 48.
  const flash::sm90::CausalOrder o = flash::sm90::causal_order(128, 8, 132, int64_t(1024) * 256 * 4, (int64_t(50) << 20) / 3,
                                                               causal_tail_grids(256, 8));
  EXPECT_EQ(o.group, 16);
  EXPECT_EQ(128 - o.full_groups * o.group, 32);
}

// Which masks walk their key blocks upwards (plan.h use_upward_kernel): d256 with a right edge and no
// left edge (causal, causal with a right extension), never a block mask, never dense or a window with a left edge, never
// another head dim. And the causal order's budget (causal_l2_budget): two heads' K and V for the upward walk with at most 8
// query blocks a head, else a third of L2 (d64: half).
TEST(Sm90CausalOrder, UpwardWalkAndBudget) {
  using flash::sm90::causal_l2_budget;
  using flash::sm90::use_upward_kernel;
  EXPECT_TRUE(use_upward_kernel(256, false, -1, 0));
  EXPECT_TRUE(use_upward_kernel(256, false, -1, 37));
  EXPECT_FALSE(use_upward_kernel(256, true, -1, 0));
  EXPECT_FALSE(use_upward_kernel(256, false, -1, -1));
  EXPECT_FALSE(use_upward_kernel(256, false, 256, 0));
  EXPECT_FALSE(use_upward_kernel(128, false, -1, 0));
  EXPECT_FALSE(use_upward_kernel(64, false, -1, 0));
  const int64_t l2 = 50 << 20, kv = 1 << 20;
  EXPECT_EQ(causal_l2_budget(256, 8, true, kv, l2), 2 * kv);
  EXPECT_EQ(causal_l2_budget(256, 1, true, kv, l2), 2 * kv);
  EXPECT_EQ(causal_l2_budget(256, 9, true, kv, l2), l2 / 3);
  EXPECT_EQ(causal_l2_budget(256, 8, false, kv, l2), l2 / 3);
  EXPECT_EQ(causal_l2_budget(128, 8, false, kv, l2), l2 / 3);
  EXPECT_EQ(causal_l2_budget(64, 6, false, kv, l2), l2 / 2);
  // d256 1k on 132 CTAs: groups of two pairs, and the 1-grid last group (17 pairs wanted) of 18.
  const flash::sm90::CausalOrder o = flash::sm90::causal_order(128, 8, 132, kv, causal_l2_budget(256, 8, true, kv, l2),
                                                               flash::sm90::causal_tail_grids(256, 8));
  EXPECT_EQ(o.group, 2);
  EXPECT_EQ(128 - o.full_groups * o.group, 18);
}

TEST(Sm90CausalOrder, RandomShapes) {
  std::mt19937_64 rng(20261122);
  for (int i = 0; i < 3000; ++i) {
    const int64_t num_bh = 1 + int64_t(rng() % 300);
    const int m_blocks = 1 + int(rng() % 40);
    const int grid = int(std::min<int64_t>(num_bh * m_blocks, 1 + int64_t(rng() % 160)));
    const int64_t kv = 1 + int64_t(rng() % (64 << 20));
    const int64_t budget = (1 + int64_t(rng() % 64)) << 20;
    const double tail = double(rng() % 5);  // 0 (no tail rule) .. 4 grids
    check_order(num_bh, m_blocks, grid, kv, budget, tail);
    if (HasFatalFailure()) return;
  }
}

// Block n (keys [n * kBlockN, n * kBlockN + kBlockN)) needs the element mask when some row of [q_begin, q_end) does not
// see all of its keys: row r sees keys k with 0 <= k < seqlen_k, k >= r + diag - window_left (window_left >= 0) and
// k <= r + diag + window_right (window_right >= 0) -- flash.h's mask, row by row.
template <int kBlockN>
bool needs_mask_rowwise(const flash::FwdParams& p, int q_begin, int q_end, int64_t n) {
  const int64_t k_begin = n * kBlockN, k_last = k_begin + kBlockN - 1;
  if (k_last >= p.seqlen_k) return true;
  for (int64_t r = q_begin; r < q_end; ++r) {
    if (p.window_left >= 0 && k_begin < r + p.diag_offset - p.window_left) return true;
    if (p.window_right >= 0 && k_last > r + p.diag_offset + p.window_right) return true;
  }
  return false;
}

template <int kBlockN>
void check_mask_bounds(std::mt19937_64& rng, int cases) {
  for (int i = 0; i < cases; ++i) {
    flash::FwdParams p{};
    p.seqlen_k = 1 + int64_t(rng() % 3000);
    p.window_left = rng() % 3 == 0 ? -1 : int32_t(rng() % 700);
    p.window_right = rng() % 3 == 0 ? -1 : int32_t(rng() % 700);
    p.diag_offset = int64_t(rng() % 4001) - 2000;
    const int q_begin = int(rng() % 3000), q_end = q_begin + 1 + int(rng() % 192);
    const MaskBounds b = mask_bounds<kBlockN>(p, q_begin, q_end);
    for (int64_t n = 0; n * kBlockN < p.seqlen_k + kBlockN; ++n) {
      const bool bounds = n < b.below || n > b.above;
      ASSERT_EQ(bounds, needs_mask_rowwise<kBlockN>(p, q_begin, q_end, n))
          << "block " << n << " of " << kBlockN << " keys, rows [" << q_begin << ", " << q_end << "), seqlen_k "
          << p.seqlen_k << ", window (" << p.window_left << ", " << p.window_right << "), diag " << p.diag_offset
          << ": bounds [" << b.below << ", " << b.above << "]";
    }
  }
}

TEST(Sm90MaskBounds, MatchRowByRowTest) {
  std::mt19937_64 rng(7757);
  check_mask_bounds<64>(rng, 1500);
  check_mask_bounds<80>(rng, 1500);
  check_mask_bounds<128>(rng, 1500);
}

TEST(Sm90Instantiation, ListedKernelChoice) {
  using flash::sm90::use_listed_kernel;
  using flash::sm90::kListedMaxWindow;
  constexpr int64_t kH100 = 232448;
  auto params = [](int d, int64_t sq, int64_t sk, int32_t left, int32_t right) {
    flash::FwdParams p{};
    p.head_dim = d, p.seqlen_q = sq, p.seqlen_k = sk, p.window_left = left, p.window_right = right;
    return p;
  };
  for (int d : {64, 128, 256}) {
    flash::FwdParams p = params(d, 4096, 4096, -1, -1);
    EXPECT_FALSE(use_listed_kernel(p, kH100)) << "dense d" << d;
    p.has_block_mask = true;
    EXPECT_TRUE(use_listed_kernel(p, kH100)) << "block mask d" << d;
    EXPECT_TRUE(use_listed_kernel(p, 0)) << "block mask d" << d << " (supports() checks its shared memory)";
    if (d != 64) {
      EXPECT_FALSE(use_listed_kernel(params(d, 1024, 1024, -1, 0), kH100));
      EXPECT_FALSE(use_listed_kernel(params(d, 16384, 16384, 255, 0), kH100));
    }
  }
  EXPECT_FALSE(use_listed_kernel(params(64, 1024, 1024, -1, 0), kH100));  // causal: the dense one at every length
  EXPECT_FALSE(use_listed_kernel(params(64, 1024, 1024, -1, 5), kH100));
  EXPECT_TRUE(use_listed_kernel(params(64, 16384, 16384, kListedMaxWindow - 1, 0), kH100));
  EXPECT_TRUE(use_listed_kernel(params(64, 16384, 16384, 0, kListedMaxWindow - 1), kH100));
  EXPECT_FALSE(use_listed_kernel(params(64, 16384, 16384, kListedMaxWindow, 0), kH100));
  EXPECT_FALSE(use_listed_kernel(params(64, 16384, 16384, 2000000000, 0), kH100));
  EXPECT_FALSE(use_listed_kernel(params(64, 16384, 16384, 0, -1), kH100));  // a left edge only: long tiles
  EXPECT_FALSE(use_listed_kernel(params(64, 512, 512, -1, -1), kH100));     // dense
  // Schedules that do not fit: the dense instantiation runs it.
  EXPECT_FALSE(use_listed_kernel(params(64, 1000, int64_t(1) << 30, 255, 0), kH100));
  EXPECT_FALSE(use_listed_kernel(params(64, 16384, 16384, 255, 0), 100000));
}

// d64 dense in two kernels (d64_split_rows): the three-warpgroup kernel's rows are whole 192-row tiles, the
// two-warpgroup kernel's at most two 128-row tiles, together they cover seqlen_q, and the split has at least 64 junk rows
// (rows of tiles past seqlen_q) fewer than whole 192-row tiles; only dense d64 problems split.
TEST(Sm90Instantiation, D64RowSplit) {
  using flash::sm90::d64_split_rows;
  auto params = [](int d, int64_t sq, int64_t sk, int32_t left, int32_t right) {
    flash::FwdParams p{};
    p.head_dim = d, p.seqlen_q = int32_t(sq), p.seqlen_k = int32_t(sk), p.window_left = left, p.window_right = right;
    return p;
  };
  EXPECT_EQ(d64_split_rows(params(64, 1024, 1024, -1, -1)), 768);    // 5 x 192 + 64: two tiles of 128
  EXPECT_EQ(d64_split_rows(params(64, 2048, 2048, -1, -1)), 1920);   // 10 x 192 + 128: one
  EXPECT_EQ(d64_split_rows(params(64, 16384, 16384, -1, -1)), 16128);
  EXPECT_EQ(d64_split_rows(params(64, 8192, 8192, -1, -1)), 8064);
  EXPECT_EQ(d64_split_rows(params(64, 1152, 1152, -1, -1)), -1);    // 6 x 192
  EXPECT_EQ(d64_split_rows(params(64, 1100, 1100, -1, -1)), -1);    // 5 x 192 + 140: 52 junk rows
  EXPECT_EQ(d64_split_rows(params(64, 100, 100, -1, -1)), 0);       // the second kernel alone
  EXPECT_EQ(d64_split_rows(params(64, 1024, 1024, -1, 0)), -1);     // causal
  EXPECT_EQ(d64_split_rows(params(64, 1024, 1024, 100, -1)), -1);   // a window edge
  EXPECT_EQ(d64_split_rows(params(128, 1024, 1024, -1, -1)), -1);
  {
    flash::FwdParams p = params(64, 1024, 1024, -1, -1);
    p.has_block_mask = true;
    EXPECT_EQ(d64_split_rows(p), -1);
  }
  for (int64_t sq = 1; sq <= 2000; ++sq) {
    const int64_t a = d64_split_rows(params(64, sq, 4096, -1, -1));
    const int64_t tiles3 = (sq + 191) / 192;
    if (a < 0) {
      EXPECT_LT(tiles3 * 192 - sq, 64) << sq;  // left whole only where the last tile has under 64 junk rows
      continue;
    }
    EXPECT_EQ(a % 192, 0) << sq;
    ASSERT_LT(a, sq) << sq;
    const int64_t tiles2 = (sq - a + 127) / 128;
    EXPECT_GE(tiles2, 1) << sq;
    EXPECT_LE(tiles2, 2) << sq;
    // Junk rows: at least a warpgroup's 64 fewer than on whole 192-row tiles, and under 64 but for a lone short tile.
    const int64_t junk = a + tiles2 * 128 - sq;
    EXPECT_LE(junk + 64, tiles3 * 192 - sq) << sq;
    if (sq > 64) EXPECT_LT(junk, 64) << sq;
  }
}

// d64 causal's first rows apart (d64_causal_top_rows): under a right-edged mask without a left edge at d64,
// below 2048 rows, the first seqlen_q mod 192 rows when that is 1..64 and those rows see at most 128 keys; the rest are
// whole 192-row tiles. rows_view moves Q, O, LSE and the diagonal together.
TEST(Sm90Instantiation, D64CausalTopRows) {
  using flash::sm90::d64_causal_top_rows;
  auto params = [](int d, int64_t sq, int64_t sk, int32_t left, int32_t right, int64_t diag) {
    flash::FwdParams p{};
    p.head_dim = d, p.seqlen_q = int32_t(sq), p.seqlen_k = int32_t(sk), p.window_left = left, p.window_right = right;
    p.diag_offset = diag, p.batch = 2, p.heads_q = 16;
    return p;
  };
  EXPECT_EQ(d64_causal_top_rows(params(64, 1024, 1024, -1, 0, 0)), 64);    // 5 x 192 + 64
  EXPECT_EQ(d64_causal_top_rows(params(64, 1000, 1000, -1, 0, 0)), 40);
  EXPECT_EQ(d64_causal_top_rows(params(64, 193, 193, -1, 0, 0)), 1);
  EXPECT_EQ(d64_causal_top_rows(params(64, 1984, 1984, -1, 0, 0)), 64);    // 10 x 192 + 64
  EXPECT_EQ(d64_causal_top_rows(params(64, 1024, 1088, -1, 0, 64)), 64);   // bottom-right, 64 keys more: 128 keys
  EXPECT_EQ(d64_causal_top_rows(params(64, 1024, 1089, -1, 0, 65)), 0);    // 129
  EXPECT_EQ(d64_causal_top_rows(params(64, 1024, 900, -1, 0, -124)), 64);  // rows that see no key
  EXPECT_EQ(d64_causal_top_rows(params(64, 1024, 1024, -1, 37, 0)), 64);   // a right edge past the diagonal
  EXPECT_EQ(d64_causal_top_rows(params(64, 1024, 1024, -1, 65, 0)), 0);
  EXPECT_EQ(d64_causal_top_rows(params(64, 2048, 2048, -1, 0, 0)), 0);     // 10 x 192 + 128
  EXPECT_EQ(d64_causal_top_rows(params(64, 2176, 2176, -1, 0, 0)), 0);     // 11 x 192 + 64, from 2048 rows not split
  EXPECT_EQ(d64_causal_top_rows(params(64, 1152, 1152, -1, 0, 0)), 0);     // 6 x 192
  EXPECT_EQ(d64_causal_top_rows(params(64, 64, 64, -1, 0, 0)), 0);         // one partial tile: nothing to split from
  EXPECT_EQ(d64_causal_top_rows(params(64, 1024, 1024, -1, -1, 0)), 0);    // dense (d64_split_rows)
  EXPECT_EQ(d64_causal_top_rows(params(64, 1024, 1024, 100, 0, 0)), 0);    // a left edge
  EXPECT_EQ(d64_causal_top_rows(params(128, 1024, 1024, -1, 0, 0)), 0);
  {
    flash::FwdParams p = params(64, 1024, 1024, -1, 0, 0);
    p.has_block_mask = true;
    EXPECT_EQ(d64_causal_top_rows(p), 0);
    p = params(64, 1024, 1024, -1, 0, 0);
    p.heads_q = 65536;  // the sm80 body's grid limit
    EXPECT_EQ(d64_causal_top_rows(p), 0);
  }
  for (int64_t sq = 1; sq <= 2200; ++sq) {
    const int64_t r = d64_causal_top_rows(params(64, sq, sq, -1, 0, 0));
    if (r == 0) {
      EXPECT_TRUE(sq < 192 || sq >= 2048 || sq % 192 == 0 || sq % 192 > 64) << sq;
      continue;
    }
    EXPECT_GE(r, 1) << sq;
    EXPECT_LE(r, 64) << sq;
    EXPECT_EQ((sq - r) % 192, 0) << sq;  // the rest: whole 192-row tiles
  }
  // rows_view: rows [100, 300) of a bf16 problem (Q rows of 1024 elements, O rows of 2048) with an LSE.
  flash::FwdParams p = params(64, 1000, 1100, -1, 0, 100);
  p.dtype = flash::DType::BF16;
  static char q[1], o[1];
  static float lse[1];
  p.q = q, p.o = o, p.lse = lse;
  p.q_row_stride = 1024, p.o_row_stride = 2048, p.lse_row_stride = 1;
  const flash::FwdParams v = flash::sm90::rows_view(p, 100, 300);
  EXPECT_EQ(static_cast<const char*>(v.q) - q, 100 * 1024 * 2);
  EXPECT_EQ(static_cast<char*>(v.o) - o, 100 * 2048 * 2);
  EXPECT_EQ(v.lse - lse, 100);
  EXPECT_EQ(v.seqlen_q, 200);
  EXPECT_EQ(v.seqlen_k, 1100);
  EXPECT_EQ(v.diag_offset, 200);  // the view's row 0 is row 100: it sees keys up to 100 + 100 + window_right
  EXPECT_EQ(v.k, p.k);
}

// d64 block-sparse masks of 128-row blocks with lists of at least 3 key blocks (of 128) run on the two-ring instantiation
// (plan.h, use_two_rings), when it fits; everything else on the others.
TEST(Sm90Instantiation, TwoRingChoice) {
  using flash::sm90::use_two_rings;
  constexpr flash::sm90::Shape kTwoRingShape = flash::sm90::shape_of(flash::sm90::Variant::kD64TwoRings);
  constexpr int64_t kH100 = 232448;
  auto params = [](int d, int64_t sk, int32_t block_m, int32_t block_n, int32_t max_kv_blocks) {
    flash::FwdParams p{};
    p.head_dim = d, p.seqlen_q = 4096, p.seqlen_k = sk, p.window_left = p.window_right = -1;
    p.has_block_mask = true;
    p.block_mask.block_m = block_m, p.block_mask.block_n = block_n, p.block_mask.max_kv_blocks = max_kv_blocks;
    return p;
  };
  EXPECT_TRUE(use_two_rings(params(64, 16384, 128, 128, 64), kH100));
  EXPECT_TRUE(use_two_rings(params(64, 4096, 128, 128, 3), kH100));
  EXPECT_FALSE(use_two_rings(params(64, 4096, 128, 128, 2), kH100));  // short lists: the two-warpgroup kernel
  EXPECT_TRUE(use_two_rings(params(64, 4096, 128, 256, 2), kH100));    // 2 mask blocks of 2 key blocks
  EXPECT_FALSE(use_two_rings(params(64, 4096, 128, 256, 1), kH100));
  EXPECT_FALSE(use_two_rings(params(64, 16384, 64, 64, 64), kH100));   // 64-row blocks
  EXPECT_FALSE(use_two_rings(params(64, 16384, 256, 128, 64), kH100));  // 256-row blocks
  EXPECT_FALSE(use_two_rings(params(64, 16384, 128, 64, 64), kH100));   // 64-key blocks
  EXPECT_FALSE(use_two_rings(params(128, 16384, 128, 128, 64), kH100));
  EXPECT_FALSE(use_two_rings(params(256, 16384, 128, 128, 64), kH100));
  flash::FwdParams none = params(64, 16384, 128, 128, 64);
  none.has_block_mask = false;
  EXPECT_FALSE(use_two_rings(none, kH100));
  // Its shared memory: Q x 2 + 2 rings x 2 stages x (K + V) + the O staging tile (+ 1 KB alignment), then the schedules.
  EXPECT_EQ(kTwoRingShape.smem_bytes(), (2 * 192 + 2 * 2 * 2 * 128) * 64 * 2 + 1024 + 192 * 64 * 2);
  EXPECT_TRUE(use_two_rings(params(64, 200000, 128, 128, 64), kH100));  // 4 x 1564 ints of schedules still fit
  EXPECT_FALSE(use_two_rings(params(64, int64_t(1) << 22, 128, 128, 64), kH100));
  EXPECT_FALSE(use_two_rings(params(64, 16384, 128, 128, 64), 200000));
}

// The two-ring kernel's tail plan (plan.h ring_tail_plan) and tile order (RingOrder; tile_scheduler.cuh ring_tile): which
// launches take a plan, and that every order covers each 64-row group of each head exactly once, its 128-row tiles one
// mask row block each, with a plan's whole tiles filling rounds of the grid exactly and no more small tiles than CTAs.
TEST(Sm90TwoRingTail, PlanChoice) {
  using flash::sm90::ring_tail_plan;
  EXPECT_EQ(ring_tail_plan(4096, 64, 132), 24);  // issue 7's d64 4k grid: 1344 = 10 x 132 + 24 whole tiles
  EXPECT_EQ(ring_tail_plan(4096, 64, 128), 64);  // 1344 = 10 x 128 + 64: 64 + 64 small tiles for 128 CTAs
  EXPECT_EQ(ring_tail_plan(4096, 32, 132), 12);
  EXPECT_EQ(ring_tail_plan(4096, 44, 132), 0);   // 924 = 7 x 132: no overflow
  EXPECT_EQ(ring_tail_plan(4096, 60, 132), 0);   // 1260 = 9 x 132 + 72, and 72 > 60 heads
  EXPECT_EQ(ring_tail_plan(4096, 100, 132), 0);  // 2100 = 15 x 132 + 120: 100 + 120 small tiles > 132
  EXPECT_EQ(ring_tail_plan(4096, 4, 132), 0);    // 84 whole tiles: less than a round
  EXPECT_EQ(ring_tail_plan(4160, 64, 132), 0);   // 21 x 192 + 128: no 64-row tile
  EXPECT_EQ(ring_tail_plan(832, 64, 132), 0);    // F = 4: the 128-row tiles would straddle a mask row block
  EXPECT_EQ(ring_tail_plan(448, 64, 132), 0);    // F = 2: too short
  EXPECT_EQ(ring_tail_plan(640, 48, 132), 12);   // the GPU test's shapes
  EXPECT_EQ(ring_tail_plan(1024, 30, 132), 18);
  EXPECT_EQ(ring_tail_plan(4096, 64, 0), 0);
}

TEST(Sm90TwoRingTail, OrderCoversEveryRowOnce) {
  using flash::sm90::RingOrder;
  using flash::sm90::ring_tail_plan;
  std::mt19937_64 rng(67);
  struct Shape {
    int64_t sq;
    int num_bh, grid;
  };
  std::vector<Shape> shapes = {{4096, 64, 132}, {4096, 64, 128}, {640, 48, 132}, {1024, 30, 132}, {4000, 64, 132},
                               {4096, 44, 132}, {130, 12, 132}};
  for (int i = 0; i < 300; ++i) {
    const int64_t sq = i % 2 ? 64 + 192 * int64_t(rng() % 40) + int64_t(rng() % 3) * 64 - int64_t(rng() % 2) * 17
                             : 192 * (3 + 2 * int64_t(rng() % 20)) + 64;  // the plan's shapes: 192 F + 64, F odd
    shapes.push_back({sq, 1 + int(rng() % 150), int(100 + rng() % 40)});
  }
  int planned = 0;
  for (const Shape& sh : shapes) {
    if (sh.sq <= 0) continue;
    const int nm = int((sh.sq + 191) / 192), groups_per_head = int((sh.sq + 63) / 64);
    const int c = ring_tail_plan(sh.sq, sh.num_bh, sh.grid);
    planned += c > 0;
    const RingOrder order{sh.num_bh, nm, c};
    std::vector<int> seen(size_t(sh.num_bh) * groups_per_head, 0);
    int whole = 0, small = 0, last_whole = -1, first_small = -1;
    for (int x = 0; x < nm * sh.num_bh; ++x) {
      int bh, g, groups;
      order.tile(x, bh, g, groups);
      ASSERT_TRUE(bh >= 0 && bh < sh.num_bh && g >= 0 && g < groups_per_head && groups >= 1 && groups <= 3)
          << "sq " << sh.sq << " bh " << sh.num_bh << " x " << x;
      if (c == 0) {
        EXPECT_EQ(bh, x / nm);  // the plain order, as before the plan
        EXPECT_EQ(g, 3 * (nm - 1 - x % nm));
      }
      for (int k = g; k < g + groups && k < groups_per_head; ++k) ++seen[size_t(bh) * groups_per_head + k];
      if (groups == 2) EXPECT_EQ(g % 2, 0) << "a 128-row tile straddles two mask row blocks";
      if (groups == 3 && g + 3 <= groups_per_head) ++whole, last_whole = x;
      else if (first_small < 0) first_small = x, ++small;
      else ++small;
    }
    for (size_t k = 0; k < seen.size(); ++k) ASSERT_EQ(seen[k], 1) << "sq " << sh.sq << " bh " << sh.num_bh << " group " << k;
    if (c > 0) {
      EXPECT_EQ(whole % sh.grid, 0) << "sq " << sh.sq;
      EXPECT_LE(small, sh.grid);
      EXPECT_LT(last_whole, first_small);  // every tile under 192 rows after every whole one
    }
  }
  EXPECT_GT(planned, 10);
}

// d128 block-sparse masks whose lists hold at least 6 key blocks of 128 run on the instantiation with SFU turns
// (plan.h, sfu_turns_by_length), counted from the lists' capacity as the two-ring rule does.
TEST(Sm90Instantiation, D128SfuTurnsChoice) {
  using flash::sm90::sfu_turns_by_length;
  auto params = [](int32_t block_n, int32_t max_kv_blocks) {
    flash::FwdParams p{};
    p.head_dim = 128, p.seqlen_q = p.seqlen_k = 4096, p.window_left = p.window_right = -1;
    p.has_block_mask = true;
    p.block_mask.block_m = 128, p.block_mask.block_n = block_n, p.block_mask.max_kv_blocks = max_kv_blocks;
    return p;
  };
  EXPECT_TRUE(sfu_turns_by_length(params(128, 6)));
  EXPECT_TRUE(sfu_turns_by_length(params(128, 32)));
  EXPECT_FALSE(sfu_turns_by_length(params(128, 5)));  // issue 7's 4k s = .1 (3 blocks) keeps the kernel without
  EXPECT_FALSE(sfu_turns_by_length(params(128, 3)));
  EXPECT_TRUE(sfu_turns_by_length(params(256, 3)));   // 3 mask blocks of 2 key blocks
  EXPECT_FALSE(sfu_turns_by_length(params(256, 2)));
  flash::FwdParams none = params(128, 32);
  none.has_block_mask = false;  // (a problem without a block mask never reaches d128's block-sparse kernels)
  EXPECT_FALSE(sfu_turns_by_length(none));
}

// The tail split (plan.h): for grids and problem sizes around the standard grid's, when tail_split splits, every key
// block of every split tile is covered by exactly one CTA's piece; a CTA has at most two pieces, in consecutive tiles,
// with slots 2c and 2c + 1; cta_of names the owner of every unit, so a tile's merging piece, which looks at CTAs
// cta_of(first unit) .. cta_of(last unit), visits exactly the CTAs with a piece of the tile, and tail_slot finds each
// piece's slot; no tile has more than 9 pieces. When it does not split, nothing is split (whole = every tile).
TEST(Sm90TailSplit, PiecesCoverTheLastRoundOnce) {
  using flash::sm90::TailPlan;
  using flash::sm90::TailSplit;
  int splits = 0;
  for (int grid : {1, 2, 7, 114, 132})
    for (int64_t tiles : {int64_t(grid) + 1, int64_t(grid) * 2 + 3, int64_t(grid) * 5 - 1, int64_t(2048), int64_t(1024),
                          int64_t(2752), int64_t(3072), int64_t(grid) * 3, int64_t(grid) * 3 + grid / 2})
      for (int64_t kb : {1, 2, 5, 8, 9, 13, 16, 64, 103, 128, 205, 1000}) {
        SCOPED_TRACE("grid " + std::to_string(grid) + " tiles " + std::to_string(tiles) + " key blocks " + std::to_string(kb));
        const TailSplit t = flash::sm90::tail_split(tiles, grid, kb, 6);
        if (t.units == 0) {
          EXPECT_EQ(t.whole, tiles);
          continue;
        }
        ++splits;
        const int64_t left = tiles % grid;
        ASSERT_GT(left, 0);
        EXPECT_EQ(t.whole, tiles - left);
        EXPECT_EQ(t.units, left * kb);
        EXPECT_LE((t.units + grid - 1) / grid + 6, kb);  // the round gets shorter by the margin
        std::vector<int> owner(size_t(t.units), -1);
        for (int c = 0; c < grid; ++c) {
          TailPlan plan;
          flash::sm90::plan_tail(t, grid, c, plan);
          EXPECT_EQ(plan.whole_rounds, tiles / grid);
          ASSERT_GE(plan.pieces, 1);
          ASSERT_LE(plan.pieces, 2);
          for (int k = 0; k < plan.pieces; ++k) {
            const flash::sm90::Work& w = plan.piece[k];
            ASSERT_GE(w.x, t.whole);
            ASSERT_LT(w.x, tiles);
            ASSERT_LE(0, w.n_begin);
            ASSERT_LT(w.n_begin, w.n_end);
            ASSERT_LE(w.n_end, kb);
            EXPECT_EQ(w.slot, 2 * c + k);
            EXPECT_EQ(flash::sm90::tail_slot(t, grid, c, w.x - t.whole), w.slot);
            if (k == 1) {
              EXPECT_EQ(w.x, plan.piece[0].x + 1);
              EXPECT_EQ(w.n_begin, 0);
              EXPECT_EQ(plan.piece[0].n_end, kb);
            }
            for (int n = w.n_begin; n < w.n_end; ++n) {
              const int64_t u = int64_t(w.x - t.whole) * kb + n;
              ASSERT_EQ(owner[size_t(u)], -1) << "unit " << u << " run twice";
              owner[size_t(u)] = c;
              EXPECT_EQ(t.cta_of(u, grid), c) << "unit " << u;
            }
          }
        }
        for (int64_t tile = 0; tile < left; ++tile) {
          const int c_first = t.cta_of(tile * kb, grid), c_last = t.cta_of((tile + 1) * kb - 1, grid);
          EXPECT_LE(c_last - c_first + 1, 9);
          for (int64_t n = 0; n < kb; ++n) {
            const int c = owner[size_t(tile * kb + n)];
            ASSERT_NE(c, -1) << "tile " << tile << " block " << n << " never run";
            EXPECT_GE(c, c_first);
            EXPECT_LE(c, c_last);
          }
          // Every CTA in the range has a piece of the tile (a run is at least two blocks: no CTA is skipped).
          for (int c = c_first; c <= c_last; ++c)
            EXPECT_TRUE(std::count(owner.begin() + tile * kb, owner.begin() + (tile + 1) * kb, c) > 0) << "CTA " << c;
        }
      }
  EXPECT_GT(splits, 40);
}

// Where it splits on the H100's 132 SMs, the standard grid (16384 tokens, 2048 / d heads): d128's 2048 tiles leave 68
// for the last round, split from 2k (16 key blocks, runs of 9, margin 6) on, not at 1k (8); on 192-key blocks (8k and
// up) too. d256's 1024 tiles (80-key blocks, margin 10) leave 100: not at 2k (runs of 20 of 26), from 4k. d64 (192-row
// tiles): not at 1k (3072 tiles, runs of 3 of 8), at 16k (2752 tiles, 112 left). Tile counts that are a multiple of the
// grid, or below it, never split.
TEST(Sm90TailSplit, StandardGridChoices) {
  using flash::sm90::tail_split;
  using flash::sm90::tail_split_margin;
  EXPECT_EQ(tail_split_margin(64), 6);
  EXPECT_EQ(tail_split_margin(128), 6);
  EXPECT_EQ(tail_split_margin(256), 10);
  EXPECT_EQ(tail_split(2048, 132, 8, 6).units, 0);
  EXPECT_EQ(tail_split(2048, 132, 16, 6).units, 68 * 16);
  EXPECT_EQ(tail_split(2048, 132, 128, 6).units, 68 * 128);
  EXPECT_EQ(tail_split(2048, 132, 43, 6).units, 68 * 43);  // 8k on 192-key blocks
  EXPECT_EQ(tail_split(1024, 132, 13, 10).units, 0);
  EXPECT_EQ(tail_split(1024, 132, 26, 10).units, 0);
  EXPECT_EQ(tail_split(1024, 132, 52, 10).units, 100 * 52);
  EXPECT_EQ(tail_split(3072, 132, 8, 6).units, 0);
  EXPECT_EQ(tail_split(2752, 132, 128, 6).units, 112 * 128);
  EXPECT_EQ(tail_split(1320, 132, 128, 6).units, 0);
  EXPECT_EQ(tail_split(100, 132, 128, 6).units, 0);
  EXPECT_EQ(tail_split(133, 132, 128, 6).units, 0);  // one tile left: runs of under one block
  EXPECT_EQ(tail_split(140, 132, 1000, 6).units, 0);  // 8 tiles left: runs of 60 blocks, a tile of 17 pieces
  EXPECT_GT(flash::sm90::tail_workspace_bytes(tail_split(2048, 132, 128, 6), 132, 128, 2), 0);
  EXPECT_EQ(flash::sm90::tail_workspace_bytes(tail_split(2048, 132, 8, 6), 132, 128, 2), 0);
}

// d128 problems of >= 8192 keys without a block mask or a left window edge run on the 192-key instantiation.
TEST(Sm90Instantiation, LongKeyRangeChoice) {
  using flash::sm90::use_long_kernel;
  flash::FwdParams p{};
  p.head_dim = 128, p.seqlen_q = 100, p.seqlen_k = 8192, p.window_left = p.window_right = -1;
  EXPECT_TRUE(use_long_kernel(p));
  p.seqlen_k = 8191;  // dense below 8192: the 128-key kernel
  EXPECT_FALSE(use_long_kernel(p));
  p.seqlen_k = 4096;
  EXPECT_FALSE(use_long_kernel(p));
  p.seqlen_k = 8192, p.window_right = 0;  // causal
  EXPECT_TRUE(use_long_kernel(p));
  p.window_left = 4096;  // a left edge: short ranges
  EXPECT_FALSE(use_long_kernel(p));
  p.window_left = -1, p.seqlen_k = 8191;
  EXPECT_FALSE(use_long_kernel(p));
  p.window_right = 2000, p.seqlen_k = 9000;  // a right edge: from 8192 as well
  EXPECT_TRUE(use_long_kernel(p));
  p.window_right = -1, p.seqlen_k = 16384, p.head_dim = 64;
  EXPECT_FALSE(use_long_kernel(p));
  p.head_dim = 128, p.has_block_mask = true;
  EXPECT_FALSE(use_long_kernel(p));
  EXPECT_EQ(flash::sm90::shape_of(flash::sm90::Variant::kD128Long).smem_bytes(), (128 + 2 * 2 * 192) * 128 * 2 + 1024);  // one Q buffer
}

// The tail split runs on instantiations of its own: dense (no window, no block mask) d128 and d256 from 8192 keys.
TEST(Sm90Instantiation, SplitKernelChoice) {
  using flash::sm90::use_split_kernel;
  flash::FwdParams p{};
  p.seqlen_q = 100, p.seqlen_k = 8192, p.window_left = p.window_right = -1;
  for (int d : {128, 256}) {
    p.head_dim = d;
    EXPECT_TRUE(use_split_kernel(p));
    p.seqlen_k = 8191;
    EXPECT_FALSE(use_split_kernel(p));
    p.seqlen_k = 8192, p.window_right = 0;  // causal: the dynamic order, nothing to split
    EXPECT_FALSE(use_split_kernel(p));
    p.window_right = -1, p.window_left = 100;
    EXPECT_FALSE(use_split_kernel(p));
    p.window_left = -1, p.has_block_mask = true;
    EXPECT_FALSE(use_split_kernel(p));
    p.has_block_mask = false;
  }
  p.head_dim = 64;
  EXPECT_FALSE(use_split_kernel(p));
}

// The balanced persistent grid (plan.h, balanced_grid): the same number of rounds on the fewest CTAs,
// from kBalancedMinRounds rounds; fewer rounds, or no more tiles than CTAs, keep the grid.
TEST(Sm90Grid, BalancedGrid) {
  using flash::sm90::balanced_grid;
  EXPECT_EQ(flash::sm90::kBalancedMinRounds, 8);
  EXPECT_EQ(balanced_grid(2048, 132), 128);  // the standard grid's d128 tiles: 16 rounds either way
  EXPECT_EQ(balanced_grid(1024, 132), 128);  // d256's, and d128 4k at batch 2: 8 rounds
  EXPECT_EQ(balanced_grid(1056, 132), 132);  // 8 full rounds: nothing to spread
  EXPECT_EQ(balanced_grid(1057, 132), 118);  // 9 rounds
  EXPECT_EQ(balanced_grid(1000, 132), 125);  // 8 rounds, the last 76 tiles
  EXPECT_EQ(balanced_grid(900, 132), 132);   // 7 rounds: fewer than 8, kept
  EXPECT_EQ(balanced_grid(100, 132), 132);   // one round (persistent_grid makes it 100)
  EXPECT_EQ(balanced_grid(50, 6), 6);        // 9 rounds on 6 CTAs (LIBFLASH_MAX_CTAS): none to spare
  EXPECT_EQ(balanced_grid(48 * 9, 50), 48);  // 9 rounds of 48 on 50
  EXPECT_EQ(balanced_grid(2048, 0), 0);
  for (int64_t tiles : {1057, 2048, 3001, 100000, 1 << 20})
    for (int grid : {6, 100, 132}) {
      const int g = balanced_grid(tiles, grid);
      const int64_t rounds = (tiles + grid - 1) / grid;
      ASSERT_LE(g, grid);
      EXPECT_EQ((tiles + g - 1) / g, rounds) << tiles << " tiles on " << grid;  // the same rounds
      if (rounds >= 8) EXPECT_LT(int64_t(g - 1) * rounds, tiles) << tiles << " tiles on " << grid;  // the fewest CTAs
    }
}

// The PDL pair over the static order (plan.h, pair_split): dense d128 below kSplitMinKeys, planned on
// the 128-key split instantiation's blocks with the pair's margin (runs at least 12 blocks shorter than a tile). On the
// standard grid (132 SMs, 16384 tokens, 16 heads; 2048 tiles, 68 left): 4k (runs of 17 of 32 blocks), not 1k or 2k (5
// of 8, 9 of 16). The secondary's plan (pieces_only) has no whole rounds and the same pieces as the primary's would.
TEST(Sm90TailSplit, PairChoice) {
  using flash::sm90::pair_split;
  auto params = [](int d, int64_t n) {
    flash::FwdParams p{};
    p.head_dim = d, p.seqlen_q = p.seqlen_k = int32_t(n), p.batch = int32_t(16384 / n), p.heads_q = 2048 / d;
    p.window_left = p.window_right = -1;
    return p;
  };
  EXPECT_EQ(flash::sm90::kPairMargin, 12);
  EXPECT_EQ(pair_split(params(128, 1024), 132).units, 0);
  EXPECT_EQ(pair_split(params(128, 2048), 132).units, 0);
  EXPECT_EQ(pair_split(params(128, 4096), 132).units, 68 * 32);
  EXPECT_EQ(pair_split(params(128, 4096), 132).whole, 2048 - 68);
  EXPECT_EQ(pair_split(params(128, 8192), 132).units, 0);  // the 192-key split instantiation's own
  EXPECT_EQ(pair_split(params(256, 2048), 132).units, 0);
  EXPECT_EQ(pair_split(params(256, 4096), 132).units, 0);
  EXPECT_EQ(pair_split(params(64, 4096), 132).units, 0);
  EXPECT_EQ(pair_split(params(128, 4096), 128).units, 0);  // 2048 tiles on 128 CTAs: no last round
  {
    flash::FwdParams p = params(128, 4096);
    p.window_right = 0;  // causal: the dynamic order
    EXPECT_EQ(pair_split(p, 132).units, 0);
    p.window_right = -1, p.window_left = 100;
    EXPECT_EQ(pair_split(p, 132).units, 0);
    p.window_left = -1, p.has_block_mask = true;
    EXPECT_EQ(pair_split(p, 132).units, 0);
  }
  for (int grid : {2, 6, 132}) {
    flash::sm90::TailSplit t = pair_split(params(128, 4096), grid);
    if (t.units == 0) continue;
    flash::sm90::TailSplit s = t;
    s.pieces_only = true;
    for (int c = 0; c < grid; ++c) {
      flash::sm90::TailPlan a, b;
      flash::sm90::plan_tail(t, grid, c, a);
      flash::sm90::plan_tail(s, grid, c, b);
      EXPECT_EQ(a.whole_rounds, 2048 / grid);
      EXPECT_GE(a.pieces, 1);
      EXPECT_EQ(b.whole_rounds, 0);
      ASSERT_EQ(a.pieces, b.pieces);
      for (int k = 0; k < a.pieces; ++k) {
        EXPECT_EQ(a.piece[k].x, b.piece[k].x);
        EXPECT_EQ(a.piece[k].n_begin, b.piece[k].n_begin);
        EXPECT_EQ(a.piece[k].n_end, b.piece[k].n_end);
        EXPECT_EQ(a.piece[k].slot, b.piece[k].slot);
      }
    }
  }
}

}  // namespace

// ---- plan(): the one decision the support check, the workspace query and the launch take ------------------------------
namespace {

using flash::sm90::Launch;
using flash::sm90::Variant;

// A contiguous bf16 [batch, seqlen, heads, d] problem (fake, 16-byte aligned pointers: plan() never dereferences them).
flash::FwdParams problem(int d, int batch, int heads, int64_t sq, int64_t sk, int32_t left = -1, int32_t right = -1) {
  flash::FwdParams p{};
  p.dtype = flash::DType::BF16;
  p.head_dim = d, p.batch = batch, p.heads_q = heads, p.heads_kv = heads, p.head_ratio = 1;
  p.seqlen_q = int32_t(sq), p.seqlen_k = int32_t(sk), p.window_left = left, p.window_right = right;
  p.diag_offset = sk - sq;
  p.scale = 0.125f;
  auto* base = reinterpret_cast<void*>(uintptr_t(1) << 20);
  p.q = p.k = p.v = base;
  p.o = base;
  p.q_row_stride = p.k_row_stride = p.v_row_stride = p.o_row_stride = int64_t(heads) * d;
  p.q_head_stride = p.k_head_stride = p.v_head_stride = p.o_head_stride = d;
  p.q_batch_stride = p.o_batch_stride = sq * heads * d;
  p.k_batch_stride = p.v_batch_stride = sk * heads * d;
  return p;
}
const flash::sm90::Device kH200{132, 232448, 60 << 20};

std::vector<Variant> variants(const flash::sm90::FwdPlan& pl) {
  std::vector<Variant> v;
  for (int i = 0; i < pl.launches; ++i) v.push_back(pl.launch[i].variant);
  return v;
}

}  // namespace

TEST(Sm90Plan, StandardGridVariants) {
  using flash::sm90::plan;
  // d64 dense 1k: whole 192-row tiles, then the rows they leave behind them (PDL).
  auto pl = plan(problem(64, 16, 32, 1024, 1024), kH200);
  ASSERT_TRUE(pl.ok()) << pl.why;
  EXPECT_EQ(variants(pl), (std::vector<Variant>{Variant::kD64, Variant::kD64Rows}));
  EXPECT_EQ(pl.launch[0].pdl, Launch::kPrimary);
  EXPECT_EQ(pl.launch[1].pdl, Launch::kSecondary);
  EXPECT_EQ(pl.launch[0].row_end, 768);
  EXPECT_EQ(pl.launch[1].row_begin, 768);
  EXPECT_EQ(pl.workspace, 0u);
  // d64 causal 1k: the first 64 rows of every head on the top-rows kernel; the rest from the counter.
  pl = plan(problem(64, 16, 32, 1024, 1024, -1, 0), kH200);
  EXPECT_EQ(variants(pl), (std::vector<Variant>{Variant::kD64, Variant::kD64TopRows}));
  EXPECT_EQ(pl.launch[0].row_begin, 64);
  EXPECT_TRUE(pl.launch[0].dynamic);
  EXPECT_EQ(pl.workspace, flash::sm90::kTileCounterBytes);
  // d128 dense 4k: the whole rounds, then the last round's pieces behind them; their workspace.
  pl = plan(problem(128, 4, 16, 4096, 4096), kH200);
  EXPECT_EQ(variants(pl), (std::vector<Variant>{Variant::kD128, Variant::kD128Pieces}));
  EXPECT_EQ(pl.launch[0].tail_role, Launch::kRounds);
  EXPECT_EQ(pl.launch[1].tail_role, Launch::kPieces);
  EXPECT_EQ(pl.launch[0].num_tiles, pl.launch[0].tail.whole);
  EXPECT_EQ(pl.launch[0].grid, 132);
  EXPECT_EQ(pl.workspace, size_t(flash::sm90::tail_workspace_bytes(pl.launch[1].tail, 132, 128, 2)));
  // d128 16k dense: 192-key blocks, the last round split in one kernel; causal: without the split.
  pl = plan(problem(128, 1, 16, 16384, 16384), kH200);
  EXPECT_EQ(variants(pl), (std::vector<Variant>{Variant::kD128LongSplit}));
  pl = plan(problem(128, 1, 16, 16384, 16384, -1, 0), kH200);
  EXPECT_EQ(variants(pl), (std::vector<Variant>{Variant::kD128Long}));
  // d256: dense, split from 8k, causal upwards.
  EXPECT_EQ(variants(plan(problem(256, 16, 8, 1024, 1024), kH200)), (std::vector<Variant>{Variant::kD256}));
  EXPECT_EQ(variants(plan(problem(256, 2, 8, 8192, 8192), kH200)), (std::vector<Variant>{Variant::kD256Split}));
  EXPECT_EQ(variants(plan(problem(256, 16, 8, 1024, 1024, -1, 0), kH200)), (std::vector<Variant>{Variant::kD256Up}));
  // Dense problems of >= kBalancedMinRounds rounds with no tail of their own: the same rounds on fewer CTAs.
  pl = plan(problem(256, 16, 8, 1024, 1024), kH200);
  EXPECT_EQ(pl.launch[0].grid, flash::sm90::balanced_grid(pl.launch[0].num_tiles, 132));
}

TEST(Sm90Plan, MasksAndRefusals) {
  using flash::sm90::plan;
  flash::FwdParams p = problem(64, 2, 32, 4096, 4096);
  p.has_block_mask = true;
  p.block_mask.block_m = 128, p.block_mask.block_n = 128, p.block_mask.max_kv_blocks = 4;
  EXPECT_EQ(variants(plan(p, kH200)), (std::vector<Variant>{Variant::kD64TwoRings}));
  p.block_mask.max_kv_blocks = 2;
  EXPECT_EQ(variants(plan(p, kH200)), (std::vector<Variant>{Variant::kD64Listed}));
  p.head_dim = 128;
  p.block_mask.max_kv_blocks = 8;
  EXPECT_EQ(variants(plan(p, kH200)), (std::vector<Variant>{Variant::kD128SparseTurns}));
  p.block_mask.block_n = 64;  // not a multiple of the 128-key blocks
  EXPECT_FALSE(plan(p, kH200).ok());
  // d64 windows of both edges and <= kListedMaxWindow keys: the block-sparse kernel's 128-row tiles.
  EXPECT_EQ(variants(plan(problem(64, 1, 16, 4096, 4096, 256, 0), kH200)), (std::vector<Variant>{Variant::kD64Listed}));
  // Refused with a reason (AUTO then runs sm80): fp32, head dims other than 64/128/256, negative scales, misaligned
  // pointers, too little shared memory.
  flash::FwdParams q = problem(128, 1, 1, 100, 100);
  q.dtype = flash::DType::FP32;
  EXPECT_NE(plan(q, kH200).why.find("fp16 and bf16"), std::string::npos);
  EXPECT_NE(plan(problem(96, 1, 1, 100, 100), kH200).why.find("head_dim 96"), std::string::npos);
  q = problem(128, 1, 1, 100, 100);
  q.scale = -1.f;
  EXPECT_FALSE(plan(q, kH200).ok());
  q = problem(128, 1, 1, 100, 100);
  q.k = reinterpret_cast<void*>((uintptr_t(1) << 20) + 8);
  EXPECT_NE(plan(q, kH200).why.find("TMA"), std::string::npos);
  EXPECT_FALSE(plan(problem(128, 1, 1, 100, 100), flash::sm90::Device{132, 100 * 1024, 50 << 20}).ok());
  // An empty problem: supported, nothing to launch.
  const auto empty = plan(problem(128, 0, 1, 100, 100), kH200);
  EXPECT_TRUE(empty.ok());
  EXPECT_EQ(empty.launches, 0);
}

// Every launch the plan makes fits its device and its tiles: the grid is at most the SM count and the tile count, the
// shared memory at most the opt-in, the split's workspace within the plan's.
TEST(Sm90Plan, LaunchesFitTheDevice) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 2000; ++trial) {
    const int d = std::array<int, 3>{64, 128, 256}[rng() % 3];
    const int64_t sq = 1 + rng() % 20000, sk = 1 + rng() % 20000;
    const int32_t left = rng() % 3 == 0 ? int32_t(rng() % 1000) : -1, right = rng() % 2 ? int32_t(rng() % 300) : -1;
    const flash::FwdParams p = problem(d, 1 + rng() % 4, 1 + rng() % 40, sq, sk, left, right);
    const flash::sm90::Device dev{int(1 + rng() % 132), 232448, 50 << 20};
    const auto pl = flash::sm90::plan(p, dev);
    ASSERT_TRUE(pl.ok()) << pl.why;
    ASSERT_GE(pl.launches, 1);
    for (int i = 0; i < pl.launches; ++i) {
      const Launch& l = pl.launch[i];
      SCOPED_TRACE(::testing::Message() << "d" << d << " " << sq << "x" << sk << " window " << left << "," << right
                                        << " launch " << i << " " << flash::sm90::variant_name(l.variant));
      EXPECT_LT(l.row_begin, l.row_end);
      EXPECT_LE(l.row_end, p.seqlen_q);
      if (l.variant == Variant::kD64TopRows) continue;
      EXPECT_GE(l.grid, 1);
      EXPECT_LE(l.grid, dev.sms);
      EXPECT_LE(l.grid, int64_t(l.num_m_blocks) * p.heads_q * p.batch);
      EXPECT_LE(l.smem_bytes, dev.smem_optin);
      if (l.tail_role != Launch::kNoTail) {
        const auto s = flash::sm90::shape_of(l.variant);
        EXPECT_GT(l.tail.units, 0);
        EXPECT_LE(size_t(flash::sm90::tail_workspace_bytes(l.tail, l.grid, s.head_dim, s.consumers)), pl.workspace);
      }
      if (l.dynamic) EXPECT_GE(pl.workspace, flash::sm90::kTileCounterBytes);
    }
  }
}
