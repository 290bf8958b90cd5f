// libflash/kvcache.h -- KV-cache attention and the combine of partial results: the internal parameters
// (filled by capi/validate_kvcache.cpp from flash_kvcache_args / flash_combine_args) and the CPU entry points
// (libflash/cpu/kvcache_cpu.cpp).
//
// Semantics (flash.h has the public statement): for sequence b with n_b = cache_seqlens[b], k_new's rows are
// first written at cache positions n_b .. n_b + seqlen_new - 1, then the seqlen_new queries attend to the first
// L_b = n_b + (append ? seqlen_new : 0) keys, causal/window bottom-right aligned (diag offset L_b - seqlen_new).
// Key position t of sequence b lives at
//   contiguous: row cache_row(b) = cache_batch_idx ? cache_batch_idx[b] : b, position t;
//   paged:      page block_table[b * block_table_stride + t / page_size], row t % page_size.
#pragma once
#include <cstddef>
#include <cstdint>

#include "params.h"

namespace flash {

struct KvcacheParams {
  const void* q = nullptr;  // [b, sn, hq, d]
  void* k_cache = nullptr;  // contiguous [bc, max_len, hkv, d] or paged [pages, page_size, hkv, d]
  void* v_cache = nullptr;
  const void* k_new = nullptr;  // null: no append
  const void* v_new = nullptr;
  void* o = nullptr;
  float* lse = nullptr;  // null: not wanted
  const int32_t* cache_seqlens = nullptr;
  const int32_t* cache_batch_idx = nullptr;  // contiguous only; null: identity
  const int32_t* block_table = nullptr;      // null: contiguous cache
  int64_t block_table_stride = 0;
  int32_t max_pages_per_seq = 0;

  // Element strides (the last dimension is contiguous). For the cache, "batch" is the cache row (contiguous)
  // or the page (paged), "row" the position inside it.
  int64_t q_batch_stride = 0, q_row_stride = 0, q_head_stride = 0;
  int64_t o_batch_stride = 0, o_row_stride = 0, o_head_stride = 0;
  int64_t kc_batch_stride = 0, kc_row_stride = 0, kc_head_stride = 0;
  int64_t vc_batch_stride = 0, vc_row_stride = 0, vc_head_stride = 0;
  int64_t kn_batch_stride = 0, kn_row_stride = 0, kn_head_stride = 0;
  int64_t vn_batch_stride = 0, vn_row_stride = 0, vn_head_stride = 0;
  int64_t lse_batch_stride = 0, lse_head_stride = 0, lse_row_stride = 0;

  int32_t batch = 0, seqlen_new = 0, heads_q = 0, heads_kv = 0, head_ratio = 1, head_dim = 0;
  int32_t cache_rows = 0;  // contiguous: batch_cache; paged: num_pages
  int32_t max_len = 0;     // contiguous: positions per cache row; paged: page_size
  bool paged = false;
  DType dtype = DType::FP32;

  float scale = 0;
  int32_t window_left = -1, window_right = -1;  // causal folded in as window_right = 0
  int32_t num_splits = 0;                       // as the caller gave it (0 = choose)

  int32_t device_id = -1;
  void* stream = nullptr;
  void* workspace = nullptr;
  size_t workspace_size = 0;

  // Keys the queries of sequence b see (host-resident cache_seqlens only).
  int64_t seqlen_k(int64_t b) const { return int64_t{cache_seqlens[b]} + (k_new != nullptr ? seqlen_new : 0); }
  // Element offset of (position t, head h) of sequence b in a cache with the given strides.
  int64_t cache_offset(int64_t b, int64_t t, int64_t h, int64_t batch_stride, int64_t row_stride,
                       int64_t head_stride) const {
    if (paged) {
      const int64_t page = block_table[b * block_table_stride + t / max_len];
      return page * batch_stride + (t % max_len) * row_stride + h * head_stride;
    }
    const int64_t row = cache_batch_idx != nullptr ? cache_batch_idx[b] : b;
    return row * batch_stride + t * row_stride + h * head_stride;
  }
};

// One partial result (or the combined output): element strides of O [b, s, h, d] and LSE [b, h, s].
struct CombinePart {
  const void* o = nullptr;
  const float* lse = nullptr;
  int64_t o_batch_stride = 0, o_row_stride = 0, o_head_stride = 0;
  int64_t lse_batch_stride = 0, lse_head_stride = 0, lse_row_stride = 0;
};

struct CombineParams {
  int32_t num_parts = 0;
  const CombinePart* parts = nullptr;  // [num_parts], host array
  DType part_dtype = DType::FP32;
  void* o = nullptr;
  float* lse = nullptr;  // null: not wanted
  int64_t o_batch_stride = 0, o_row_stride = 0, o_head_stride = 0;
  int64_t lse_batch_stride = 0, lse_head_stride = 0, lse_row_stride = 0;
  DType o_dtype = DType::FP32;
  int32_t batch = 0, seqlen = 0, heads = 0, head_dim = 0;
  int32_t device_id = -1;
  void* stream = nullptr;
};

namespace cpu {
// The splits a call uses (num_splits resolved when 0; never more than the longest sequence's keys need).
int32_t kvcache_num_splits(const KvcacheParams& p);
// Workspace bytes (the split partials); 0 with one split.
size_t kvcache_workspace(const KvcacheParams& p);
// Append then attention; p.workspace holds kvcache_workspace(p) bytes (8-byte aligned) when that is > 0.
int32_t kvcache_fwd(const KvcacheParams& p);
// flash_combine on host memory.
int32_t combine(const CombineParams& p);
}  // namespace cpu

}  // namespace flash
