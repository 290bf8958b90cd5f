// libflash/cuda/sm90/fwd/tile_scheduler.cuh -- which work tile each persistent CTA runs next, and what a tile is.
// Static order (dense masks: every tile the same length): CTA c's r-th tile of rounds of gridDim.x tiles, forwards in even
// rounds and backwards in odd ones, the last round split into pieces where the launch says so (schedule.h, TailSplit).
// Dynamic order (causal-like and block-sparse masks: tiles of unequal length): the next tile from a counter in the
// workspace, so a CTA that finishes a short tile takes the next at once. docs/kernels.md "sm90 forward: scheduling".
#pragma once
#include <cstdint>

#include "args.h"

namespace flash::sm90 {

// Work tile x -> (query block, batch, head). Causal-like masks (right edge, no left edge): longest first within groups of
// heads whose K and V fit in L2 together (CausalOrder); otherwise one head's query blocks are consecutive, so CTAs side by
// side share its K and V in L2.
struct Tile {
  int m_block, b, h;
  __device__ Tile(int m, int b_, int h_) : m_block(m), b(b_), h(h_) {}
  __device__ Tile(const Args& a, int x) {
    const FwdParams& p = a.p;
    const int num_bh = p.heads_q * p.batch;
    int bh;
    if (p.window_right >= 0 && p.window_left < 0) {
      CausalOrder{num_bh, a.num_m_blocks, a.l2_group, a.l2_full_groups}.tile(x, m_block, bh);
    } else {
      m_block = a.num_m_blocks - 1 - x % a.num_m_blocks;
      bh = x / a.num_m_blocks;
    }
    h = bh % p.heads_q;
    b = bh / p.heads_q;
  }
};

// Two rings: a tile is 1-3 groups of 64 rows from group g, coded as m_block = g | groups << 16, in RingOrder's order.
__device__ __forceinline__ Tile ring_tile(const Args& a, int x) {
  int bh, g, groups;
  RingOrder{a.p.heads_q * a.p.batch, a.num_m_blocks, a.ring_tail_heads}.tile(x, bh, g, groups);
  return Tile(g | groups << 16, bh / a.p.heads_q, bh % a.p.heads_q);
}
// A two-ring tile's rows [q_begin, q_end), q_end clipped by seqlen_q (block-sparse tiles are never shifted).
__device__ __forceinline__ void ring_rows(const FwdParams& p, int m_block, int& q_begin, int& q_end) {
  q_begin = (m_block & 0xffff) * 64;
  q_end = min(q_begin + (m_block >> 16) * 64, p.seqlen_q);
}
// Two rings: the warpgroup (2 or 0) whose 64 rows lie in the other 128-row mask block than the rest of the tile's rows.
__device__ __forceinline__ int single_wg(int q_begin) { return q_begin >> 7 == (q_begin + 64) >> 7 ? 2 : 0; }

// The static order's r-th tile of this CTA.
__device__ __forceinline__ int tile_of(int round) {
  const int g = int(gridDim.x), c = int(blockIdx.x);
  return round * g + ((round & 1) ? g - 1 - c : c);
}

// ---- The dynamic order's counter ---------------------------------------------------------------------------------------
// A 64-bit word in the caller's workspace: the launch's epoch (never 0) in its high half, the tiles taken in its low half,
// so no memset stands in the stream ahead of the kernel. A CTA claims the word for this launch before its first take,
// unless another CTA already did: at once if it holds 0, which every launch leaves behind, by a compare-and-swap loop if
// it holds anything else (a caller's fresh workspace). Every take after a claim is an atomicAdd, and a CTA that takes at
// all takes once more than the tiles it gets, so the takes get the relative indices 0 .. T - 1 in order: the last one
// comes after every claim and every other take and resets the word to 0.
//   - block-sparse (the scheduler warp): every tile run takes the next one; the first take is a compare-and-swap 0 ->
//     (epoch, 1), claim and take at once; T = num_tiles, next = gridDim.x + relative.
//   - dense (the producer's thread 0): a CTA's second tile is the static order's (tile_of(1)) and its takes start there,
//     so a consumer thread claims the word at the kernel's start, off the producer's registers; T = num_tiles -
//     gridDim.x, next = 2 gridDim.x + relative.
__device__ __forceinline__ void take_claim(const Args& a) {
  const unsigned long long mine = static_cast<unsigned long long>(a.epoch) << 32;
  unsigned long long seen = atomicCAS(a.tile_counter, 0ull, mine);
  while (seen != 0 && (seen >> 32) != a.epoch) {
    const unsigned long long was = seen;
    if ((seen = atomicCAS(a.tile_counter, was, mine)) == was) break;
  }
}
// The block-sparse scheduler's take in two halves, so the round trip hides behind a schedule's build: take_issue asks
// and keeps 32 bits of the answer -- the relative index, or kTakeClaim where a first take's compare-and-swap found the
// word not 0 -- and take_resolve returns the next tile.
constexpr uint32_t kTakeClaim = 0xffffffffu;
__device__ __forceinline__ uint32_t take_issue(const Args& a, bool first) {
  if (first) return atomicCAS(a.tile_counter, 0ull, (static_cast<unsigned long long>(a.epoch) << 32) | 1ull) == 0 ? 0u : kTakeClaim;
  return static_cast<uint32_t>(atomicAdd(a.tile_counter, 1ull));
}
// A take's relative index as the next tile, the word reset by the launch's last take.
__device__ __forceinline__ int take_done(const Args& a, uint32_t rel) {
  if (rel == static_cast<uint32_t>(a.num_tiles) - 1u) atomicExch(a.tile_counter, 0ull);
  return int(gridDim.x) + int(rel);
}
__device__ __forceinline__ int take_resolve(const Args& a, uint32_t got) {
  if (got != kTakeClaim) return take_done(a, got);
  take_claim(a);
  return take_done(a, static_cast<uint32_t>(atomicAdd(a.tile_counter, 1ull)));
}

// ---- Work items of the dense kernels: whole tiles and the split last round's pieces ----------------------------------
// What the dense producer hands the consumers is a code: x < num_tiles, tile x run whole; num_tiles + k (k = 0, 1) with
// the tail split, this CTA's piece k; anything else, the end. (kSplits false: no pieces, every code >= num_tiles ends.)
template <bool kSplits = true>
__device__ __forceinline__ bool is_piece(const Args& a, int code) {
  return kSplits && a.tail.units > 0 && code >= a.num_tiles && code - a.num_tiles < 2;
}
template <bool kSplits = true>
__device__ __forceinline__ bool is_work(const Args& a, int code) { return code < a.num_tiles || is_piece<kSplits>(a, code); }
// This CTA's i-th item of the static order: the whole rounds' tiles (tile_of), then its pieces of the split round.
template <bool kSplits = true>
__device__ __forceinline__ int static_item(const Args& a, const TailPlan& plan, int i) {
  if (!kSplits || a.tail.units == 0 || i < plan.whole_rounds) return tile_of(i);  // (>= num_tiles past the end)
  return i - plan.whole_rounds < plan.pieces ? a.num_tiles + i - plan.whole_rounds : 0x7fffffff;
}
template <bool kSplits = true>
__device__ __forceinline__ Work decode_work(const Args& a, const TailPlan& plan, int code) {
  return is_piece<kSplits>(a, code) ? plan.piece[code - a.num_tiles] : Work{code, 0, 0, -1};
}

// A TMA box's coordinates {column, row, head, batch} in a tensor map whose axes args.h's TensorPos records. (Selects, not
// c[pos.seq] = row: a run-time index would put c in local memory.)
__device__ __forceinline__ void tma_coords(int (&c)[4], const TensorPos& pos, int col, int row, int head, int batch) {
  c[0] = col;
#pragma unroll
  for (int i = 1; i < 4; ++i) c[i] = pos.seq == i ? row : pos.head == i ? head : batch;
}

}  // namespace flash::sm90
