// libflash/cuda/sm90/sm90.cpp -- the Algorithm record of the Hopper forward (FLASH_ALGO_SM90): what it
// runs, and the switch from a call's (head dim, dtype) to one compiled instantiation. Anything it does
// not run, AUTO hands to sm80 (supports() says why, and the capability query reports it).
#include <cstdint>
#include <string>

#include "../../../flash.h"
#include "../../algorithm.h"
#include "../../error.h"
#include "../runtime.h"
#include "../sm80_bwd/bwd.h"
#include "shapes.h"

namespace flash {
namespace sm90 {

template <int kHeadDim, bool kSparse, DType kDType>
int32_t launch_fwd(const FwdParams& p, const Rows& rows);
template <DType kDType>
int32_t launch_fwd_rows(const FwdParams& p, const Rows& rows);
template <DType kDType>
int32_t launch_fwd_two_rings(const FwdParams& p);
template <DType kDType>
int32_t launch_fwd_sparse_turns(const FwdParams& p);
template <DType kDType, bool kSplit>
int32_t launch_fwd_long(const FwdParams& p);
template <int kHeadDim, DType kDType>
int32_t launch_fwd_split(const FwdParams& p, const Rows& rows = {});
template <int kHeadDim, DType kDType>
int32_t launch_fwd_up(const FwdParams& p);
template <DType kDType>
int32_t launch_top_rows(const FwdParams& p);  // top_rows.cuh

namespace {

bool available(int32_t device_id, std::string* why) {
  const int cc = cuda::compute_capability(device_id);
  if (cc == 90) return true;
  *why = "needs compute capability 9.0 (wgmma and TMA code built for sm_90a); device " + std::to_string(device_id) +
         " has " + std::to_string(cc / 10) + "." + std::to_string(cc % 10);
  return false;
}

// TMA: base addresses 16-byte aligned, every stride that steps (extent > 1) a positive multiple of 16
// bytes below 2^40 (a broadcast input with stride 0 goes to sm80).
bool tma_layout(const void* ptr, std::initializer_list<std::pair<int64_t, int64_t>> stride_extent) {
  if (reinterpret_cast<uintptr_t>(ptr) % 16 != 0) return false;
  for (const auto& [stride, extent] : stride_extent)
    if (extent > 1 && (stride <= 0 || stride % 8 != 0 || stride * 2 >= (int64_t(1) << 40))) return false;
  return true;
}

bool supports(const FwdParams& p, std::string* why) {
  if (p.dtype != DType::FP16 && p.dtype != DType::BF16) {
    *why = "supports fp16 and bf16 only";
    return false;
  }
  if (p.scale < 0.f) {
    // The kernel keeps the running max of the raw scores (the scale is folded into exp2's FFMA), which is
    // the max of the scaled ones only for a positive scale; sm80 folds a negative one into Q's sign.
    *why = "softmax_scale must be positive (sm80 runs negative scales)";
    return false;
  }
  const bool listed = use_listed_kernel(p, cuda::shared_mem_per_block_optin(p.device_id));
  const Shape s = use_long_kernel(p) ? kLongShape : shape_for(p.head_dim, listed);
  if (s.head_dim == 0) {
    *why = "head_dim " + std::to_string(p.head_dim) + " is not 64, 128 or 256 (sm80 runs the others)";
    return false;
  }
  if (cuda::shared_mem_per_block_optin(p.device_id) < s.smem_bytes(listed)) {
    *why = "needs " + std::to_string(s.smem_bytes(listed)) + " bytes of shared memory per block";
    return false;
  }
  if (!tma_layout(p.q, {{p.q_batch_stride, p.batch}, {p.q_row_stride, p.seqlen_q}, {p.q_head_stride, p.heads_q}}) ||
      !tma_layout(p.k, {{p.k_batch_stride, p.batch}, {p.k_row_stride, p.seqlen_k}, {p.k_head_stride, p.heads_kv}}) ||
      !tma_layout(p.v, {{p.v_batch_stride, p.batch}, {p.v_row_stride, p.seqlen_k}, {p.v_head_stride, p.heads_kv}}) ||
      !tma_layout(p.o, {{p.o_batch_stride, p.batch}, {p.o_row_stride, p.seqlen_q}, {p.o_head_stride, p.heads_q}})) {
    *why = "TMA needs 16-byte aligned q/k/v/o pointers and nonzero batch/row/head strides that are multiples of 8 "
           "elements";
    return false;
  }
  if (p.seqlen_q > (1 << 30) || p.seqlen_k > (1 << 30)) {
    *why = "sequence lengths above 2^30 exceed TMA's 32-bit coordinates";
    return false;
  }
  if (p.has_block_mask && (p.block_mask.block_m % 128 != 0 || p.block_mask.block_n % s.block_n != 0)) {
    *why = "block-sparse masks need block_m a multiple of 128 and block_n a multiple of " + std::to_string(s.block_n) +
           " at head_dim " + std::to_string(p.head_dim) + " (mask has " + std::to_string(p.block_mask.block_m) + " x " +
           std::to_string(p.block_mask.block_n) + ")";
    return false;
  }
  if (p.has_block_mask) {
    const int64_t need = s.smem_bytes(p.has_block_mask) + sparse_extra_bytes(p.seqlen_k, s.block_n, p.block_mask.block_n);
    if (need > cuda::shared_mem_per_block_optin(p.device_id)) {
      *why = "block-sparse schedule for seqlen_k " + std::to_string(p.seqlen_k) + " needs " + std::to_string(need) +
             " bytes of shared memory per block, more than the device's " +
             std::to_string(cuda::shared_mem_per_block_optin(p.device_id));
      return false;
    }
  }
  return true;
}

// The persistent grid launch gives an instantiation of shape s (fwd_kernel.cuh).
int grid_for(const FwdParams& p, const Shape& s) { return persistent_grid(tiles_of(p, s), cuda::persistent_ctas(p.device_id)); }
// A dense d128 problem's PDL pair (shapes.h, pair_split), planned for d128's dense instantiation's grid; units 0: none.
TailSplit pair_for(const FwdParams& p) { return pair_split(p, grid_for(p, shape_for(128))); }

// The dynamic tile order's counter (shapes.h); the pair's or the split instantiations' counters and partials where the
// problem splits (fwd_kernel.cuh, launch makes the same choice), else nothing.
size_t workspace(const FwdParams& p) {
  if (dynamic_tiles(p.has_block_mask, p.window_left, p.window_right)) return kTileCounterBytes;
  if (const TailSplit t = pair_for(p); t.units > 0)
    return size_t(tail_workspace_bytes(t, grid_for(p, shape_for(128)), 128, shape_for(128).consumers));
  if (!use_split_kernel(p)) return 0;
  const Shape s = use_long_kernel(p) ? kLongShape : shape_for(p.head_dim);
  const int grid = grid_for(p, s);
  return size_t(tail_workspace_bytes(tail_split_for(p, s, grid), grid, s.head_dim, s.consumers));
}

template <int D, bool kSparse>
int32_t fwd_dim(const FwdParams& p, const Rows& rows = {}) {
  return p.dtype == DType::BF16 ? launch_fwd<D, kSparse, DType::BF16>(p, rows) : launch_fwd<D, kSparse, DType::FP16>(p, rows);
}

// d64 dense in two kernels (shapes.h, d64_split_rows): rows [0, rows_a) on the three-warpgroup instantiation, the rest on
// the two-warpgroup one (kRowsShape) launched behind it with PDL (both in the static order).
int32_t fwd_d64_split(const FwdParams& p, int64_t rows_a) {
  auto rows = [&](const Rows& r) {
    return p.dtype == DType::BF16 ? launch_fwd_rows<DType::BF16>(p, r) : launch_fwd_rows<DType::FP16>(p, r);
  };
  if (rows_a == 0) return rows(Rows{});
  if (int32_t st = fwd_dim<64, false>(p, Rows{0, int32_t(rows_a), Rows::kPdlPrimary}); st != FLASH_OK) return st;
  return rows(Rows{int32_t(rows_a), -1, Rows::kPdlSecondary});
}

// d64 causal's first rows apart (shapes.h, d64_causal_top_rows): rows [r, seqlen_q) on the three-warpgroup instantiation
// (whole 192-row tiles, from the counter longest first), rows [0, r) on the top-rows kernel behind it with PDL.
int32_t fwd_d64_causal_top(const FwdParams& p, int64_t r) {
  if (int32_t st = fwd_dim<64, false>(rows_view(p, r, p.seqlen_q)); st != FLASH_OK) return st;
  const FwdParams top = rows_view(p, 0, r);
  return p.dtype == DType::BF16 ? launch_top_rows<DType::BF16>(top) : launch_top_rows<DType::FP16>(top);
}

// d128 dense on 128-key blocks with a last round worth splitting (shapes.h, pair_split): the whole rounds on the dense
// instantiation, the last round's pieces on the split one behind it with PDL.
int32_t fwd_d128_pair(const FwdParams& p, const TailSplit& t) {
  Rows r;
  r.pieces = t;
  r.pdl = Rows::kPdlPrimary;
  if (int32_t st = fwd_dim<128, false>(p, r); st != FLASH_OK) return st;
  r.pdl = Rows::kPdlSecondary;
  return p.dtype == DType::BF16 ? launch_fwd_split<128, DType::BF16>(p, r) : launch_fwd_split<128, DType::FP16>(p, r);
}

int32_t fwd(const FwdParams& p) {
  if (p.seqlen_q == 0 || p.batch == 0 || p.heads_q == 0) return FLASH_OK;
  // Block-sparse masks, and the d64 problems whose tiles see few key blocks, run on the block-sparse instantiation;
  // d64 masks of 128-row blocks on its two-ring form, d128 long key ranges on 192-key blocks, d256 causal-like masks on
  // the instantiation that walks its key blocks upwards (shapes.h use_upward_kernel). (supports()
  // checked the two-warpgroup kernel's shared memory, which the two-ring one exceeds: use_two_rings checks its own.)
  const int64_t smem_limit = cuda::shared_mem_per_block_optin(p.device_id);
  if (use_two_rings(p, smem_limit))
    return p.dtype == DType::BF16 ? launch_fwd_two_rings<DType::BF16>(p) : launch_fwd_two_rings<DType::FP16>(p);
  const bool bf16 = p.dtype == DType::BF16;
  if (use_long_kernel(p)) {
    if (use_split_kernel(p)) return bf16 ? launch_fwd_long<DType::BF16, true>(p) : launch_fwd_long<DType::FP16, true>(p);
    return bf16 ? launch_fwd_long<DType::BF16, false>(p) : launch_fwd_long<DType::FP16, false>(p);
  }
  if (p.head_dim == 256 && use_split_kernel(p))
    return bf16 ? launch_fwd_split<256, DType::BF16>(p) : launch_fwd_split<256, DType::FP16>(p);
  const bool sparse = use_listed_kernel(p, smem_limit);
  if (const int64_t rows_a = d64_split_rows(p); !sparse && rows_a >= 0) return fwd_d64_split(p, rows_a);
  if (const int64_t r = d64_causal_top_rows(p); !sparse && r > 0) return fwd_d64_causal_top(p, r);
  if (const TailSplit t = sparse ? TailSplit{} : pair_for(p); t.units > 0) return fwd_d128_pair(p, t);
  if (!sparse && use_upward_kernel(p.head_dim, p.has_block_mask, p.window_left, p.window_right))
    return bf16 ? launch_fwd_up<256, DType::BF16>(p) : launch_fwd_up<256, DType::FP16>(p);
  switch (p.head_dim) {
    case 64: return sparse ? fwd_dim<64, true>(p) : fwd_dim<64, false>(p);
    case 128:
      // Block-sparse lists of >= kSfuTurnsMinBlocks key blocks: the instantiation with turns at the SFU (shapes.h).
      if (sparse && sfu_turns_by_length(p))
        return bf16 ? launch_fwd_sparse_turns<DType::BF16>(p) : launch_fwd_sparse_turns<DType::FP16>(p);
      return sparse ? fwd_dim<128, true>(p) : fwd_dim<128, false>(p);
    case 256: return sparse ? fwd_dim<256, true>(p) : fwd_dim<256, false>(p);
  }
  return fail(FLASH_ERROR_INTERNAL, "sm90: no kernel compiled for head_dim ", p.head_dim);
}

}  // namespace
}  // namespace sm90

// The backward on Hopper is the sm80 tensor-core backward (libflash/cuda/sm80_bwd/), which runs there.
extern const Algorithm kCudaSm90 = {FLASH_ALGO_SM90, "sm90", FLASH_DEVICE_CUDA, sm90::available, sm90::supports,
                                    sm90::workspace, sm90::fwd,
                                    sm80_bwd::supports, sm80_bwd::workspace, sm80_bwd::run};

}  // namespace flash
