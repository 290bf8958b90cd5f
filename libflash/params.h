// libflash/params.h -- the one internal parameter struct, carried from the C ABI to every backend.
//
// capi/ validates a flash_fwd_args and normalises it into FwdParams: element strides split per axis,
// the default scale resolved, the causal flag folded into the window, the diagonal offset of the
// alignment precomputed. Backends read nothing else. Plain data: it can be copied into a CUDA kernel's
// parameter space as is.
#pragma once
#include <cstddef>
#include <cstdint>

namespace flash {

enum class DType : int32_t { FP32 = 1, FP16 = 2, BF16 = 3 };

inline size_t dtype_size(DType t) { return t == DType::FP32 ? 4 : 2; }

// Block-sparse mask, normalised (pointers on the device of Q; strides in elements; 0 broadcasts).
struct BlockMaskParams {
  const int32_t* kv_num_blocks = nullptr;  // [b, h, num_q_blocks]
  const int32_t* kv_indices = nullptr;     // [b, h, num_q_blocks, max_kv_blocks]
  int64_t num_batch_stride = 0, num_head_stride = 0, num_qblock_stride = 0;
  int64_t idx_batch_stride = 0, idx_head_stride = 0, idx_qblock_stride = 0, idx_stride = 0;
  int32_t block_m = 0, block_n = 0, num_q_blocks = 0, max_kv_blocks = 0;
};

struct FwdParams {
  // Inputs and outputs. Row = one (batch, seq position, head) vector of head_dim contiguous elements.
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* o = nullptr;
  float* lse = nullptr;  // may be null: not wanted

  // Element strides. Index of element (b, s, h, d) of q is b*q_batch_stride + s*q_row_stride + h*q_head_stride + d.
  int64_t q_batch_stride, q_row_stride, q_head_stride;
  int64_t k_batch_stride, k_row_stride, k_head_stride;
  int64_t v_batch_stride, v_row_stride, v_head_stride;
  int64_t o_batch_stride, o_row_stride, o_head_stride;
  int64_t lse_batch_stride, lse_head_stride, lse_row_stride;

  int32_t batch, heads_q, heads_kv, head_ratio;  // head_ratio = heads_q / heads_kv (GQA group size)
  int32_t seqlen_q, seqlen_k, head_dim;
  DType dtype;

  float scale;       // softmax scale (resolved: 1/sqrt(d) by default)
  float scale_log2;  // scale * log2(e): exp(scale*x) == exp2(scale_log2*x)

  // Mask. Query i sees key j iff
  //   (window_left  < 0 || j >= i + diag_offset - window_left) &&
  //   (window_right < 0 || j <= i + diag_offset + window_right) &&
  //   (block_mask == off || block (i / block_m, j / block_n) is listed).
  // causal is folded in as window_right = min(window_right, 0). diag_offset = seqlen_k - seqlen_q for
  // bottom-right alignment, 0 for top-left.
  int32_t window_left, window_right;
  int64_t diag_offset;
  bool is_causal;      // window_right == 0 && window_left < 0 (the common case kernels specialise)
  bool has_window;     // window_left >= 0 || window_right >= 0
  bool has_block_mask;
  BlockMaskParams block_mask;

  // Packed variable-length batch (flash.h, "Packed variable-length batches"; since 1.3). varlen false: a dense
  // call, every field below at its default. varlen true: `batch` is the number of sequences; q, o (d_o, dq) are
  // [total_q, heads_q, d] and k, v (dk, dv) [total_k, heads_kv, d], so element (row r, head h, e) of q is
  // r * q_row_stride + h * q_head_stride + e (the *_batch_strides are 0); the LSE of (h, r) is
  // h * lse_head_stride + r * lse_row_stride. Sequence s owns query rows [cu_seqlens_q[s], cu_seqlens_q[s+1]) and
  // keys [cu_seqlens_k[s], cu_seqlens_k[s] + seqlen_k_s), seqlen_k_s = seqused_k ? seqused_k[s] : its slot.
  // seqlen_q and seqlen_k hold max_seqlen_q and max_seqlen_k (bounds of every sequence's lengths), and
  // diag_offset is per sequence (bottom_right: seqlen_k_s - seqlen_q_s, else 0): libflash/varlen.h turns one
  // sequence into the dense problem of batch 1 that it is. The arrays live on q's device (checked element by
  // element on the host when that is the CPU).
  bool varlen;
  bool bottom_right;  // causal_alignment == FLASH_ALIGN_BOTTOM_RIGHT (kept for the per-sequence diag_offset)
  const int32_t* cu_seqlens_q;  // [batch + 1]
  const int32_t* cu_seqlens_k;  // [batch + 1]
  const int32_t* seqused_k;     // [batch] or nullptr
  int32_t total_q, total_k;     // q.shape[0], k.shape[0]

  // Execution.
  int32_t device_id;
  void* stream;
  void* workspace;
  size_t workspace_size;
  uint32_t flags;
};

// The backward's parameters: the forward's (q, k, v, o, lse now all inputs; lse is never null) plus dO and
// the three gradients. capi/ fills it from flash_bwd_args with the same normalisation as the forward.
struct BwdParams : FwdParams {
  const void* d_o = nullptr;  // [b, sq, hq, d], dtype of q
  void* dq = nullptr;         // out: [b, sq, hq, d]
  void* dk = nullptr;         // out: [b, sk, hkv, d], summed over each GQA group
  void* dv = nullptr;         // out: [b, sk, hkv, d]
  int64_t do_batch_stride = 0, do_row_stride = 0, do_head_stride = 0;
  int64_t dq_batch_stride = 0, dq_row_stride = 0, dq_head_stride = 0;
  int64_t dk_batch_stride = 0, dk_row_stride = 0, dk_head_stride = 0;
  int64_t dv_batch_stride = 0, dv_row_stride = 0, dv_head_stride = 0;
  bool deterministic = false;  // FLASH_FLAG_DETERMINISTIC
};

// True iff query row i may attend to key j under the window part of the mask (not the block mask).
inline bool window_visible(const FwdParams& p, int64_t i, int64_t j) {
  const int64_t diag = i + p.diag_offset;
  if (p.window_left >= 0 && j < diag - p.window_left) return false;
  if (p.window_right >= 0 && j > diag + p.window_right) return false;
  return true;
}

}  // namespace flash
