// libflash/cuda/sm90/shapes.h -- the tile shape of each sm90 instantiation (shared by the host code
// and the .cu files): query rows per work tile (64 per consumer warpgroup), key block, ring stages.
// Shared memory: Q (block_m x d, one or two buffers) + stages x (K + V) (block_n x d each), bf16/fp16,
// under H100's 227 KB.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "../../params.h"

namespace flash::sm90 {

struct Shape {
  int head_dim, block_n, stages;
  int consumers = 2;     // consumer warpgroups of 64 query rows: the tile has 64 x consumers rows
  // O leaves through a shared staging tile and TMA stores: 1 a tile of its own after the K/V ring, 2 each
  // warpgroup's own rows of the Q buffer (Q then stays until the store has read them), 3 the slots of the tile's
  // last key block in the K/V ring (warpgroup 1 in K's, warpgroup 0 in V's), held until the store has read them;
  // 0 direct stores.
  int store_o = 0;
  constexpr int block_m() const { return 64 * consumers; }
  constexpr int o_stage_bytes() const { return store_o == 1 ? block_m() * head_dim * 2 : 0; }
  // K/V rings: block-sparse with three consumer warpgroups has two (fwd_kernel.cuh, Traits::kTwoRings): a 192-row tile
  // spans two 128-row mask blocks, whose lists differ; every other instantiation one.
  constexpr int rings(bool sparse) const { return sparse && consumers == 3 ? 2 : 1; }
  // Q buffers: two where they fit in H100's 227 KB (with the O staging tile, or 4 KB left for block-sparse
  // schedules).
  constexpr int q_stages(bool sparse) const {
    return (2 * block_m() + 2 * rings(sparse) * stages * block_n) * head_dim * 2 + 1024 + (sparse ? 4096 : 0) +
                       o_stage_bytes() <= 232448
               ? 2 : 1;
  }
  constexpr int smem_bytes(bool sparse) const {
    return (q_stages(sparse) * block_m() + 2 * rings(sparse) * stages * block_n) * head_dim * 2 + 1024 + o_stage_bytes();
  }
};

// Dense and window masks: d64 192 x 128 (three consumer warpgroups, FlashAttention-3's d64 choice: +17-40%
// over two in run s13-1, perf-log v5) with a 4-deep ring; d128 128 x 128 with 2 stages, which leaves room
// for two Q buffers (run s13-8: +1-7% dense, +1-13% causal over 3 stages and one Q buffer, which had won
// before Q was double-buffered); d256 128 x 80 (FlashAttention-3's shape; +4-15% over 64).
// Block-sparse masks need block_n to divide the mask's blocks (64 and 128), 128-row tiles (a tile inside
// one mask row block of 128) and room for the schedules: d256 drops to 64 keys. (d64 with 128-row mask blocks and long
// lists takes 192-row tiles on two K/V rings instead: kTwoRingShape below.)
// d64 and d128 write O through a staging tile with TMA stores (run s14-1: d128 +7% at 1k, +3-9% causal;
// d64 +0-3%); d256 has no room left for one. Block-sparse too since runs s15-1/3 (its tiles are short, so
// the epilogue weighs more: time / dense -0.01 to -0.04 at d64, and at d128 the staging tile in place of
// a second Q buffer -0.01 to -0.04; a third K/V stage instead measured the same but caps seqlen_k near 30k).
// d256 block-sparse has no room for it either. d256 dense stages O in each warpgroup's own rows of the Q
// buffer instead (store_o 2, session 15: its direct-store epilogue took 11% of a 1k tile, perf-log v15), and
// so does d128 block-sparse since session 16, which buys back its second Q buffer (perf-log v19: time /
// dense at 4k 0.171 -> 0.161 at s = 0.1, once the scheduler warp had removed the wait for the schedule).
// d256 dense stages O in its last key block's K and V slots since session 19 (store_o 3, perf-log v36): Q is then
// free after the last S and the next tile's Q loads during the epilogue (dense 1k +1.5%, causal 1k +2%).
inline constexpr Shape kShapes[] = {{64, 128, 4, 3, 1}, {128, 128, 2, 2, 1}, {256, 80, 2, 2, 3}};
inline constexpr Shape kSparseShapes[] = {{64, 128, 4, 2, 1}, {128, 128, 2, 2, 2}, {256, 64, 2}};
// d64 block-sparse masks of 128-row blocks: 192-row tiles on three consumer warpgroups, as d64's dense instantiation,
// with one K/V ring (2 stages) for each of the two mask row blocks a tile spans (fwd_kernel.cuh, Traits::kTwoRings;
// perf-log v39). The two-warpgroup kernel above runs the other block sizes and the listed windows.
inline constexpr Shape kTwoRingShape{64, 128, 2, 3, 1};
// d128 with long key ranges (shapes.h, use_long_kernel): 192-key blocks, O staged in the last block's K/V slots (d256's
// epilogue, store_o 3), which leaves room for one Q buffer. Its softmax and barrier steps come once per 192 keys instead
// of 128 (profile s23-1: 3576 cycles per block against 2686, 18.6 per key against 21.0), but a tile's fixed cost is
// higher (one Q buffer: the next Q loads during the epilogue) and the last block of a range is more often cut.
// sm90_dev (s23-1, s23-3): dense 16k +5%, 8k +3.5%, 4k -1%, 1k -15%; causal 16k +4.5%, 8k +2.8%, 4k -1.6% (with the
// tail split on both). FlashAttention-3 takes 176-key blocks at d128 (measured here: between bn160 and bn192).
inline constexpr Shape kLongShape{128, 192, 2, 2, 3};
inline constexpr int64_t kLongMinKeys = 8192;
// Dense d128 ran on it from 4096 keys in sessions 25-27 (1.2-1.4% faster there than the 128-key one, s25-1); since the
// 128-key one pins its softmax before the P V wait (perf-log v50) it is the faster at 4096 keys again (sm90_dev s28-1/2:
// .9101 / .9053 ms against the 192-key one's .9265 / .9231), so both kinds start at 8192.

// Block-sparse masks add, after the tiles, two schedules per ring (1 + ceil(seqlen_k / block_n) ints each: the
// producer builds tile i+1's while the consumers read tile i's) and a bitmap over the mask's key blocks.
inline int64_t sparse_sched_stride(int64_t seqlen_k, int block_n) { return 1 + (seqlen_k + block_n - 1) / block_n; }
inline int64_t sparse_extra_bytes(int64_t seqlen_k, int block_n, int64_t mask_block_n, int rings = 1) {
  const int64_t mask_blocks = (seqlen_k + mask_block_n - 1) / mask_block_n;
  return (2 * rings * 4 * sparse_sched_stride(seqlen_k, block_n) + 4 * (mask_blocks / 32 + 1) + 15) / 16 * 16;
}

// Tiles of unequal length -- causal-like masks (a right edge, no left edge) and block-sparse ones -- are
// handed out dynamically from a counter in the workspace (fwd_kernel.cuh, Tile); dense ones statically.
inline bool dynamic_tiles(bool has_block_mask, int64_t window_left, int64_t window_right) {
  return has_block_mask || (window_right >= 0 && window_left < 0);
}
inline constexpr size_t kTileCounterBytes = 16;  // a 64-bit word, with room to align it in a caller's workspace

#if defined(__CUDACC__)
#define FLASH_SM90_HD __host__ __device__
#else
#define FLASH_SM90_HD
#endif

// The static order's last round, split along the keys ("stream-K" tail; perf-log v41). Dense tiles all take the same
// time, and with T tiles on G persistent CTAs the last of ceil(T / G) rounds holds only T % G of them: the standard grid
// has 2048 tiles at d128 (68 in the last round on 132 SMs), so every d128 dense run idled half the GPU for 1/16 of its
// time. With the split, the T / G whole rounds run as before and the last round's tiles become a row of
// (T % G) x blocks key blocks ("units"), dealt to the CTAs in equal contiguous runs: CTA c takes units [begin(c),
// begin(c + 1)), which lie in at most two tiles (a run is shorter than a tile), its "pieces". Each piece runs Algorithm 1
// over its key blocks and leaves O (unnormalised, fp32), the row max and the row sum in the workspace; the last piece
// of a tile to finish (a counter per tile and warpgroup) reads every piece's partial back in CTA order (so the result
// does not depend on the finishing order), merges them with the online softmax's rescaling, and writes O and LSE as a
// whole tile does. Nobody waits for anybody. Compiled only into the instantiations use_split_kernel picks and d128's
// 128-key pieces kernel (pair_split: the pieces alone, behind a dense kernel's whole rounds).
struct TailSplit {
  int32_t whole = 0;   // tiles [0, whole) run whole (T / G rounds); [whole, T) are split. No split: whole = T
  int32_t blocks = 0;  // key blocks per tile
  int64_t units = 0;   // (T - whole) x blocks; 0: no split
  // A PDL pair's secondary (Rows::pieces): this launch runs the pieces only; the primary ran the whole rounds.
  bool pieces_only = false;
  // CTA c's first unit (grid CTAs): begin(grid) = units.
  FLASH_SM90_HD int64_t begin(int c, int grid) const { return units * c / grid; }
  // The CTA whose run holds unit u (the largest c with begin(c) <= u).
  FLASH_SM90_HD int cta_of(int64_t u, int grid) const { return int(((u + 1) * grid + units - 1) / units) - 1; }
};
// Split only when the last round gets shorter by more than the pieces' extra prologues, epilogues and merges (the
// margin, in key blocks: a tile's fixed cost is ~2 blocks at d128, profile s23-1; d256's epilogue and partials are
// twice d128's), and no tile has more than ~9 pieces (its last piece reads every piece's partial O). Measured with a
// margin of 4 (s23-2, against the last round run whole): d64 1k (3 of 8 blocks per run) 0.4% and d256 2k (20 of 26)
// 0.8% slower, d128 2k (9 of 16) the same; so 6, and 10 at d256.
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
// The workspace of a split, from the caller's pointer rounded up to 256 bytes (hence 256 bytes of slack; the static
// order has no tile counter): a counter per split tile and consumer warpgroup, then two partial slots per CTA (its
// pieces), each 128 x consumers threads x (the O accumulator + row max and row sum of two rows) floats.
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
// CTA c's share of the split round, worked out once at the kernel's start and kept in shared memory (the producer has
// 24 registers, and the 64-bit divisions made it spill: ptxas, session 23).
struct TailPlan {
  int whole_rounds;  // the static order's whole rounds (tail.whole / grid)
  int pieces;        // CTA c's pieces (0-2)
  Work piece[2];
};
// (may_be_pieces_only: a kernel that can be a pair's secondary, Traits::kPdlSecondary; the others never read the flag.)
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

// The persistent grid: one CTA per SM (132, an H100's, if the count is unknown), no more than there are tiles.
inline int persistent_grid(int64_t tiles, int sms) { return int(std::min<int64_t>(tiles, sms > 0 ? sms : 132)); }
// The same number of rounds on the fewest CTAs: the static order's equal tiles spread evenly over every round, instead
// of a last round that leaves some SMs idle (launch takes it for dense problems with no tail of their own: no split, no
// pair, no second kernel for a part of the rows). Equal tiles take ceil(tiles / grid) rounds either way, but the idle
// SMs then rest through every round rather than the last alone, and the others' rounds run faster for it (session 54,
// scripts/interleaved_grid.py, three runs: 2048 tiles on 128 CTAs against 132 -- d128 dense 1k .995-.997, 2k
// .993-.995, d128 4k batch 2 (1024 tiles) .994, d256 dense 1k .988-.992, 2k .989 -- and 124 CTAs, 17 rounds instead
// of 16, 4.1-4.7% slower where 6.25% more rounds were: a round on fewer SMs is faster). Where a tail handles the last
// round (d128's pair at 4k, d64 dense's rows kernel) 128 CTAs were 0.6% and 1.6% slower, and the dynamic orders
// (causal, block-sparse) 1-2.4% slower or the same. Only from kBalancedMinRounds rounds, as measured (8 and 16).
inline constexpr int64_t kBalancedMinRounds = 8;
inline int balanced_grid(int64_t tiles, int grid) {
  if (grid <= 0 || tiles <= grid) return grid;
  const int64_t rounds = (tiles + grid - 1) / grid;
  return rounds < kBalancedMinRounds ? grid : int((tiles + rounds - 1) / rounds);
}
// A problem's tail split on an instantiation of shape s launched on `grid` CTAs: the one choice the workspace query
// (sm90.cpp) and launch (fwd_kernel.cuh) both make.
inline int64_t tiles_of(const FwdParams& p, const Shape& s) {
  return (int64_t(p.seqlen_q) + s.block_m() - 1) / s.block_m() * p.heads_q * p.batch;
}
inline TailSplit tail_split_for(const FwdParams& p, const Shape& s, int grid, int margin = -1) {
  return tail_split(tiles_of(p, s), grid, (int64_t(p.seqlen_k) + s.block_n - 1) / s.block_n,
                    margin >= 0 ? margin : tail_split_margin(s.head_dim));
}

// Which problems may split: the static order (no right edge without a left one) with every tile visiting the same
// key blocks (no window, no block mask).
inline bool tail_split_applies(const FwdParams& p) {
  return !p.has_block_mask && p.window_left < 0 && p.window_right < 0;
}
// Which run on an instantiation with the split compiled in (Traits::kTailSplit): d128 and d256 from 8192 keys. The
// pieces' epilogue costs 1-3.5% wherever it is compiled in; the split gains back more only on long ranges (sm90_dev
// s23-6, against the kernel without its code: d128 8k +1%, 16k +1.6% on 128-key blocks; d256 8k +1.6%, 16k +2.1%,
// 4k -0.4%; d64 never: -1.2 to -1.6% at 8k-16k, where a run is 0.85 of a tile).
inline constexpr int64_t kSplitMinKeys = 8192;
inline bool use_split_kernel(const FwdParams& p) {
  return tail_split_applies(p) && p.seqlen_k >= kSplitMinKeys && (p.head_dim == 128 || p.head_dim == 256);
}

// Which key blocks of a tile need the element mask (fwd_kernel.cuh, KeyBlocks): blocks n < below or n > above (of
// kBlockN keys) hold some (row, key) of rows [q_begin, q_end) outside the sequence or the window; the others are wholly
// visible to every row. With q_first = q_begin, q_last = q_end - 1 and diag = diag_offset, block n needs it when
//   k_last >= seqlen_k                          <=> n >= seqlen_k / kBlockN
//   k_begin < q_last + diag - window_left (= L) <=> n < ceil(L / kBlockN)
//   k_last > q_first + diag + window_right (= R) <=> n * kBlockN > R - kBlockN + 1 (= T): every n when T < 0,
//                                                   else n > floor(T / kBlockN)
// (window edges < 0: unbounded). Checked against a row-by-row test in tests/test_sm90_host.cpp.
struct MaskBounds {
  int above, below;
};
template <int kBlockN>
FLASH_SM90_HD inline MaskBounds mask_bounds(const FwdParams& p, int q_begin, int q_end) {
  int64_t above = p.seqlen_k / kBlockN - 1;
  if (p.window_right >= 0) {
    const int64_t t = int64_t(q_begin) + p.diag_offset + p.window_right - kBlockN + 1;
    const int64_t a = t < 0 ? int64_t(-1) : t / kBlockN;
    above = a < above ? a : above;
  }
  int64_t below = 0;
  if (p.window_left >= 0) {
    const int64_t l = int64_t(q_end) - 1 + p.diag_offset - p.window_left;
    below = l <= 0 ? 0 : (l + kBlockN - 1) / kBlockN;
  }
  return MaskBounds{int(above > int64_t(-1) ? above : int64_t(-1)), int(below < int64_t(0x7fffffff) ? below : int64_t(0x7fffffff))};
}

// The causal-like masks' tile order (fwd_kernel.cuh, Tile): longest first, so the heaviest tiles start early and the
// short ones fill the end -- but within groups of `group` (batch, head) pairs whose K and V fit in L2 together, so
// the CTAs working at one time share a few heads' K and V (each query block of a head reads them again) instead of
// streaming 132 different ones from HBM. `full_groups` groups of exactly `group` pairs come first; the last group
// takes the pairs left, so it can be made large enough that the very end is still longest-first over many tiles.
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

// The groups for a launch of `grid` CTAs: as many (batch, head) pairs as fit their K and V (kv_bytes each: a query
// head's share with GQA) in l2_budget bytes, and a last group of at least tail_grids x grid tiles. (Groups of at
// least 4 x grid tiles, the rule before session 18, put 66 heads' K and V in flight at d256 1k, 66 MB for a 50 MB L2:
// 390 MB read from DRAM where the dense twin reads 204 MB; perf-log v30.)
inline CausalOrder causal_order(int64_t num_bh, int num_m_blocks, int grid, int64_t kv_bytes, int64_t l2_budget,
                                double tail_grids) {
  const int64_t group = std::clamp<int64_t>(l2_budget / std::max<int64_t>(kv_bytes, 1), 1, num_bh);
  const int64_t tail = std::min<int64_t>(num_bh, int64_t(std::ceil(tail_grids * grid / num_m_blocks)));
  return CausalOrder{int(num_bh), num_m_blocks, int(group), int(std::max<int64_t>(0, (num_bh - tail) / group))};
}

// The causal order's last group, in grids of tiles: 2 (perf-log v30), but 1 at d256 when a head has at most 8 query
// blocks (1k rows). There the last group of 2 grids holds 48 heads' K and V, 48 MB for a 50 MB L2, and re-reading them
// costs more than the longer longest-first tail gains (perf-log v79, sm90_dev s51-7 / s51-8: causal 1k 1.3% faster, DRAM
// read 288 -> 250 MB under ncu; at 2k 35 MB fewer but 1.2% slower, at 4k 3% slower, d128 1k-4k 0.3-2.3% slower).
inline double causal_tail_grids(int head_dim, int num_m_blocks) { return head_dim == 256 && num_m_blocks <= 8 ? 1.0 : 2.0; }

// d256 masks with a right edge and no left edge (causal; the dynamic order, no block mask) walk their key blocks upwards
// (fwd_kernel.cuh, Traits::kUpward; perf-log v82): sm90_dev s53-6, paired against the downward walk, causal 1k .98 (with
// causal_l2_budget's groups of two heads), 2k .994, 4k .993; dense was 0.4-1.5% slower upwards, so it stays down.
inline bool use_upward_kernel(int head_dim, bool has_block_mask, int64_t window_left, int64_t window_right) {
  return head_dim == 256 && !has_block_mask && dynamic_tiles(false, window_left, window_right);
}

// The causal order's L2 budget (causal_order): a third of L2 (d64: half; perf-log v30), but two heads' K and V where the
// upward walk's heads have at most 8 query blocks (d256 1k): taken one group after another, a head's tiles then start
// together and read each K/V block at about the same time (ncu s53-6, causal 1k: 227 MB read from DRAM against 267 with
// the third of L2; paired .982 against 1.000, and 1 / 4 MB .983 / .981). At 2k-4k small groups were 2-6% slower.
inline int64_t causal_l2_budget(int head_dim, int num_m_blocks, bool upward, int64_t kv_bytes, int64_t l2_bytes) {
  if (upward && num_m_blocks <= 8) return 2 * kv_bytes;
  return l2_bytes / (head_dim <= 64 ? 2 : 3);
}

// The query rows one launch covers, and its part in a programmatic dependent launch (PDL): launch (fwd_kernel.cuh) tiles
// rows [begin, end) from `begin` (end -1: to seqlen_q). kPdlPrimary: the kernel lets its dependent launch start as soon
// as all its CTAs are running (griddepcontrol.launch_dependents), so the dependent's CTAs take the SMs its CTAs leave;
// kPdlSecondary: launched with programmatic stream serialisation, it may start before the kernel ahead of it in the
// stream has finished (it reads nothing that kernel writes), and each CTA waits for that kernel's end before it exits
// (griddepcontrol.wait), so the pair finishes as one launch would. (Nothing may stand between the two in the stream: a
// memset there would wait for the primary's end and end the overlap.)
// pieces (units > 0): a pair over the static order's tiles instead of rows (perf-log v54): the primary runs the whole
// rounds, tiles [0, pieces.whole) (its launch zeroes the pieces' counters first); the secondary (an instantiation with
// the tail split compiled in) runs only the last round's pieces, waiting for the primary's end before its first count.
struct Rows {
  enum : int { kNoPdl = 0, kPdlPrimary = 1, kPdlSecondary = 2 };
  int32_t begin = 0, end = -1;
  int pdl = kNoPdl;
  TailSplit pieces{};
};

constexpr Shape shape_for(int d, bool sparse = false) {
  for (const Shape& s : sparse ? kSparseShapes : kShapes)
    if (s.head_dim == d) return s;
  return Shape{0, 0, 0};
}

// The static order's last round as a kernel of its own (perf-log v54): below kSplitMinKeys the tail split's code costs
// the dense kernels more than the split gains (sm90_dev s27-3: d128 at 128-key blocks 1k -3%, 2k -5%, 4k +1%), yet the
// standard grid's 2048 d128 tiles leave 68 for a last round on 132 SMs at every length. So d128 on 128-key blocks runs
// as a PDL pair where it pays: the unchanged dense instantiation runs the whole rounds, and the split instantiation of the
// same shape (launch_fwd_split<128>) the last round's pieces behind it, on the SMs the first one leaves. The pieces' own
// kernel has a fixed cost of its own, ~20 us whatever the run (sm90_dev s31-2, the pieces alone at the standard grid's
// runs of 4, 8 and 17 blocks: 32, 43 and 54 us, where a whole tile takes 15, 29 and 57), some 12 key blocks of d128's
// 1.7 us: hence the margin. Measured (s31-1/2, against the 128-key kernel alone): 4k +1.4-1.5%, 2k 0, 1k -5%; d256 (its
// split instantiation behind its dense one) 4k 0, 2k -3%, so d256 stays whole below 8192 keys.
inline constexpr int kPairMargin = 12;
inline TailSplit pair_split(const FwdParams& p, int grid) {
  if (!tail_split_applies(p) || p.seqlen_k >= kSplitMinKeys || p.head_dim != 128) return {};
  return tail_split_for(p, shape_for(128), grid, kPairMargin);
}

// Which instantiation runs a problem: block-sparse masks need the block-sparse one (its producer's scheduler warp turns
// each tile's list into a schedule). It also runs d64 sliding windows with both edges no wider than kListedMaxWindow
// keys, every block of a tile's key range listed: its two consumer warpgroups take 128-row tiles where d64's dense
// instantiation takes 192, and a window tile's key range is the window plus the tile's rows, so a row visits fewer
// keys (128 + 257 against 192 + 257 at (256, 0)), which outweighs the third warpgroup's overlap on such short tiles.
// sm90_dev (perf-log v37), (w, 0) at 4k / 16k: +15 / +9% (w = 256), +8 / +3% (512), +9.5 / -0.8% (768), +10 / -3%
// (1024); causal 1k-16k 8-22% slower, so causal stays on the dense one. Needs shared memory for the schedules
// (smem_limit: the device's opt-in per block).
inline constexpr int64_t kListedMaxWindow = 768;

// The longest list a block mask can hold, in key blocks of 128 (0 without a mask): max_kv_blocks, the lists' capacity, is
// what the host knows of their lengths. The host's choices by list length (use_two_rings, sfu_turns_by_length) read it.
inline int64_t list_blocks_128(const FwdParams& p) {
  return p.has_block_mask ? int64_t(p.block_mask.max_kv_blocks) * (p.block_mask.block_n / 128) : 0;
}

// Which block-sparse problems run on the two-ring instantiation: d64, mask blocks of 128 rows (a multiple of 128 keys),
// lists of at least kTwoRingMinBlocks key blocks of 128 (list_blocks_128), when its four schedules fit (else the
// two-warpgroup kernel, which needs less shared memory, runs them).
// sm90_dev against the two-warpgroup kernel since v40 (a K/V loader per ring and a Q loader, s22-3): 3 blocks per list
// (4k, s = 0.1) 2-3% slower, 6 (8k, 0.1) 4-6% faster, 8 (4k, 0.25) 2-3%, 13 (16k, 0.1) 11%, 16 (4k, 0.5) 7%,
// 64 (16k, 0.5) 14%. (v39, one loader, s21-8: 8 blocks the same, 3 8% slower; the threshold was 12.) Since v49, 3
// blocks measured 0-2% faster on two rings in sm90_dev (s27-3, s27-5, s28-1), but with the threshold at 3 fa-bench's
// interleaved masks (s30-4) put 4k s = 0.1 at .165 of dense against .163 (s28): no gain, so it stayed at 6. Since v73
// (the two-ring loop 4-10% faster, the two-warpgroup kernel unchanged) 3 blocks measured 0-2% (s40-3) and 2-4% (s41-2:
// .0857 / .0850 against .0893 / .0876 ms) faster on two rings: the threshold is 3 (perf-log v74). Lists of 1 or 2
// blocks (seqlen_k <= 2.5k at s = .1) were not measured and stay on two warpgroups.
inline constexpr int64_t kTwoRingMinBlocks = 3;

// The two-ring kernel's tail plan (fwd_kernel.cuh ring_tile; perf-log "the two-ring tail", session 67). Its tiles are 192
// rows, and a head of seqlen_q = 192 F + 64 rows is F whole tiles and one of 64 rows. When the F x num_bh whole tiles
// overflow whole rounds of the grid by c <= num_bh tiles, c CTAs run a round of whole tiles after every other CTA has
// finished (d64 4k s = .1, batch 2 x 32 heads: 1344 = 10 x 132 + 24), and the 64-row tiles do not fill it. The plan
// takes c heads' last whole tile and their 64-row tile as two 128-row tiles instead, and hands every tile under 192 rows
// out after the whole ones: the whole tiles then fill rounds exactly, and each CTA ends on at most one small tile
// (num_bh + c of them, at most one a CTA). Needs F - 1 even (the 128-row tiles start at 192 (F - 1), a multiple of 128:
// one mask row block each). Returns c (0: the plain order).
inline int ring_tail_plan(int64_t seqlen_q, int64_t num_bh, int grid) {
  if (grid <= 0 || seqlen_q % 192 != 64) return 0;
  const int64_t f = seqlen_q / 192;
  if (f < 3 || (f - 1) % 2 != 0) return 0;
  const int64_t c = (f * num_bh) % grid;
  if (c == 0 || c > num_bh || num_bh + c > grid || f * num_bh < grid) return 0;
  return int(c);
}

// The two-ring kernel's tile order (fwd_kernel.cuh ring_tile): work tile x -> (batch * heads + head) bh, its first group
// of 64 rows g and its groups (1-3; rows past seqlen_q are clipped by the kernel). Without a plan (tail_heads = 0): each
// (batch, head)'s num_m_blocks tiles of 3 groups together, from its last down. With one (ring_tail_plan, seqlen_q =
// 192 F + 64, num_m_blocks = F + 1): the whole tiles of every head first, F each for the first num_bh - c heads and F - 1
// for the last c, each head's from its last down; then those c heads' last 256 rows as two tiles of 2 groups (g = 3 (F -
// 1), + 2); then the other heads' last 64 rows, one group at g = 3 F. The tile count is the same either way.
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
inline bool use_two_rings(const FwdParams& p, int64_t smem_limit) {
  if (!p.has_block_mask || p.head_dim != 64 || p.block_mask.block_m != 128 || p.block_mask.block_n % 128 != 0) return false;
  if (list_blocks_128(p) < kTwoRingMinBlocks) return false;
  return kTwoRingShape.smem_bytes(true) + sparse_extra_bytes(p.seqlen_k, kTwoRingShape.block_n, p.block_mask.block_n, 2) <=
         smem_limit;
}

// Which d128 block-sparse problems run on the instantiation whose warpgroups take turns at the SFU (fwd_kernel.cuh,
// SfuTurnsOn; perf-log v59): lists of at least kSfuTurnsMinBlocks key blocks of 128 (list_blocks_128, as
// use_two_rings). sm90_dev s33-5 and s33-8, against the kernel without them: 16-64 blocks +1.3-4.5%, 6 and 8 +0.6-3.9%;
// lists of 3 blocks (4k, s = .1) measured from 3.9% slower to 2.4% faster with them (s33-2 .. s33-4), so they keep the
// kernel without.
inline constexpr int64_t kSfuTurnsMinBlocks = 6;
inline bool sfu_turns_by_length(const FwdParams& p) {
  return list_blocks_128(p) >= kSfuTurnsMinBlocks;
}

// d64 dense's two-kernel form (perf-log v53). Its 192-row tiles leave seqlen_q mod 192 real rows in each (batch, head)'s
// last query block: at 1k, 4k and 16k 64 of 192, so a sixth of the 1k tiles were two-thirds empty at a full tile's cost
// (session 29 packed them into shared tiles inside the kernel: its consumers spilled, perf-log v52). Instead the
// three-warpgroup kernel runs rows [0, rows_a) of every (batch, head), a multiple of 192, and a two-warpgroup
// instantiation (kRowsShape) the rest on 128-row tiles, launched behind it with PDL so its CTAs fill the SMs the first
// one's tail leaves. Where seqlen_q mod 192 is r in 1..64 the last 192 + r rows (two 128-row tiles) go to the
// second kernel, in 65..128 the last r (one); otherwise (0, or > 128: under 64 junk rows) nothing is split. -1: no
// split (not d64, or a mask or window). Rows 0: the second kernel alone (seqlen_q <= 128).
// sm90_dev (s30-3, against the three-warpgroup kernel alone): 1k +4.0%, 4k +1.4%, 2k / 8k / 16k within 0.3%; interleaved
// with cuDNN, d64 dense 1k .98 -> 1.01. The block-sparse instantiation as the second kernel measured 0.1-0.4% behind
// this one, without PDL 8k and 16k 4% slower (the second kernel's one round of long tiles then runs alone), its tiles
// from a counter in the workspace (zeroed before the primary) no faster than the static order (s30-1, s30-2).
inline constexpr Shape kRowsShape{64, 128, 4, 2, 1};
inline int64_t d64_split_rows(const FwdParams& p) {
  if (p.head_dim != 64 || !tail_split_applies(p) || p.seqlen_q <= 0) return -1;
  const int64_t q = p.seqlen_q / 192, r = p.seqlen_q % 192;
  if (r == 0 || r > 128) return -1;
  return 192 * (r <= 64 ? std::max<int64_t>(q - 1, 0) : q);
}

// d64 causal's first rows (perf-log v76). Under a right-edged mask without a left edge the 192-row tiles end at
// seqlen_q, so the first r = seqlen_q mod 192 rows of every (batch, head) make a partial tile: one key block, 64 real
// rows of 192, at a whole tile's fixed cost -- 512 of the standard grid's 3072 tiles at 1k, 6% of its time (sm90_dev
// s39-3, s46-3). Where r is 1..64 and those rows see at most 128 keys, they run as a problem of their own (rows_view) on
// a small sm80-bodied kernel (top_rows.cuh: 64 x 64 tiles, 4 warps), launched behind the three-warpgroup kernel with
// PDL so that its CTAs take the SMs the first one's tail leaves; the three-warpgroup kernel runs rows [r, seqlen_q),
// whole tiles. Measured (sm90_dev s46-2..4, against the three-warpgroup kernel on every row): 1k 2.2-3.0% faster; 4k
// and 16k within 0.2% (there the partial tiles fill the tail anyway), hence the bound kTopRowsMaxSeqlen. The same rows
// on the two-warpgroup sm90 kernel (128-row tiles, v55) gained under 1%; on the sm80 kernel without PDL 1%. 0: no split.
inline constexpr int64_t kTopRowsMaxSeqlen = 2048;
inline int64_t d64_causal_top_rows(const FwdParams& p) {
  if (p.head_dim != 64 || p.has_block_mask || p.window_right < 0 || p.window_left >= 0) return 0;
  if (p.seqlen_q < 192 || p.seqlen_q >= kTopRowsMaxSeqlen || p.batch > 65535 || p.heads_q > 65535) return 0;
  const int64_t r = p.seqlen_q % 192;
  if (r == 0 || r > 64) return 0;
  // Row r - 1, the top rows' last, sees keys up to r - 1 + diag_offset + window_right.
  if (r + p.diag_offset + p.window_right > 128) return 0;
  return r;
}

// Rows [begin, end) of a problem as a problem of its own: Q, O and LSE from row begin, and the diagonal moved with them
// so that every row keeps its keys (params.h: row i sees j against i + diag_offset).
inline FwdParams rows_view(const FwdParams& p, int64_t begin, int64_t end) {
  const int64_t bytes = p.dtype == DType::FP32 ? 4 : 2;
  FwdParams s = p;
  s.q = static_cast<const char*>(p.q) + begin * p.q_row_stride * bytes;
  s.o = static_cast<char*>(p.o) + begin * p.o_row_stride * bytes;
  if (p.lse != nullptr) s.lse = p.lse + begin * p.lse_row_stride;
  s.seqlen_q = int32_t(end - begin);
  s.diag_offset = p.diag_offset + begin;
  return s;
}

// d128 problems with at least kLongMinKeys keys and no block mask or left window edge (dense and causal-like) run on the
// 192-key-block instantiation (kLongShape).
inline bool use_long_kernel(const FwdParams& p) {
  return p.head_dim == 128 && !p.has_block_mask && p.window_left < 0 && p.seqlen_k >= kLongMinKeys;
}

inline bool use_listed_kernel(const FwdParams& p, int64_t smem_limit) {
  if (p.has_block_mask) return true;
  if (p.head_dim != 64 || p.window_left < 0 || p.window_right < 0) return false;
  if (p.window_left >= kListedMaxWindow || p.window_right >= kListedMaxWindow ||
      p.window_left + p.window_right + 1 > kListedMaxWindow)
    return false;
  const Shape s = shape_for(64, true);
  return s.smem_bytes(true) + sparse_extra_bytes(p.seqlen_k, s.block_n, s.block_n) <= smem_limit;
}

}  // namespace flash::sm90
