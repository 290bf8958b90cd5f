// libflash/cpu/block_range.h -- which key blocks a query block visits, and which of those need
// element-wise masking. The CPU twin of the block skipping the GPU kernels do: blocks outside the
// window (or not listed by the block mask) are never loaded; blocks wholly inside it skip the mask test.
#pragma once
#include <algorithm>
#include <cstdint>

#include "../params.h"

namespace flash::cpu {

class KeyBlocks {
 public:
  KeyBlocks(const FwdParams& p, int64_t b, int64_t h, int64_t q_begin, int64_t q_end, int64_t q_block, int block_n)
      : p_(p), q_begin_(q_begin), q_end_(q_end), block_n_(block_n) {
    // Keys visible to at least one row of [q_begin, q_end): [lo_, hi_).
    lo_ = p.window_left >= 0 ? std::max<int64_t>(0, q_begin + p.diag_offset - p.window_left) : 0;
    hi_ = p.window_right >= 0 ? std::min<int64_t>(p.seqlen_k, q_end - 1 + p.diag_offset + p.window_right + 1)
                              : p.seqlen_k;
    if (p.has_block_mask) {
      const BlockMaskParams& m = p.block_mask;
      // An empty mask (max_kv_blocks 0, every count 0 by validation) may leave kv_indices NULL, and offsetting NULL
      // is undefined behaviour: no list is formed then.
      if (m.max_kv_blocks > 0) {
        count_ = m.kv_num_blocks[b * m.num_batch_stride + h * m.num_head_stride + q_block * m.num_qblock_stride];
        list_ = m.kv_indices + b * m.idx_batch_stride + h * m.idx_head_stride + q_block * m.idx_qblock_stride;
        list_stride_ = m.idx_stride;
      }
    } else {
      cursor_ = lo_ / block_n;
    }
  }

  // Next key block to visit; false when done.
  bool next(int64_t* kb) {
    if (lo_ >= hi_) return false;
    if (!p_.has_block_mask) {
      if (cursor_ * block_n_ >= hi_) return false;
      *kb = cursor_++;
      return true;
    }
    const int64_t n_blocks = (p_.seqlen_k + block_n_ - 1) / block_n_;
    while (cursor_ < count_) {
      const int64_t j = list_[cursor_++ * list_stride_];
      if (j < 0 || j >= n_blocks) continue;                              // out of range: skipped
      if (j * block_n_ >= hi_ || (j + 1) * block_n_ <= lo_) continue;   // outside the window
      *kb = j;
      return true;
    }
    return false;
  }

  // True if some (row, key) of this tile is masked by the window, so S needs the element test.
  bool partial(int64_t kb) const {
    const int64_t k_begin = kb * block_n_, k_last = std::min<int64_t>(k_begin + block_n_, p_.seqlen_k) - 1;
    if (p_.window_left >= 0 && k_begin < q_end_ - 1 + p_.diag_offset - p_.window_left) return true;
    if (p_.window_right >= 0 && k_last > q_begin_ + p_.diag_offset + p_.window_right) return true;
    return false;
  }

 private:
  const FwdParams& p_;
  int64_t q_begin_, q_end_;
  int block_n_;
  int64_t lo_ = 0, hi_ = 0, cursor_ = 0;
  int64_t count_ = 0;
  const int32_t* list_ = nullptr;
  int64_t list_stride_ = 0;
};

}  // namespace flash::cpu

// ---- The backward's view: one key block against each query block -----------------------------------
namespace flash::cpu {

// True if some (row, key) of rows [q_begin, q_end) x keys [k_begin, k_end) is inside the window (the
// window part of the mask only). The keys visible to a run of rows are one interval, as in KeyBlocks.
inline bool tile_in_window(const FwdParams& p, int64_t q_begin, int64_t q_end, int64_t k_begin, int64_t k_end) {
  if (p.window_left >= 0 && k_end <= q_begin + p.diag_offset - p.window_left) return false;
  if (p.window_right >= 0 && k_begin > q_end - 1 + p.diag_offset + p.window_right) return false;
  return true;
}

// True if some (row, key) of the tile is masked by the window, so it needs the element test.
inline bool tile_partial(const FwdParams& p, int64_t q_begin, int64_t q_end, int64_t k_begin, int64_t k_end) {
  if (p.window_left >= 0 && k_begin < q_end - 1 + p.diag_offset - p.window_left) return true;
  if (p.window_right >= 0 && k_end - 1 > q_begin + p.diag_offset + p.window_right) return true;
  return false;
}

// True if the block mask (if any) lists key block kb for (batch b, query head h, query block qb).
inline bool block_listed(const FwdParams& p, int64_t b, int64_t h, int64_t qb, int64_t kb) {
  if (!p.has_block_mask) return true;
  const BlockMaskParams& m = p.block_mask;
  if (m.max_kv_blocks == 0) return false;  // an empty mask lists nothing (and its kv_indices may be NULL: not offset)
  const int32_t n = m.kv_num_blocks[b * m.num_batch_stride + h * m.num_head_stride + qb * m.num_qblock_stride];
  const int32_t* list = m.kv_indices + b * m.idx_batch_stride + h * m.idx_head_stride + qb * m.idx_qblock_stride;
  for (int32_t t = 0; t < n; ++t)
    if (list[t * m.idx_stride] == kb) return true;
  return false;
}

}  // namespace flash::cpu
