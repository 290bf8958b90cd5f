// libflash/cuda/sm90/fwd/plan.h -- which Hopper forward kernels run a problem, and how: the one decision that the support
// check, the workspace query and the launch all take from plan() (plan.cpp). Host code, shared with the kernel's traits
// (the variants' tile shapes) and tests/test_sm90_host.cpp. Why each choice: docs/kernels.md "Tuning: sm90 forward".
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "../../../params.h"
#include "schedule.h"

namespace flash::sm90 {

// ---- The compiled kernels ------------------------------------------------------------------------------------------
// One instantiation per variant and dtype (generate_kernels.py). All are the same warp-specialised kernel (kernel.cuh)
// with the options traits.h derives from the variant, except kD64TopRows (an sm80-bodied kernel, top_rows.cuh).
enum class Variant : int {
  kD64,              // dense, causal, windows: 192-row tiles on three consumer warpgroups
  kD64Rows,          // dense: the rows kD64's 192-row tiles leave, on 128-row tiles (its PDL secondary)
  kD64Listed,        // block-sparse masks, and windows of <= kListedMaxWindow keys: 128-row tiles, a scheduler warp
  kD64TwoRings,      // block-sparse, 128-row mask blocks, long lists: 192-row tiles, a K/V ring per mask row block
  kD64TopRows,       // causal: the first seqlen_q % 192 rows of every head (kD64's PDL secondary)
  kD128,             // 128-key blocks: dense and causal below kLongMinKeys keys, windows
  kD128Pieces,       // dense: the split last round's pieces behind kD128's whole rounds (its PDL secondary)
  kD128Sparse,       // block-sparse, O staged in Q
  kD128SparseTurns,  // block-sparse lists of >= kSfuTurnsMinBlocks: the same with turns at the SFU
  kD128Long,         // 192-key blocks: causal from kLongMinKeys keys
  kD128LongSplit,    // 192-key blocks: dense from kLongMinKeys keys, the last round split
  kD256,             // 80-key blocks: dense below kSplitMinKeys keys, windows
  kD256Split,        // dense from kSplitMinKeys keys, the last round split
  kD256Up,           // causal: key blocks walked upwards
  kD256Sparse,       // block-sparse: 64-key blocks
  kNone,
};

// A variant's tile: rows per tile 64 x consumers (one warpgroup a 64-row slice), keys per block, ring stages, and where O
// is staged for its TMA store (store_o: 0 none -- direct stores; 1 a tile after the K/V ring; 2 each warpgroup's rows of
// the Q buffer; 3 the last key block's K/V ring slots).
struct Shape {
  int head_dim = 0, block_n = 0, stages = 0, consumers = 2, store_o = 0;
  bool sparse = false;  // a scheduler warp turns each tile's block list into a schedule in shared memory
  constexpr int block_m() const { return 64 * consumers; }
  constexpr int rings() const { return sparse && consumers == 3 ? 2 : 1; }  // a K/V ring per mask row block a tile spans
  constexpr int o_stage_bytes() const { return store_o == 1 ? block_m() * head_dim * 2 : 0; }
  // Two Q buffers (the next tile's Q loads during this one) where they fit in 227 KB with the O staging tile, or 4 KB
  // left for block-sparse schedules.
  constexpr int q_stages() const {
    return (2 * block_m() + 2 * rings() * stages * block_n) * head_dim * 2 + 1024 + (sparse ? 4096 : 0) +
                       o_stage_bytes() <= kHopperSmemOptin
               ? 2 : 1;
  }
  // Q + K/V ring(s) + O staging + alignment slack (block-sparse kernels add their schedules: sparse_extra_bytes).
  constexpr int smem_bytes() const {
    return (q_stages() * block_m() + 2 * rings() * stages * block_n) * head_dim * 2 + 1024 + o_stage_bytes();
  }
};
constexpr Shape shape_of(Variant v) {
  switch (v) {
    case Variant::kD64: return {64, 128, 4, 3, 1};
    case Variant::kD64Rows: return {64, 128, 4, 2, 1};
    case Variant::kD64Listed: return {64, 128, 4, 2, 1, true};
    case Variant::kD64TwoRings: return {64, 128, 2, 3, 1, true};
    case Variant::kD128:
    case Variant::kD128Pieces: return {128, 128, 2, 2, 1};
    case Variant::kD128Sparse:
    case Variant::kD128SparseTurns: return {128, 128, 2, 2, 2, true};
    case Variant::kD128Long:
    case Variant::kD128LongSplit: return {128, 192, 2, 2, 3};
    case Variant::kD256:
    case Variant::kD256Split:
    case Variant::kD256Up: return {256, 80, 2, 2, 3};
    case Variant::kD256Sparse: return {256, 64, 2, 2, 0, true};
    default: return {};
  }
}
// The variants with the split last round compiled in (its pieces' epilogue costs 1-3.5% wherever it is compiled in).
constexpr bool has_tail_split(Variant v) {
  return v == Variant::kD128Pieces || v == Variant::kD128LongSplit || v == Variant::kD256Split;
}
// The general variants, each also compiled in a varlen mode (Traits<V, T, true>) that plan() picks for varlen calls.
constexpr bool has_varlen_mode(Variant v) { return v == Variant::kD64 || v == Variant::kD128 || v == Variant::kD256; }
const char* variant_name(Variant v);

// Block-sparse kernels add, after their tiles, two schedules per ring (1 + ceil(seqlen_k / block_n) ints each: the
// scheduler builds tile i+1's while the consumers read tile i's) and a bitmap over the mask's key blocks.
inline int64_t sparse_sched_stride(int64_t seqlen_k, int block_n) { return 1 + (seqlen_k + block_n - 1) / block_n; }
inline int64_t sparse_extra_bytes(int64_t seqlen_k, int block_n, int64_t mask_block_n, int rings = 1) {
  const int64_t mask_blocks = (seqlen_k + mask_block_n - 1) / mask_block_n;
  return (2 * rings * 4 * sparse_sched_stride(seqlen_k, block_n) + 4 * (mask_blocks / 32 + 1) + 15) / 16 * 16;
}
// The dynamic order's counter: a 64-bit word, with room to align it in a caller's workspace.
inline constexpr size_t kTileCounterBytes = 16;

// ---- The plan ------------------------------------------------------------------------------------------------------
// What plan() needs of the device (runtime.h reads it; tests make their own).
struct Device {
  int sms = kHopperSms;                   // persistent CTAs (LIBFLASH_MAX_CTAS caps it)
  int64_t smem_optin = kHopperSmemOptin;  // shared memory per block with the opt-in
  int64_t l2_bytes = 50 << 20;            // (H100: 50 MB; H200: 60 MB)
};

// One kernel launch: everything the launch (launch.cuh) writes into the kernel's arguments, decided here.
struct Launch {
  enum Pdl : int { kNoPdl = 0, kPrimary = 1, kSecondary = 2 };
  // How a launch takes part in a split last round: kRounds runs the whole rounds only (a pair's primary), kPieces the
  // pieces only (its secondary), kBoth both (a split instantiation alone).
  enum Tail : int { kNoTail = 0, kRounds, kPieces, kBoth };
  Variant variant = Variant::kNone;
  int32_t row_begin = 0, row_end = 0;  // the launch runs query rows [row_begin, row_end) as a problem of its own
  Pdl pdl = kNoPdl;                    // its part in a programmatic-dependent-launch pair
  int grid = 0;                        // persistent CTAs
  int32_t num_m_blocks = 0, num_tiles = 0;
  int32_t q_shift = 0;                 // right-edged masks: tiles end at row_end, the first starts at -q_shift
  bool dynamic = false;                // tiles from a counter in the workspace (causal-like, block-sparse)
  Tail tail_role = kNoTail;
  TailSplit tail{};
  int32_t ring_tail_heads = 0;         // two rings: ring_tail_plan
  CausalOrder causal{};                // causal-like masks: the L2 groups
  int32_t sched_stride = 0;            // block-sparse: ints per schedule
  int64_t smem_bytes = 0;
};
struct FwdPlan {
  Launch launch[2];
  int launches = 0;      // 0: nothing to do (empty problem) or unsupported (why non-empty)
  size_t workspace = 0;  // bytes, from the caller's pointer
  std::string why;       // non-empty: sm90 does not run this problem
  bool ok() const { return why.empty(); }
};
FwdPlan plan(const FwdParams& p, const Device& dev);

// Rows [begin, end) of a problem as a problem of its own: Q, O and LSE from row begin, and the diagonal moved with them
// so that every row keeps its keys.
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

// ---- The choices plan() makes, exposed for tests/test_sm90_host.cpp --------------------------------------------------
// Tiles of unequal length -- causal-like masks (a right edge, no left edge) and block-sparse ones -- come from a counter.
inline bool dynamic_tiles(bool has_block_mask, int64_t window_left, int64_t window_right) {
  return has_block_mask || (window_right >= 0 && window_left < 0);
}
// The static order with every tile visiting the same key blocks (no window, no block mask) may split its last round.
inline bool tail_split_applies(const FwdParams& p) { return !p.has_block_mask && p.window_left < 0 && p.window_right < 0; }
inline constexpr int64_t kSplitMinKeys = 8192;   // d128 and d256 dense split instantiations from here
inline constexpr int64_t kLongMinKeys = 8192;    // d128's 192-key blocks from here
inline constexpr int kPairMargin = 12;           // d128 pieces kernel: its fixed cost, ~12 key blocks
inline constexpr int64_t kListedMaxWindow = 768;    // d64 windows on the block-sparse kernel's 128-row tiles
inline constexpr int64_t kTwoRingMinBlocks = 3;     // d64 block-sparse lists on two rings
inline constexpr int64_t kSfuTurnsMinBlocks = 6;    // d128 block-sparse lists with SFU turns
inline constexpr int64_t kTopRowsMaxSeqlen = 2048;  // d64 causal's top rows apart below this
bool use_split_kernel(const FwdParams& p);
bool use_long_kernel(const FwdParams& p);
bool use_upward_kernel(int head_dim, bool has_block_mask, int64_t window_left, int64_t window_right);
bool use_listed_kernel(const FwdParams& p, int64_t smem_limit);
bool use_two_rings(const FwdParams& p, int64_t smem_limit);
bool sfu_turns_by_length(const FwdParams& p);
int64_t list_blocks_128(const FwdParams& p);
int64_t d64_split_rows(const FwdParams& p);
int64_t d64_causal_top_rows(const FwdParams& p);
TailSplit tail_split_for(const FwdParams& p, const Shape& s, int grid, int margin = -1);
TailSplit pair_split(const FwdParams& p, int grid);

}  // namespace flash::sm90
