// libflash/cuda/sm90/fwd/schedule.h -- the tile-schedule arithmetic of the Hopper forward that the host (plan.cpp, the
// workspace query, tests/test_sm90_host.cpp) and the kernel (tile_scheduler.cuh, key_blocks.cuh) must agree on: the
// static order's split last round, the causal order's L2 groups, the two-ring kernel's tile order, the element-mask
// bounds. Plain host/device code, no CUDA headers. How the schedules work: docs/kernels.md "sm90 forward: scheduling".
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "../../../params.h"

#if defined(__CUDACC__)
#define FLASH_SM90_HD __host__ __device__
#else
#define FLASH_SM90_HD
#endif

namespace flash::sm90 {

// ---- The static order's last round, split along the keys ("stream-K" tail) ---------------------------------------------
// With T equal tiles on G persistent CTAs the last of ceil(T / G) rounds holds T % G tiles. Split, the T / G whole rounds
// run as before and the last round's tiles become (T % G) x blocks key-block "units", dealt to the CTAs in equal
// contiguous runs; CTA c's run [begin(c), begin(c + 1)) lies in at most two tiles (its "pieces"). Each piece leaves an
// unnormalised fp32 O and its row max / row sum in the workspace; a tile's last piece to finish merges them all in CTA
// order (the result does not depend on the finishing order).
struct TailSplit {
  int32_t whole = 0;   // tiles [0, whole) run whole; [whole, T) are split. No split: whole = T
  int32_t blocks = 0;  // key blocks per tile
  int64_t units = 0;   // (T - whole) x blocks; 0: no split
  bool pieces_only = false;  // a PDL pair's secondary: this launch runs the pieces only (the primary ran the rounds)
  FLASH_SM90_HD int64_t begin(int c, int grid) const { return units * c / grid; }  // CTA c's first unit
  // The CTA whose run holds unit u (the largest c with begin(c) <= u).
  FLASH_SM90_HD int cta_of(int64_t u, int grid) const { return int(((u + 1) * grid + units - 1) / units) - 1; }
};
// Split only when the last round shortens by more than the pieces' extra prologues, epilogues and merges (the margin, in
// key blocks: a tile's fixed cost is ~2 blocks at d128, d256's partials twice d128's) and no tile has more than ~9 pieces.
inline int tail_split_margin(int head_dim) { return head_dim >= 256 ? 10 : 6; }
inline TailSplit tail_split(int64_t num_tiles, int grid, int64_t key_blocks, int margin) {
  TailSplit none{int32_t(num_tiles), int32_t(key_blocks), 0};
  if (grid <= 0 || num_tiles <= grid || num_tiles > 0x7ffffff0 || key_blocks <= 0 || key_blocks > 0x7fffffff) return none;
  const int64_t left = num_tiles % grid;
  if (left == 0) return none;
  const int64_t units = left * key_blocks;
  const int64_t run_min = units / grid, run_max = (units + grid - 1) / grid;
  if (run_min < 2 || run_min < (key_blocks + 7) / 8 || run_max + margin > key_blocks) return none;
  return TailSplit{int32_t(num_tiles - left), int32_t(key_blocks), units};
}
// The split's workspace, from the caller's pointer rounded up to kTailAlign: a counter per split tile and consumer
// warpgroup, then two partial slots per CTA, each 128 x consumers threads x (the O accumulator + m and l of two rows).
inline constexpr int64_t kTailAlign = 256;
inline int64_t tail_count_bytes(int grid, int consumers) { return (int64_t(4) * grid * consumers + 255) / 256 * 256; }
inline int64_t tail_slot_floats(int head_dim, int consumers) { return int64_t(128) * consumers * (head_dim / 2 + 4); }
inline int64_t tail_workspace_bytes(const TailSplit& t, int grid, int head_dim, int consumers) {
  if (t.units == 0) return 0;
  return kTailAlign + tail_count_bytes(grid, consumers) + 2 * int64_t(grid) * tail_slot_floats(head_dim, consumers) * 4;
}
// A work item of the dense kernels: a whole tile, or a piece of a split one.
struct Work {
  int x;               // the tile
  int n_begin, n_end;  // a piece's key blocks [n_begin, n_end)
  int slot;            // a piece's partial slot in the workspace (2 x CTA + k for its k-th piece); -1: a whole tile
};
// CTA c's share of the split round, worked out once at the kernel's start and kept in shared memory (in the producer's
// 24 registers its 64-bit divisions spilled).
struct TailPlan {
  int whole_rounds;  // the static order's whole rounds (tail.whole / grid)
  int pieces;        // CTA c's pieces (0-2)
  Work piece[2];
};
// (may_be_pieces_only: a kernel that can be a pair's secondary; the others never read the flag.)
FLASH_SM90_HD inline void plan_tail(const TailSplit& t, int grid, int c, TailPlan& plan, bool may_be_pieces_only = true) {
  plan.whole_rounds = may_be_pieces_only && t.pieces_only ? 0 : t.whole / grid;
  plan.pieces = 0;
  if (t.units == 0) return;
  const int64_t b0 = t.begin(c, grid), b1 = t.begin(c + 1, grid);
  for (int64_t u = b0; u < b1 && plan.pieces < 2;) {  // at most two: a run is shorter than a tile (tail_split)
    const int64_t tile = u / t.blocks, tile_first = tile * t.blocks;
    const int64_t end = b1 < tile_first + t.blocks ? b1 : tile_first + t.blocks;
    plan.piece[plan.pieces] = Work{t.whole + int(tile), int(u - tile_first), int(end - tile_first), 2 * c + plan.pieces};
    ++plan.pieces;
    u = end;
  }
}
// The partial slot of CTA c's piece of split tile `tile` (counted from t.whole): its first if its run starts there.
FLASH_SM90_HD inline int tail_slot(const TailSplit& t, int grid, int c, int tile) {
  return 2 * c + (t.begin(c, grid) / t.blocks == tile ? 0 : 1);
}

// ---- Persistent grids ------------------------------------------------------------------------------------------------
// Hopper's SXM parts (H100, H200): the SMs and the shared memory a block may opt in to (227 KB).
inline constexpr int kHopperSms = 132;
inline constexpr int64_t kHopperSmemOptin = 232448;
// One CTA per SM (kHopperSms if the count is unknown), no more than there are tiles.
inline int persistent_grid(int64_t tiles, int sms) { return int(std::min<int64_t>(tiles, sms > 0 ? sms : kHopperSms)); }
// The same number of rounds on the fewest CTAs, for dense problems with no tail of their own and at least
// kBalancedMinRounds rounds: the idle SMs then rest through every round, and a round on fewer SMs runs faster.
inline constexpr int64_t kBalancedMinRounds = 8;
inline int balanced_grid(int64_t tiles, int grid) {
  if (grid <= 0 || tiles <= grid) return grid;
  const int64_t rounds = (tiles + grid - 1) / grid;
  return rounds < kBalancedMinRounds ? grid : int((tiles + rounds - 1) / rounds);
}

// ---- The causal order: longest first, within groups of heads whose K and V fit in L2 together -------------------------
// `full_groups` groups of exactly `group` (batch, head) pairs come first; the last group takes the pairs left, so it can
// be made large enough that the very end is still longest-first over many tiles.
struct CausalOrder {
  int num_bh, num_m_blocks, group, full_groups;
  // Work tile x -> query block m_block of (batch * heads + head) bh.
  FLASH_SM90_HD void tile(int x, int& m_block, int& bh) const {
    const int per_group = group * num_m_blocks;
    int first = full_groups * group, size = num_bh - first, r = x - full_groups * per_group;  // the last group
    if (r < 0) {
      const int g = x / per_group;
      first = g * group, size = group, r = x - g * per_group;
    }
    m_block = num_m_blocks - 1 - r / size;
    bh = first + r % size;
  }
};
// As many (batch, head) pairs per group as fit their K and V (kv_bytes each) in l2_budget bytes, and a last group of at
// least tail_grids x grid tiles.
inline CausalOrder causal_order(int64_t num_bh, int num_m_blocks, int grid, int64_t kv_bytes, int64_t l2_budget,
                                double tail_grids) {
  const int64_t group = std::clamp<int64_t>(l2_budget / std::max<int64_t>(kv_bytes, 1), 1, num_bh);
  const int64_t tail = std::min<int64_t>(num_bh, int64_t(std::ceil(tail_grids * grid / num_m_blocks)));
  return CausalOrder{int(num_bh), num_m_blocks, int(group), int(std::max<int64_t>(0, (num_bh - tail) / group))};
}
// The last group in grids of tiles: 2, but 1 at d256 with at most 8 query blocks a head, where two grids' heads nearly
// fill L2 and re-reading them costs more than the longer tail gains.
inline double causal_tail_grids(int head_dim, int num_m_blocks) { return head_dim == 256 && num_m_blocks <= 8 ? 1.0 : 2.0; }
// The groups' L2 budget: a third of L2 (d64: half), but two heads' K and V where the upward walk's heads have at most 8
// query blocks (a head's tiles then start together and read each K/V block at about the same time).
inline int64_t causal_l2_budget(int head_dim, int num_m_blocks, bool upward, int64_t kv_bytes, int64_t l2_bytes) {
  if (upward && num_m_blocks <= 8) return 2 * kv_bytes;
  return l2_bytes / (head_dim <= 64 ? 2 : 3);
}

// ---- The two-ring kernel's tile order (d64 block-sparse, 192-row tiles over 128-row mask blocks) -----------------------
// A head of seqlen_q = 192 F + 64 rows is F whole tiles and one of 64 rows. When the F x num_bh whole tiles overflow whole
// rounds of the grid by c <= num_bh tiles, the tail plan takes c heads' last whole tile and their 64-row tile as two
// 128-row tiles instead and hands every tile under 192 rows out after the whole ones: the whole tiles then fill rounds
// exactly and each CTA ends on at most one small tile. Needs F - 1 even (the 128-row tiles start at 192 (F - 1), a
// multiple of 128). Returns c (0: the plain order).
inline int ring_tail_plan(int64_t seqlen_q, int64_t num_bh, int grid) {
  if (grid <= 0 || seqlen_q % 192 != 64) return 0;
  const int64_t f = seqlen_q / 192;
  if (f < 3 || (f - 1) % 2 != 0) return 0;
  const int64_t c = (f * num_bh) % grid;
  if (c == 0 || c > num_bh || num_bh + c > grid || f * num_bh < grid) return 0;
  return int(c);
}
// Work tile x -> (batch * heads + head) bh, its first group of 64 rows g and its groups (1-3). Without a plan: each
// head's num_m_blocks tiles of 3 groups together, from its last down. With one (seqlen_q = 192 F + 64): every head's
// whole tiles first (F - 1 for the last c heads), then those c heads' last 256 rows as two tiles of 2 groups, then the
// other heads' last 64 rows, one group each. The tile count is the same either way.
struct RingOrder {
  int num_bh, num_m_blocks, tail_heads;
  FLASH_SM90_HD void tile(int x, int& bh, int& g, int& groups) const {
    groups = 3;
    const int nm = num_m_blocks, c = tail_heads;
    if (c == 0) {
      bh = x / nm, g = 3 * (nm - 1 - x % nm);
      return;
    }
    const int f = nm - 1, plain = num_bh - c, whole = f * plain + (f - 1) * c;
    if (x < f * plain) {
      bh = x / f, g = 3 * (f - 1 - x % f);
    } else if (x < whole) {
      const int y = x - f * plain;
      bh = plain + y / (f - 1), g = 3 * (f - 2 - y % (f - 1));
    } else if (x < whole + 2 * c) {
      const int y = x - whole;
      bh = plain + y / 2, g = 3 * (f - 1) + 2 * (y % 2), groups = 2;
    } else {
      bh = x - whole - 2 * c, g = 3 * f, groups = 1;
    }
  }
};

// ---- Which key blocks of a tile need the element mask ------------------------------------------------------------------
// Blocks n < below or n > above (of kBlockN keys) hold some (row, key) of rows [q_begin, q_end) outside the sequence or
// the window; the others are wholly visible to every row. With diag = diag_offset, block n needs it when
//   k_last >= seqlen_k                            <=> n >= seqlen_k / kBlockN
//   k_begin < q_end - 1 + diag - window_left (L)  <=> n < ceil(L / kBlockN)
//   k_last > q_begin + diag + window_right (R)    <=> n * kBlockN > R - kBlockN + 1 (T): every n when T < 0, else
//                                                     n > floor(T / kBlockN)
// (window edges < 0: unbounded). Checked against a row-by-row test in tests/test_sm90_host.cpp.
struct MaskBounds {
  int above, below;
};
// (diag_offset, seqlen_k: the call's, or a varlen tile's sequence's -- its diagonal moved to the packed query rows.)
template <int kBlockN>
FLASH_SM90_HD inline MaskBounds mask_bounds(const FwdParams& p, int64_t diag_offset, int64_t seqlen_k, int q_begin,
                                            int q_end) {
  int64_t above = seqlen_k / kBlockN - 1;
  if (p.window_right >= 0) {
    const int64_t t = int64_t(q_begin) + diag_offset + p.window_right - kBlockN + 1;
    const int64_t a = t < 0 ? int64_t(-1) : t / kBlockN;
    above = a < above ? a : above;
  }
  int64_t below = 0;
  if (p.window_left >= 0) {
    const int64_t l = int64_t(q_end) - 1 + diag_offset - p.window_left;
    below = l <= 0 ? 0 : (l + kBlockN - 1) / kBlockN;
  }
  return MaskBounds{int(above > int64_t(-1) ? above : int64_t(-1)),
                    int(below < int64_t(0x7fffffff) ? below : int64_t(0x7fffffff))};
}
template <int kBlockN>
FLASH_SM90_HD inline MaskBounds mask_bounds(const FwdParams& p, int q_begin, int q_end) {
  return mask_bounds<kBlockN>(p, p.diag_offset, p.seqlen_k, q_begin, q_end);
}

}  // namespace flash::sm90
