// libflash/cuda/sm90/fwd/key_blocks.cuh -- which key blocks a query tile visits, in which order, and which of them need
// the element mask. The same rules as the sm80 kernel and the CPU backend (libflash/cpu/block_range.h): the window's
// key range [lo, hi) of the whole tile, walked from its last block down, so the blocks cut by the diagonal come first
// (or upwards, kUp). Block-sparse tiles walk a schedule the scheduler warp built in shared memory (build_schedule).
// The producer and each consumer warpgroup walk their own KeyBlocks over the same range or schedule.
#pragma once
#include <cstdint>

#include "../../../params.h"
#include "schedule.h"

namespace flash::sm90 {

// kSmemWalk (the two-ring consumers, 160 registers): the schedule walked by 32-bit shared addresses from its first entry
// to its end -- two live values instead of a generic pointer and a position.
template <int kBlockN, bool kSparse, bool kSmemWalk = false, bool kUp = false>
struct KeyBlocks {
  int lo, hi, cursor, n_lo;
  const int32_t* sched = nullptr;  // block-sparse: [count, n_0, n_1, ...] in shared memory
  int pos = 0;
  uint32_t walk = 0, walk_end = 0;  // kSmemWalk: the next entry's and the end's shared addresses
  // Key blocks n < mask_below or n > mask_above need the element mask (schedule.h, mask_bounds): decided once a tile.
  int mask_below, mask_above;

  // at_least_one (dense walks, O staged in the ring): a tile that sees no key still visits block 0, wholly masked, so
  // it has a last block's slots to stage its O (zeros) in.
  __device__ KeyBlocks(const FwdParams& p, int q_begin, int q_end, const int32_t* schedule, bool at_least_one = false)
      : KeyBlocks(p, p.diag_offset, p.seqlen_k, q_begin, q_end, schedule, at_least_one) {}
  // (diag_offset, seqlen_k: a varlen tile's sequence's, its diagonal moved to the packed query rows q_begin, q_end.)
  __device__ KeyBlocks(const FwdParams& p, int64_t diag_offset, int64_t seqlen_k, int q_begin, int q_end,
                       const int32_t* schedule, bool at_least_one = false) {
    const int64_t lo64 = p.window_left >= 0 ? q_begin + diag_offset - p.window_left : 0;
    const int64_t hi64 = p.window_right >= 0 ? q_end - 1 + diag_offset + p.window_right + 1 : seqlen_k;
    lo = int(max(lo64, int64_t(0)));
    hi = int(max(min(hi64, seqlen_k), int64_t(0)));
    n_lo = lo / kBlockN;
    cursor = lo < hi ? (hi + kBlockN - 1) / kBlockN - 1 : -1;
    sched = kSparse ? schedule : nullptr;
    if constexpr (kSmemWalk) {
      walk = static_cast<uint32_t>(__cvta_generic_to_shared(schedule)) + 4;
      walk_end = walk + 4 * schedule[0];
    }
    const MaskBounds mb = mask_bounds<kBlockN>(p, diag_offset, seqlen_k, q_begin, q_end);
    mask_above = mb.above, mask_below = mb.below;
    if (at_least_one && cursor < 0) cursor = n_lo = 0, mask_below = max(mask_below, 1);
  }
  __device__ __forceinline__ bool needs_mask(int n) const { return n < mask_below || n > mask_above; }
  // Dense walks: whether next() has another block.
  __device__ __forceinline__ bool has_next() const { return cursor >= n_lo; }
  // A piece of a split tile (Work): only key blocks [n_begin, n_end) of the dense walk.
  __device__ __forceinline__ void clip(int n_begin, int n_end) {
    n_lo = max(n_lo, n_begin);
    cursor = min(cursor, n_end - 1);
  }

  // Next key block (in units of kBlockN), or -1 when done.
  __device__ __forceinline__ int next() {
    if (!kSparse) {
      if constexpr (kUp) return cursor >= n_lo ? n_lo++ : -1;  // (cursor is then the top block)
      return cursor >= n_lo ? cursor-- : -1;
    }
    if constexpr (kSmemWalk) {
      if (walk == walk_end) return -1;
      int n;
      asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(n) : "r"(walk) : "memory");
      walk += 4;
      return n;
    }
    return pos < sched[0] ? sched[1 + pos++] : -1;
  }

  // The scheduler warp (all 32 lanes): the schedule of the mask row block holding query row q_row into `out` (no block:
  // q_row past seqlen_q), using `bits` (one bit per mask key block, n_mask_blocks / 32 + 1 words) for the set: the
  // listed mask blocks (any order, repeats counted once, out-of-range indices skipped), split into block_n / kBlockN key
  // blocks, clipped to the window, descending. Without a block mask (windows routed to the block-sparse kernel) every
  // block of the range is listed. The lanes load 32 list entries at a time and compact the visited blocks with a
  // ballot, so a schedule costs a few loads' latency, not one per entry.
  __device__ void build_schedule(const FwdParams& p, int b, int h, int q_row, int32_t* out, uint32_t* bits,
                                 int lane) const {
    // The readers of this buffer (tile i-2's) released it through sched_empty before the caller got here; the warp
    // barrier orders this warp's previous stores (bitmap, entries) before this build's.
    __syncwarp();
    int n_out = 0;
    if (lo < hi && q_row < p.seqlen_q) {
      const bool every_block = !p.has_block_mask;
      const BlockMaskParams& m = p.block_mask;
      int sub_per = 1;
      if (!every_block) {
        const int n_mask_blocks = int((int64_t(p.seqlen_k) + m.block_n - 1) / m.block_n);
        for (int w = lane; w <= n_mask_blocks / 32; w += 32) bits[w] = 0u;
        __syncwarp();
        const int64_t qb = q_row / m.block_m;
        const int32_t* list = m.kv_indices + b * m.idx_batch_stride + h * m.idx_head_stride + qb * m.idx_qblock_stride;
        // The list's first 32 entries load together with the count (the caller's array holds max_kv_blocks entries per
        // query block, flash.h): one round trip to memory instead of two.
        const int32_t first = lane < m.max_kv_blocks ? list[int64_t(lane) * m.idx_stride] : -1;
        int count = m.kv_num_blocks[b * m.num_batch_stride + h * m.num_head_stride + qb * m.num_qblock_stride];
        count = count < 0 ? 0 : (count > m.max_kv_blocks ? m.max_kv_blocks : count);
        for (int i = lane; i < count; i += 32) {
          const int32_t kb = i < 32 ? first : list[int64_t(i) * m.idx_stride];
          if (kb >= 0 && kb < n_mask_blocks) atomicOr(&bits[kb >> 5], 1u << (kb & 31));
        }
        __syncwarp();
        sub_per = m.block_n / kBlockN;
      }
      for (int base = cursor; base >= n_lo; base -= 32) {  // lane l looks at block base - l: descending
        const int n = base - lane;
        const int kb = n / sub_per;
        const bool listed = n >= n_lo && (every_block || ((bits[kb >> 5] >> (kb & 31)) & 1u));
        const uint32_t ballot = __ballot_sync(0xffffffffu, listed);
        if (listed) out[1 + n_out + __popc(ballot & ((1u << lane) - 1u))] = n;
        n_out += __popc(ballot);
      }
    }
    // The count, stored by lane 0 alone (every lane storing it was a race to racecheck); every lane's tile_full arrive
    // after this releases its own stores to the loading lane and the consumers.
    if (lane == 0) out[0] = n_out;
    __syncwarp();
  }
};

}  // namespace flash::sm90
