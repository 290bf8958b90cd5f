// cli/src/mask.hpp -- the masks fa-bench can ask for, and the exact count of the (query, key) pairs they
// leave visible.
//
// The visibility rule is flash.h's, restated here so the FLOP count describes the mask the library
// actually applied:
//   diag(i) = i + (seqlen_k - seqlen_q)  for FLASH_ALIGN_BOTTOM_RIGHT,  i  for FLASH_ALIGN_TOP_LEFT
//   key j is visible to query i iff  0 <= j < seqlen_k
//                                 and (window_left  < 0 or j >= diag(i) - window_left)
//                                 and (window_right < 0 or j <= diag(i) + window_right)
//                                 and (no block mask, or key block j / block_n is listed for query block
//                                      i / block_m)
// causal is the window (window_left, 0). For one row the window is an interval and a block mask a union
// of intervals, so a row is counted in O(listed blocks), never O(seqlen_k).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "flash.h"

namespace fabench {

// A mask as the user wrote it: terms joined by '+', e.g. "causal", "window:256,0",
// "causal-tl+block-sparse:0.25:128", "block-sparse-file:pattern.json", "none".
struct MaskSpec {
  bool causal = false;
  int32_t alignment = FLASH_ALIGN_BOTTOM_RIGHT;
  int32_t window_left = -1;   // -1: unbounded
  int32_t window_right = -1;  // -1: unbounded
  enum class Block { kNone, kRandom, kFile } block = Block::kNone;
  double density = 1.0;       // kRandom: fraction of (query block, key block) pairs listed
  int32_t block_size = 128;   // block_m = block_n
  std::string file;           // kFile

  // The canonical spelling, used as the `mask` axis in results ("none", "causal", "causal-tl",
  // "window:128,0", "block-sparse:0.5:128", ...). Two specs with the same label apply the same mask
  // (for random block masks: with the same --seed).
  std::string label() const;
  // The window the library applies (causal caps window_right at 0).
  int32_t effective_window_right() const { return causal ? 0 : window_right; }
};

// Throws std::invalid_argument with a message naming the bad term.
MaskSpec parse_mask_spec(const std::string& text);
// Several alternatives separated by ';' ("none;causal"), each parsed by parse_mask_spec.
std::vector<MaskSpec> parse_mask_list(const std::string& text);

// The compact block-sparse form (flash_block_mask), one pattern broadcast over batch and heads.
struct BlockPattern {
  int32_t block_m = 128, block_n = 128;
  int32_t num_q_blocks = 0, max_kv_blocks = 0;
  std::vector<int32_t> kv_num_blocks;  // [num_q_blocks]
  std::vector<int32_t> kv_indices;     // [num_q_blocks, max_kv_blocks]
  int64_t listed_blocks() const;
  // Listed blocks over all (query block, key block) pairs.
  double block_density(int64_t seqlen_k) const;
};

// round(density * query_blocks * key_blocks) distinct (query block, key block) pairs, so the map's density is the one
// asked for to the nearest block: every query block lists floor or ceil of the mean (at least one key block when
// density > 0), the longer rows and each row's key blocks drawn with a 64-bit Mersenne Twister seeded from `seed` and
// the shape, so a run is reproducible on any platform. Throws std::invalid_argument for a density outside [0, 1] or a block size other than 64/128.
BlockPattern make_random_block_pattern(int64_t seqlen_q, int64_t seqlen_k, int32_t block, double density,
                                       uint64_t seed);
// A JSON file {"block_m": 128, "block_n": 128, "kv_blocks": [[0, 3], [1], ...]} with one list of key blocks
// per query block. Throws std::runtime_error on an unreadable or inconsistent file.
BlockPattern load_block_pattern_file(const std::string& path, int64_t seqlen_q, int64_t seqlen_k);
// The pattern the spec asks for at this shape; false (and *out untouched) when the spec has no block mask.
bool make_block_pattern(const MaskSpec& spec, int64_t seqlen_q, int64_t seqlen_k, uint64_t seed, BlockPattern* out);

// The mask of one (batch, head) at a concrete shape.
class MaskModel {
 public:
  MaskModel(const MaskSpec& spec, int64_t seqlen_q, int64_t seqlen_k, const BlockPattern* blocks);
  bool visible(int64_t i, int64_t j) const;
  // Keys visible to query row i.
  int64_t row_count(int64_t i) const;
  // Visible (query, key) pairs of one (batch, head).
  int64_t total_pairs() const;
  // Calls f(begin, end) for each run [begin, end) of visible keys of row i (one per listed block), in
  // increasing order.
  template <class F>
  void for_each_run(int64_t i, F&& f) const;

  int64_t seqlen_q() const { return sq_; }
  int64_t seqlen_k() const { return sk_; }

 private:
  void window(int64_t i, int64_t* lo, int64_t* hi) const;
  int64_t sq_, sk_, window_left_, window_right_, diag_offset_;
  const BlockPattern* blocks_;
  std::vector<int32_t> sorted_indices_;  // kv_indices with each query block's list sorted
};

template <class F>
void MaskModel::for_each_run(int64_t i, F&& f) const {
  int64_t lo, hi;
  window(i, &lo, &hi);
  if (lo >= hi) return;
  if (blocks_ == nullptr) {
    f(lo, hi);
    return;
  }
  const int64_t qb = i / blocks_->block_m;
  const int32_t n = blocks_->kv_num_blocks[qb];
  const int32_t* list = sorted_indices_.data() + qb * blocks_->max_kv_blocks;
  for (int32_t t = 0; t < n; ++t) {
    const int64_t b0 = int64_t{list[t]} * blocks_->block_n, b1 = b0 + blocks_->block_n;
    const int64_t a = b0 > lo ? b0 : lo, z = b1 < hi ? b1 : hi;
    if (a < z) f(a, z);
  }
}

// FLOPs of one forward: 4 * head_dim per visible pair (2d for the row of Q K^T, 2d for P V), times
// batch * heads_q. The field's convention (FlashAttention papers): backward = 2.5x, fwd+bwd = 3.5x forward.
double forward_flops(int64_t visible_pairs_per_head, int64_t batch, int64_t heads_q, int64_t head_dim);

}  // namespace fabench
