// FLOP counting: the per-row interval counts against a brute-force (i, j) loop written from flash.h's
// definition, for causal with seqlen_q != seqlen_k in both alignments, windows and block masks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "bench.hpp"
#include "mask.hpp"

namespace fabench {
namespace {

// flash.h, restated independently of MaskModel.
int64_t brute_force(const MaskSpec& m, int64_t sq, int64_t sk, const BlockPattern* bp) {
  const int64_t offset = m.alignment == FLASH_ALIGN_BOTTOM_RIGHT ? sk - sq : 0;
  const int64_t wl = m.window_left, wr = m.causal ? 0 : m.window_right;
  int64_t n = 0;
  for (int64_t i = 0; i < sq; ++i)
    for (int64_t j = 0; j < sk; ++j) {
      if (wl >= 0 && j < i + offset - wl) continue;
      if (wr >= 0 && j > i + offset + wr) continue;
      if (bp) {
        bool listed = false;
        const int64_t qb = i / bp->block_m;
        for (int32_t t = 0; t < bp->kv_num_blocks[qb]; ++t)
          listed |= bp->kv_indices[qb * bp->max_kv_blocks + t] == j / bp->block_n;
        if (!listed) continue;
      }
      ++n;
    }
  return n;
}

int64_t count(const std::string& spec, int64_t sq, int64_t sk, const BlockPattern* bp = nullptr) {
  return MaskModel(parse_mask_spec(spec), sq, sk, bp).total_pairs();
}

TEST(Flops, DenseAndClosedForms) {
  EXPECT_EQ(count("none", 100, 77), 100 * 77);
  EXPECT_EQ(count("causal", 128, 128), 128 * 129 / 2);
  EXPECT_EQ(count("causal-tl", 128, 128), 128 * 129 / 2);
  // Bottom-right, sq < sk: row i sees i + (sk - sq) + 1 keys.
  EXPECT_EQ(count("causal", 100, 300), 100 * 201 + 100 * 99 / 2);
  // Top-left, sq < sk: row i sees i + 1 keys.
  EXPECT_EQ(count("causal-tl", 100, 300), 100 * 101 / 2);
  // Bottom-right, sq > sk: the first sq - sk rows see nothing.
  EXPECT_EQ(count("causal", 300, 100), 100 * 101 / 2);
  // Top-left, sq > sk: rows past sk see all sk keys.
  EXPECT_EQ(count("causal-tl", 300, 100), 100 * 101 / 2 + 200 * 100);
  EXPECT_DOUBLE_EQ(forward_flops(128 * 129 / 2, 2, 3, 64), 4.0 * 64 * (128 * 129 / 2) * 2 * 3);
}

TEST(Flops, CausalIsNotABlanketHalf) {
  const int64_t n = count("causal", 1000, 4000);
  EXPECT_NE(n, 1000 * 4000 / 2);
  EXPECT_EQ(n, brute_force(parse_mask_spec("causal"), 1000, 4000, nullptr));
}

TEST(Flops, MatchesBruteForceOverOddShapesAndMasks) {
  const char* specs[] = {"none",         "causal",       "causal-tl",      "window:0,0",     "window:5,3",
                         "window:-1,7",  "window:9,-1",  "window-tl:4,11", "causal+window:13,-1",
                         "causal-tl+window-tl:6,2"};
  const int64_t shapes[][2] = {{1, 1}, {1, 37}, {37, 1}, {64, 64}, {65, 129}, {129, 65}, {200, 333}, {333, 200}};
  for (const char* s : specs)
    for (const auto& sh : shapes) {
      const MaskSpec m = parse_mask_spec(s);
      EXPECT_EQ(MaskModel(m, sh[0], sh[1], nullptr).total_pairs(), brute_force(m, sh[0], sh[1], nullptr))
          << s << " sq=" << sh[0] << " sk=" << sh[1];
    }
}

TEST(Flops, BlockMasksMatchBruteForce) {
  const char* specs[] = {"block-sparse:0.5:64", "block-sparse:0.3:128", "causal+block-sparse:0.5:64",
                         "causal-tl+block-sparse:0.7:64", "window:100,20+block-sparse:0.6:64", "block-sparse:0:64",
                         "block-sparse:1:128"};
  const int64_t shapes[][2] = {{64, 64}, {100, 300}, {300, 100}, {257, 513}, {513, 257}};
  for (const char* s : specs)
    for (const auto& sh : shapes)
      for (uint64_t seed : {1ull, 2ull}) {
        const MaskSpec m = parse_mask_spec(s);
        BlockPattern bp;
        ASSERT_TRUE(make_block_pattern(m, sh[0], sh[1], seed, &bp));
        const MaskModel model(m, sh[0], sh[1], &bp);
        EXPECT_EQ(model.total_pairs(), brute_force(m, sh[0], sh[1], &bp)) << s << " sq=" << sh[0] << " sk=" << sh[1];
        for (int64_t i = 0; i < sh[0]; i += 37)
          for (int64_t j = 0; j < sh[1]; j += 11) {
            int64_t in_run = 0;
            model.for_each_run(i, [&](int64_t a, int64_t z) { in_run += a <= j && j < z; });
            EXPECT_EQ(in_run == 1, model.visible(i, j));
          }
      }
}

TEST(Flops, RandomBlockPatternsAreReproducibleAndExact) {
  const BlockPattern a = make_random_block_pattern(1000, 2000, 128, 0.25, 42);
  const BlockPattern b = make_random_block_pattern(1000, 2000, 128, 0.25, 42);
  const BlockPattern c = make_random_block_pattern(1000, 2000, 128, 0.25, 43);
  EXPECT_EQ(a.kv_indices, b.kv_indices);
  EXPECT_NE(a.kv_indices, c.kv_indices);
  EXPECT_EQ(a.num_q_blocks, 8);
  EXPECT_EQ(a.max_kv_blocks, 4);  // round(0.25 * 16)
  EXPECT_DOUBLE_EQ(a.block_density(2000), 0.25);
  // A density that is not a whole number of blocks a row: the map still has round(density * cells) blocks, every row
  // floor or ceil of the mean, each row's key blocks distinct and sorted (4k at 0.1: 102 of 32 x 32, not 3 x 32).
  for (const auto& [n, dens] : std::vector<std::pair<int64_t, double>>{{4096, 0.1}, {8192, 0.1}, {16384, 0.1}, {1000, 0.3}, {4096, 0.01}}) {
    const BlockPattern r = make_random_block_pattern(n, n, 128, dens, 7);
    const int64_t cells = int64_t{r.num_q_blocks} * r.num_q_blocks;
    const int64_t want = std::max<int64_t>(r.num_q_blocks, std::llround(dens * double(cells)));
    EXPECT_EQ(r.listed_blocks(), want) << n << " " << dens;
    EXPECT_NEAR(r.block_density(n), dens, std::max(0.5 / double(cells), double(r.num_q_blocks) / double(cells)));
    const int32_t lo = *std::min_element(r.kv_num_blocks.begin(), r.kv_num_blocks.end());
    const int32_t hi = *std::max_element(r.kv_num_blocks.begin(), r.kv_num_blocks.end());
    EXPECT_GE(lo, 1);
    EXPECT_LE(hi - lo, 1);
    EXPECT_EQ(r.max_kv_blocks, hi);
    for (int32_t qb = 0; qb < r.num_q_blocks; ++qb)
      for (int32_t t = 1; t < r.kv_num_blocks[qb]; ++t)
        EXPECT_LT(r.kv_indices[size_t(qb) * r.max_kv_blocks + t - 1], r.kv_indices[size_t(qb) * r.max_kv_blocks + t]);
  }
  EXPECT_EQ(make_random_block_pattern(4096, 4096, 128, 0.1, 7).listed_blocks(), 102);
  // Dense pattern = no mask at all.
  const BlockPattern full = make_random_block_pattern(300, 500, 64, 1.0, 1);
  EXPECT_EQ(MaskModel(parse_mask_spec("none"), 300, 500, &full).total_pairs(), 300 * 500);
}

TEST(Flops, IoModel) {
  Case c{"sm90", "fwd", FLASH_DTYPE_BF16, 1, 1, 1, 1024, 1024, 64, MaskSpec{}};
  const IoModel m = io_model(c, 228 * 1024, 1.0);
  EXPECT_DOUBLE_EQ(m.naive_bytes, 2.0 * (4.0 * 1024 * 64 + 4.0 * 1024 * 1024));
  EXPECT_EQ(m.block_c, (228 * 1024 + 4 * 64 * 2 - 1) / (4 * 64 * 2));
  // Flash moves less than naive at long sequences and grows as N^2 d^2 / M.
  c.seqlen_q = c.seqlen_k = 16384;
  const IoModel big = io_model(c, 228 * 1024, 1.0);
  EXPECT_LT(big.flash_bytes, big.naive_bytes);
  const IoModel half_m = io_model(c, 114 * 1024, 1.0);
  EXPECT_NEAR(half_m.flash_bytes / big.flash_bytes, 2.0, 0.1);
}

// --varlen: the pairs of each sequence at its own length, under its own mask (its own diagonal), summed; the FLOPs
// 4 d x pairs x heads_q (no batch factor: the sequences are the batch).
TEST(Flops, VarlenCountsEachSequenceAtItsLength) {
  for (const char* spec : {"none", "causal", "causal-tl", "window:5,3", "window-tl:4,0"}) {
    Case c;
    c.mask = parse_mask_spec(spec);
    c.varlen = {100, 0, 37, 1, 64, 129};
    c.batch = 6, c.seqlen_q = c.seqlen_k = 129, c.heads_q = 4, c.heads_kv = 2, c.head_dim = 32;
    int64_t want = 0;
    for (int64_t L : c.varlen) want += brute_force(c.mask, L, L, nullptr);
    EXPECT_EQ(varlen_visible_pairs(c), want) << spec;
    // Not the dense count at the longest length times the sequences.
    EXPECT_NE(varlen_visible_pairs(c), 6 * MaskModel(c.mask, 129, 129, nullptr).total_pairs()) << spec;
  }
}

}  // namespace
}  // namespace fabench
