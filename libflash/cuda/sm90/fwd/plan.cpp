// libflash/cuda/sm90/fwd/plan.cpp -- plan(): which Hopper forward kernels run a problem and with which grid, tile order,
// split and workspace. sm90.cpp's support check, workspace query and launch all call it, so they cannot disagree. The
// measurements behind each threshold: docs/kernels.md "Tuning: sm90 forward".
#include "plan.h"

#include <algorithm>
#include <string>

namespace flash::sm90 {

const char* variant_name(Variant v) {
  switch (v) {
    case Variant::kD64: return "d64";
    case Variant::kD64Rows: return "d64-rows";
    case Variant::kD64Listed: return "d64-listed";
    case Variant::kD64TwoRings: return "d64-two-rings";
    case Variant::kD64TopRows: return "d64-top-rows";
    case Variant::kD128: return "d128";
    case Variant::kD128Pieces: return "d128-pieces";
    case Variant::kD128Sparse: return "d128-sparse";
    case Variant::kD128SparseTurns: return "d128-sparse-turns";
    case Variant::kD128Long: return "d128-long";
    case Variant::kD128LongSplit: return "d128-long-split";
    case Variant::kD256: return "d256";
    case Variant::kD256Split: return "d256-split";
    case Variant::kD256Up: return "d256-up";
    case Variant::kD256Sparse: return "d256-sparse";
    default: return "none";
  }
}

namespace {

constexpr Shape dense_shape(int d) {
  return d == 64 ? shape_of(Variant::kD64) : d == 128 ? shape_of(Variant::kD128) : d == 256 ? shape_of(Variant::kD256) : Shape{};
}
constexpr Shape sparse_shape(int d) {
  return d == 64    ? shape_of(Variant::kD64Listed)
         : d == 128 ? shape_of(Variant::kD128Sparse)
         : d == 256 ? shape_of(Variant::kD256Sparse)
                    : Shape{};
}
int64_t tiles_of(const FwdParams& p, const Shape& s) {
  return (int64_t(p.seqlen_q) + s.block_m() - 1) / s.block_m() * p.heads_q * p.batch;
}
int grid_for(const FwdParams& p, const Shape& s, const Device& dev) { return persistent_grid(tiles_of(p, s), dev.sms); }

// TMA: base addresses 16-byte aligned, every stride that steps (extent > 1) a positive multiple of 16 bytes below 2^40
// (a broadcast input with stride 0 goes to sm80).
bool tma_layout(const void* ptr, std::initializer_list<std::pair<int64_t, int64_t>> stride_extent) {
  if (reinterpret_cast<uintptr_t>(ptr) % 16 != 0) return false;
  for (const auto& [stride, extent] : stride_extent)
    if (extent > 1 && (stride <= 0 || stride % 8 != 0 || stride * 2 >= (int64_t(1) << 40))) return false;
  return true;
}

std::string unsupported(const FwdParams& p, const Device& dev) {
  if (p.dtype != DType::FP16 && p.dtype != DType::BF16) return "supports fp16 and bf16 only";
  // The kernel keeps the running max of the raw scores (the scale folded into exp2's FFMA), which is the max of the
  // scaled ones only for a positive scale; sm80 folds a negative one into Q's sign.
  if (p.scale < 0.f) return "softmax_scale must be positive (sm80 runs negative scales)";
  if (p.varlen && p.has_block_mask) return "varlen calls take no block mask";
  const bool listed = !p.varlen && use_listed_kernel(p, dev.smem_optin);
  const Shape s = !p.varlen && use_long_kernel(p) ? shape_of(Variant::kD128Long)
                  : listed                        ? sparse_shape(p.head_dim)
                                                  : dense_shape(p.head_dim);
  if (s.head_dim == 0) return "head_dim " + std::to_string(p.head_dim) + " is not 64, 128 or 256 (sm80 runs the others)";
  if (dev.smem_optin < s.smem_bytes()) return "needs " + std::to_string(s.smem_bytes()) + " bytes of shared memory per block";
  // A varlen call's tensors are packed: total rows, one "batch" (launch.cuh encodes them so).
  const int64_t batch = p.varlen ? 1 : p.batch;
  const int64_t rows_q = p.varlen ? p.total_q : p.seqlen_q, rows_k = p.varlen ? p.total_k : p.seqlen_k;
  if (!tma_layout(p.q, {{p.q_batch_stride, batch}, {p.q_row_stride, rows_q}, {p.q_head_stride, p.heads_q}}) ||
      !tma_layout(p.k, {{p.k_batch_stride, batch}, {p.k_row_stride, rows_k}, {p.k_head_stride, p.heads_kv}}) ||
      !tma_layout(p.v, {{p.v_batch_stride, batch}, {p.v_row_stride, rows_k}, {p.v_head_stride, p.heads_kv}}) ||
      !tma_layout(p.o, {{p.o_batch_stride, batch}, {p.o_row_stride, rows_q}, {p.o_head_stride, p.heads_q}}))
    return "TMA needs 16-byte aligned q/k/v/o pointers and nonzero batch/row/head strides that are multiples of 8 elements";
  if (p.seqlen_q > (1 << 30) || p.seqlen_k > (1 << 30)) return "sequence lengths above 2^30 exceed TMA's 32-bit coordinates";
  // (A sequence's first row plus a row of it stays below 2^31.)
  if (rows_q > (1 << 30) || rows_k > (1 << 30)) return "packed tensors of more than 2^30 rows exceed TMA's 32-bit coordinates";
  if (p.has_block_mask) {
    const Shape ss = sparse_shape(p.head_dim);
    if (p.block_mask.block_m % 128 != 0 || p.block_mask.block_n % ss.block_n != 0)
      return "block-sparse masks need block_m a multiple of 128 and block_n a multiple of " + std::to_string(ss.block_n) +
             " at head_dim " + std::to_string(p.head_dim) + " (mask has " + std::to_string(p.block_mask.block_m) + " x " +
             std::to_string(p.block_mask.block_n) + ")";
    const int64_t need = ss.smem_bytes() + sparse_extra_bytes(p.seqlen_k, ss.block_n, p.block_mask.block_n);
    if (need > dev.smem_optin)
      return "block-sparse schedule for seqlen_k " + std::to_string(p.seqlen_k) + " needs " + std::to_string(need) +
             " bytes of shared memory per block, more than the device's " + std::to_string(dev.smem_optin);
  }
  return {};
}

// The rest of a launch once its variant, rows and PDL part are chosen: tiles, grid, tile order, split, shared memory.
// `pair`: the d128 pair's split (kRounds for its primary, kPieces for its secondary).
Launch make_launch(const FwdParams& whole, Variant v, int64_t row_begin, int64_t row_end, Launch::Pdl pdl, const Device& dev,
                   Launch::Tail pair_role = Launch::kNoTail, const TailSplit& pair = {}) {
  const FwdParams p = rows_view(whole, row_begin, row_end);
  const Shape s = shape_of(v);
  Launch l;
  l.variant = v, l.row_begin = int32_t(row_begin), l.row_end = int32_t(row_end), l.pdl = pdl;
  l.num_m_blocks = int32_t((int64_t(p.seqlen_q) + s.block_m() - 1) / s.block_m());
  // Right-edged masks: a row's key range grows with the row, so the tiles end at seqlen_q and the partial one comes
  // first, where it has the fewest keys. The shift is whole warpgroups' 64 rows, so each warpgroup's O box lies wholly
  // before row 0 (not stored) or wholly at or after it. Block-sparse tiles stay aligned to the mask's blocks.
  // (Varlen: no shift; the tiles start at each sequence's first row.)
  l.q_shift = !p.varlen && !p.has_block_mask && p.window_right >= 0 ? (l.num_m_blocks * s.block_m() - p.seqlen_q) / 64 * 64 : 0;
  const int64_t tiles = int64_t{l.num_m_blocks} * p.heads_q * p.batch;
  l.num_tiles = int32_t(tiles);  // (plan() refused more than 2^31 - 1)
  l.dynamic = dynamic_tiles(p.has_block_mask, p.window_left, p.window_right);
  l.grid = persistent_grid(tiles, dev.sms);
  l.smem_bytes = s.smem_bytes();
  if (s.sparse) {
    l.sched_stride = int32_t(sparse_sched_stride(p.seqlen_k, s.block_n));
    l.smem_bytes += sparse_extra_bytes(p.seqlen_k, s.block_n, p.has_block_mask ? p.block_mask.block_n : s.block_n, s.rings());
  }
  if (v == Variant::kD64TwoRings) l.ring_tail_heads = ring_tail_plan(p.seqlen_q, int64_t(p.heads_q) * p.batch, l.grid);
  if (pair_role != Launch::kNoTail) {
    l.tail_role = pair_role, l.tail = pair;
    if (pair_role == Launch::kRounds) l.num_tiles = pair.whole;
  } else if (has_tail_split(v) && tail_split_applies(p) && !l.dynamic) {
    l.tail = tail_split_for(p, s, l.grid);
    if (l.tail.units > 0) l.tail_role = Launch::kBoth;
  }
  // Dense problems with no tail of their own run their rounds on the fewest CTAs that keep their count; the split and the
  // pairs keep one CTA per SM, their plans are made for it.
  // (Varlen: tiles past their sequence's end are skipped, so the launch keeps one CTA per SM.)
  if (l.tail_role == Launch::kNoTail && pdl == Launch::kNoPdl && !s.sparse && !l.dynamic && tail_split_applies(p) &&
      !p.varlen)
    l.grid = balanced_grid(tiles, l.grid);
  // The causal order's groups: K and V of a group within the L2 budget, a last group of tail_grids x grid tiles.
  const int64_t kv_bytes = int64_t(p.seqlen_k) * p.head_dim * 2 * 2 / p.head_ratio;
  const int64_t l2 = std::max<int64_t>(dev.l2_bytes, 1 << 20);
  const int64_t budget = causal_l2_budget(p.head_dim, l.num_m_blocks, v == Variant::kD256Up, kv_bytes, l2);
  l.causal = causal_order(int64_t(p.heads_q) * p.batch, l.num_m_blocks, l.grid, kv_bytes, budget,
                          causal_tail_grids(p.head_dim, l.num_m_blocks));
  return l;
}

// The workspace one launch needs from the caller's pointer.
size_t launch_workspace(const Launch& l) {
  if (l.dynamic) return kTileCounterBytes;
  if (l.tail_role == Launch::kNoTail) return 0;
  const Shape s = shape_of(l.variant);
  return size_t(tail_workspace_bytes(l.tail, l.grid, s.head_dim, s.consumers));
}

}  // namespace

bool use_split_kernel(const FwdParams& p) {
  return tail_split_applies(p) && p.seqlen_k >= kSplitMinKeys && (p.head_dim == 128 || p.head_dim == 256);
}
bool use_long_kernel(const FwdParams& p) {
  return p.head_dim == 128 && !p.has_block_mask && p.window_left < 0 && p.seqlen_k >= kLongMinKeys;
}
bool use_upward_kernel(int head_dim, bool has_block_mask, int64_t window_left, int64_t window_right) {
  return head_dim == 256 && !has_block_mask && dynamic_tiles(false, window_left, window_right);
}
// Block-sparse masks, and d64 windows with both edges no wider than kListedMaxWindow keys (every block of a tile's range
// listed), when the schedules fit.
bool use_listed_kernel(const FwdParams& p, int64_t smem_limit) {
  if (p.has_block_mask) return true;
  if (p.head_dim != 64 || p.window_left < 0 || p.window_right < 0) return false;
  if (p.window_left >= kListedMaxWindow || p.window_right >= kListedMaxWindow ||
      p.window_left + p.window_right + 1 > kListedMaxWindow)
    return false;
  const Shape s = shape_of(Variant::kD64Listed);
  return s.smem_bytes() + sparse_extra_bytes(p.seqlen_k, s.block_n, s.block_n) <= smem_limit;
}
// The longest list a block mask can hold, in key blocks of 128 (0 without a mask).
int64_t list_blocks_128(const FwdParams& p) {
  return p.has_block_mask ? int64_t(p.block_mask.max_kv_blocks) * (p.block_mask.block_n / 128) : 0;
}
bool use_two_rings(const FwdParams& p, int64_t smem_limit) {
  if (!p.has_block_mask || p.head_dim != 64 || p.block_mask.block_m != 128 || p.block_mask.block_n % 128 != 0) return false;
  if (list_blocks_128(p) < kTwoRingMinBlocks) return false;
  const Shape s = shape_of(Variant::kD64TwoRings);
  return s.smem_bytes() + sparse_extra_bytes(p.seqlen_k, s.block_n, p.block_mask.block_n, 2) <= smem_limit;
}
bool sfu_turns_by_length(const FwdParams& p) { return list_blocks_128(p) >= kSfuTurnsMinBlocks; }
// d64 dense: rows [0, rows_a) on kD64's whole 192-row tiles, the rest on kD64Rows behind it. seqlen_q mod 192 = r in
// 1..64: the last 192 + r rows go to the second kernel, in 65..128 the last r; otherwise (0, or > 128) nothing is split.
// -1: no split; 0: the second kernel alone (seqlen_q <= 128).
int64_t d64_split_rows(const FwdParams& p) {
  if (p.head_dim != 64 || !tail_split_applies(p) || p.seqlen_q <= 0) return -1;
  const int64_t q = p.seqlen_q / 192, r = p.seqlen_q % 192;
  if (r == 0 || r > 128) return -1;
  return 192 * (r <= 64 ? std::max<int64_t>(q - 1, 0) : q);
}
// d64 causal: the first r = seqlen_q mod 192 rows (a partial tile seeing one key block) on the top-rows kernel, where r
// is 1..64 and those rows see at most 128 keys. 0: no split.
int64_t d64_causal_top_rows(const FwdParams& p) {
  if (p.head_dim != 64 || p.has_block_mask || p.window_right < 0 || p.window_left >= 0) return 0;
  if (p.seqlen_q < 192 || p.seqlen_q >= kTopRowsMaxSeqlen || p.batch > 65535 || p.heads_q > 65535) return 0;
  const int64_t r = p.seqlen_q % 192;
  if (r == 0 || r > 64) return 0;
  if (r + p.diag_offset + p.window_right > 128) return 0;  // row r - 1 sees keys up to r - 1 + diag + window_right
  return r;
}
TailSplit tail_split_for(const FwdParams& p, const Shape& s, int grid, int margin) {
  return tail_split(tiles_of(p, s), grid, (int64_t(p.seqlen_k) + s.block_n - 1) / s.block_n,
                    margin >= 0 ? margin : tail_split_margin(s.head_dim));
}
// d128 dense below kSplitMinKeys: the last round's pieces as a kernel of their own behind the whole rounds, where the
// split saves more than that kernel's fixed cost (kPairMargin key blocks).
TailSplit pair_split(const FwdParams& p, int grid) {
  if (!tail_split_applies(p) || p.seqlen_k >= kSplitMinKeys || p.head_dim != 128) return {};
  return tail_split_for(p, shape_of(Variant::kD128), grid, kPairMargin);
}

FwdPlan plan(const FwdParams& p, const Device& dev) {
  FwdPlan out;
  out.why = unsupported(p, dev);
  if (!out.ok() || p.seqlen_q == 0 || p.batch == 0 || p.heads_q == 0) return out;
  auto one = [&](Variant v) { out.launch[out.launches++] = make_launch(p, v, 0, p.seqlen_q, Launch::kNoPdl, dev); };
  const int d = p.head_dim;
  if (p.varlen) {
    // Packed variable-length batches: the general kernel of the head dim, its varlen mode (Traits::kVarlen) -- tiles over
    // max_seqlen_q's query blocks x heads x sequences, each addressing its own sequence; no split, pair or other variant.
    one(d == 64 ? Variant::kD64 : d == 128 ? Variant::kD128 : Variant::kD256);  // (has_varlen_mode)
    out.workspace = launch_workspace(out.launch[0]);
    if (int64_t{out.launch[0].num_m_blocks} * p.heads_q * p.batch > 0x7fffffff) {
      out.launches = 0;
      out.why = "more than 2^31 - 1 query tiles";
    }
    return out;
  }
  const bool listed = use_listed_kernel(p, dev.smem_optin);
  if (use_two_rings(p, dev.smem_optin)) {
    one(Variant::kD64TwoRings);
  } else if (use_long_kernel(p)) {
    one(use_split_kernel(p) ? Variant::kD128LongSplit : Variant::kD128Long);
  } else if (d == 256 && use_split_kernel(p)) {
    one(Variant::kD256Split);
  } else if (const int64_t rows_a = listed ? -1 : d64_split_rows(p); rows_a == 0) {
    one(Variant::kD64Rows);
  } else if (rows_a > 0) {
    out.launch[0] = make_launch(p, Variant::kD64, 0, rows_a, Launch::kPrimary, dev);
    out.launch[1] = make_launch(p, Variant::kD64Rows, rows_a, p.seqlen_q, Launch::kSecondary, dev);
    out.launches = 2;
  } else if (const int64_t r = listed ? 0 : d64_causal_top_rows(p); r > 0) {
    out.launch[0] = make_launch(p, Variant::kD64, r, p.seqlen_q, Launch::kPrimary, dev);
    Launch top;
    top.variant = Variant::kD64TopRows, top.row_begin = 0, top.row_end = int32_t(r), top.pdl = Launch::kSecondary;
    out.launch[1] = top;
    out.launches = 2;
  } else if (const TailSplit t = listed ? TailSplit{} : pair_split(p, grid_for(p, shape_of(Variant::kD128), dev));
             t.units > 0) {
    out.launch[0] = make_launch(p, Variant::kD128, 0, p.seqlen_q, Launch::kPrimary, dev, Launch::kRounds, t);
    out.launch[1] = make_launch(p, Variant::kD128Pieces, 0, p.seqlen_q, Launch::kSecondary, dev, Launch::kPieces, t);
    out.launches = 2;
  } else if (!listed && use_upward_kernel(d, p.has_block_mask, p.window_left, p.window_right)) {
    one(Variant::kD256Up);
  } else if (d == 64) {
    one(listed ? Variant::kD64Listed : Variant::kD64);
  } else if (d == 128) {
    one(!listed ? Variant::kD128 : sfu_turns_by_length(p) ? Variant::kD128SparseTurns : Variant::kD128Sparse);
  } else {
    one(listed ? Variant::kD256Sparse : Variant::kD256);
  }
  for (int i = 0; i < out.launches; ++i) {
    const Launch& l = out.launch[i];
    if (l.variant != Variant::kD64TopRows && int64_t{l.num_m_blocks} * p.heads_q * p.batch > 0x7fffffff) {
      out.launches = 0;
      out.why = "more than 2^31 - 1 query tiles";
      return out;
    }
    out.workspace = std::max(out.workspace, launch_workspace(l));
  }
  return out;
}

}  // namespace flash::sm90
