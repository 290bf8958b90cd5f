// libflash/cuda/sm80/fwd/blocks.cuh -- which key blocks a query block of the sm80 forward visits: the window's
// range (KeyRange), or the blocks a block-sparse mask lists, walked from shared-memory bitmaps (SparseBlocks).
#pragma once
#include <cstdint>

#include "../../../params.h"

namespace flash::sm80 {

// ---- Which key blocks a query block visits (the GPU twin of cpu/block_range.h) -----------------------
// The window part: keys visible to at least one row of the query block are [lo, hi), i.e. key tiles
// [n_lo, n_hi]. Without a block mask every tile of that range is visited, last first (the diagonal tile,
// the one that needs the element mask, comes first).
template <int kBlockN>
struct KeyRange {
  int lo, hi, n_lo, n_hi;

  // seqlen_k and diag_offset: the sequence's (a varlen call's own per sequence; a dense call's p.seqlen_k, p.diag_offset).
  __device__ KeyRange(const FwdParams& p, int seqlen_k, int64_t diag_offset, int q_begin, int q_end) {
    const int64_t lo64 = p.window_left >= 0 ? q_begin + diag_offset - p.window_left : 0;
    const int64_t hi64 = p.window_right >= 0 ? q_end - 1 + diag_offset + p.window_right + 1 : seqlen_k;
    lo = int(max(lo64, int64_t(0)));
    hi = int(max(min(hi64, int64_t(seqlen_k)), int64_t(0)));
    n_lo = lo / kBlockN;
    n_hi = lo < hi ? (hi + kBlockN - 1) / kBlockN - 1 : -1;
  }

  // Does some (row, key) of this tile fall outside the sequence or the window? Only those pay the
  // element test; blocks wholly inside take the unmasked path.
  __device__ __forceinline__ bool needs_mask(const FwdParams& p, int seqlen_k, int64_t diag_offset, int n, int q_first,
                                             int q_last) const {
    const int64_t k_begin = int64_t(n) * kBlockN, k_last = k_begin + kBlockN - 1;
    if (k_last >= seqlen_k) return true;
    if (p.window_left >= 0 && k_begin < q_last + diag_offset - p.window_left) return true;
    if (p.window_right >= 0 && k_last > q_first + diag_offset + p.window_right) return true;
    return false;
  }
};

// ---- Block-sparse masks: the lists as shared-memory bitmaps -------------------------------------------
// A CTA's kBlockM rows cover one mask query block (mask block_m >= kBlockM) or two ("parts": block_m =
// kBlockM / 2); a key tile of kBlockN keys covers part of one mask key block or two (block_n = kBlockN / 2).
// Prologue (all threads, three barriers): each covered list goes into a bitmap over mask key blocks,
// `listed[part]`; indices may come in any order and repeat (a bit is set once: the reference's set
// semantics), out-of-range ones are skipped (as the CPU path does). A tile of the window range is visited
// iff some part lists some of its keys (`visit`). Per visited tile each warp -- whose rows lie in one part
// -- reads its own bits: none (the warp skips the tile's MMAs: only the other part listed it), the whole
// tile (the unmasked fast path, unless the window cuts it), or one half (the other half is masked with the
// window's interval test, at no extra cost per element). The loop walks `visit` from the top with one
// shared load and a clz per step: no global index load sits on the path of the next K/V load.
template <int kBlockM, int kBlockN, int kThreads>
struct SparseBlocks {
  // Shared-memory (32-bit) addresses, which take one register each where a generic pointer takes two.
  uint32_t listed_part;  // bitmap of the mask key blocks listed for this warp's part
  uint32_t visit;        // bitmap of the key tiles this CTA visits
  int cursor, mask_shift;  // next tile to look at (downwards); mask key block of key k: k >> mask_shift

  __device__ __forceinline__ void build(const FwdParams& p, uint32_t* words, int b, int h, int q_begin, int q_end,
                                        const KeyRange<kBlockN>& range, int warp_row0, int tid) {
    const BlockMaskParams& m = p.block_mask;
    const int parts = kBlockM > m.block_m ? kBlockM / m.block_m : 1;  // 1 or 2 (supports())
    const int n_mask_blocks = (p.seqlen_k + m.block_n - 1) / m.block_n;
    mask_shift = __ffs(m.block_n) - 1;  // block_n is 64 or 128
    // One spare bit past the last block (never set), so a tile's second half may be read unchecked.
    const int mask_words = n_mask_blocks / 32 + 1;
    const int tile_words = ((p.seqlen_k + kBlockN - 1) / kBlockN + 31) / 32;
    uint32_t* vis = words + parts * mask_words;
    for (int i = tid; i < parts * mask_words + tile_words; i += kThreads) words[i] = 0u;
    __syncthreads();
    const int qb0 = q_begin / m.block_m;
    for (int part = 0; part < parts; ++part) {
      const int qb = qb0 + part;
      if (int64_t(qb) * m.block_m >= q_end || qb >= m.num_q_blocks) break;  // rows past seqlen_q: no list
      int count = m.kv_num_blocks[b * m.num_batch_stride + h * m.num_head_stride + qb * m.num_qblock_stride];
      count = count < 0 ? 0 : (count > m.max_kv_blocks ? m.max_kv_blocks : count);
      const int32_t* list = m.kv_indices + b * m.idx_batch_stride + h * m.idx_head_stride + qb * m.idx_qblock_stride;
      for (int t = tid; t < count; t += kThreads) {
        const int32_t kb = list[int64_t(t) * m.idx_stride];
        if (kb >= 0 && kb < n_mask_blocks) atomicOr(&words[part * mask_words + (kb >> 5)], 1u << (kb & 31));
      }
    }
    __syncthreads();
    for (int n = range.n_lo + tid; n <= range.n_hi; n += kThreads) {
      const int kb_first = int((int64_t(n) * kBlockN) >> mask_shift);
      const int kb_last = min(int((int64_t(n) * kBlockN + kBlockN - 1) >> mask_shift), n_mask_blocks - 1);
      uint32_t any = 0;
      for (int part = 0; part < parts; ++part)
        for (int kb = kb_first; kb <= kb_last; ++kb) any |= words[part * mask_words + (kb >> 5)] >> (kb & 31);
      if (any & 1u) atomicOr(&vis[n >> 5], 1u << (n & 31));
    }
    __syncthreads();
    listed_part = static_cast<uint32_t>(__cvta_generic_to_shared(words + (warp_row0 / m.block_m) * mask_words));
    visit = static_cast<uint32_t>(__cvta_generic_to_shared(vis));
    cursor = range.n_hi;
  }

  static __device__ __forceinline__ uint32_t load_word(uint32_t base, int i) {
    uint32_t w;
    asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(w) : "r"(base + 4u * uint32_t(i)));
    return w;
  }

  // Next tile to visit (descending), or -1. Bits outside the window's [n_lo, n_hi] are never set.
  __device__ __forceinline__ int next() {
    while (cursor >= 0) {
      const int w = cursor >> 5;
      const uint32_t bits = load_word(visit, w) & (0xffffffffu >> (31 - (cursor & 31)));
      if (bits != 0u) {
        const int n = (w << 5) + 31 - __clz(bits);
        cursor = n - 1;
        return n;
      }
      cursor = (w << 5) - 1;
    }
    return -1;
  }

  // This warp's listed share of tile n: bit 0 = keys [0, kBlockN/2), bit 1 = keys [kBlockN/2, kBlockN).
  __device__ __forceinline__ uint32_t warp_bits(int n) const {
    // (n * kBlockN) >> mask_shift for the four pairs of 64 and 128, without 64-bit arithmetic (registers).
    const int kb = kBlockN == 64 ? (mask_shift == 6 ? n : n >> 1) : (mask_shift == 7 ? n : n << 1);
    const uint32_t first = (load_word(listed_part, kb >> 5) >> (kb & 31)) & 1u;
    if (kBlockN <= 64 || (kBlockN >> mask_shift) <= 1) return first * 3u;  // one mask block covers the tile
    const int kb1 = kb + 1;  // the tile's second half; past seqlen_k its bit is the spare, 0: masked anyway
    const uint32_t second = (load_word(listed_part, kb1 >> 5) >> (kb1 & 31)) & 1u;
    return first | (second << 1);
  }
};

}  // namespace flash::sm80
