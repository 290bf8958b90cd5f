// libflash/cuda/sm80/kvcache/plan.h -- the GPU KV-cache attention family (flash_fwd_kvcache, flash_combine on
// CUDA tensors): its plan, the parameters its kernels take, and the launches. mma.sync and cp.async only, so
// the one family serves sm_80 and sm_90 alike; decode is bound by HBM bandwidth, not by the tensor cores.
//
// The plan (plan.cpp) decides, from the call's shapes and the device -- never from the contents of the device
// index arrays, so a plan, its workspace and a captured CUDA graph stay valid whatever cache_seqlens and
// block_table hold at replay:
//   - the layout of the four warps: kDecode (16 packed query rows, the warps split each key tile four ways)
//     when the packed rows fit 16, else kChunk (64 rows, one warp per 16 rows, FA2's split-Q);
//   - the number of splits of the keys (split-KV): the fewest whose wave efficiency on the SMs is within 85% of
//     the best, FlashAttention-3's rule, from the cache's capacity;
//   - the workspace: fp32 partial O and LSE of every split, merged by the combine kernel.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "../../../kvcache.h"
#include "../../ptx/plan.h"

namespace flash::sm80::kvcache {

// Layout of the CTA's four warps over a (query rows x key tile) step.
enum class Layout : int {
  kDecode = 0,  // 16 rows; warp w takes keys [w * kBlockN / 4, (w + 1) * kBlockN / 4) of each tile
  kChunk = 1,   // 64 rows; warp w takes rows [16 w, 16 w + 16) and the whole tile
};
constexpr int kLayouts = 2;
constexpr int kThreads = 128;
constexpr int kMaxSplits = 256;

// Compiled head dims; a call's head_dim (a multiple of 8) runs on the smallest one at least as large, its
// columns past head_dim zero-filled on load and never stored.
constexpr int kHeadDims[] = {64, 128, 256};
constexpr int kNumHeadDims = 3;
constexpr int compiled_head_dim(int d) { return d <= 64 ? 64 : d <= 128 ? 128 : d <= 256 ? 256 : 0; }

// Tile shape of one instantiation: rows of packed queries, keys per step, pipeline depth.
struct Shape {
  int block_m, block_n, warps_n, stages;
  // Q tile + kStages K/V tile pairs, all bf16/fp16.
  constexpr int smem_bytes(int head_dim) const { return (block_m + 2 * stages * block_n) * head_dim * 2; }
};
constexpr Shape shape_of(Layout l, int head_dim) {
  // kDecode: K + V tiles of 32 KB (d64: 128 keys, 32 a warp; d128: 64 keys, 16 a warp) in a 3-stage ring, so two
  // CTAs an SM keep 128 KB of loads in flight; d256: 64-key tiles (64 KB), 2 stages, one CTA an SM.
  // kChunk: FA2's forward tiles (64 x 64, two stages; 64 x 32 at d256 to stay under 100 KB).
  return l == Layout::kDecode ? Shape{16, head_dim == 64 ? 128 : 64, 4, head_dim == 256 ? 2 : 3}
                              : Shape{64, head_dim == 256 ? 32 : 64, 1, 2};
}

// What the kernels read: KvcacheParams resolved (causal folded into the window, the cache's capacity) plus the
// plan's split and workspace. Element strides; the last dimension is contiguous.
struct KernelParams {
  const void* q;
  void* k_cache;
  void* v_cache;
  const void* k_new;  // null: nothing appended
  const void* v_new;
  void* o;
  float* lse;  // null: not written
  const int32_t* cache_seqlens;
  const int32_t* cache_batch_idx;  // null: identity
  const int32_t* block_table;      // null: contiguous cache
  int64_t block_table_stride;
  int64_t q_batch_stride, q_row_stride, q_head_stride;
  int64_t o_batch_stride, o_row_stride, o_head_stride;
  int64_t kc_batch_stride, kc_row_stride, kc_head_stride;
  int64_t vc_batch_stride, vc_row_stride, vc_head_stride;
  int64_t kn_batch_stride, kn_row_stride, kn_head_stride;
  int64_t vn_batch_stride, vn_row_stride, vn_head_stride;
  int64_t lse_batch_stride, lse_head_stride, lse_row_stride;
  int32_t batch, seqlen_new, heads_q, heads_kv, head_ratio, head_dim;
  int32_t cache_rows;      // contiguous: batch_cache; paged: num_pages (indices are clamped into [0, cache_rows))
  int32_t page_size;       // paged: rows a page; contiguous: max_len
  int32_t page_shift;      // log2(page_size) when it is a power of two, else -1
  int32_t max_pages;       // paged: block_table columns read (indices clamped into [0, max_pages))
  int32_t capacity;        // positions a sequence can hold: max_len, or max_pages * page_size
  int32_t window_left, window_right;
  float scale, scale_log2;  // softmax scale and scale * log2(e)
  int32_t num_splits;
  int32_t packed_rows;      // seqlen_new * head_ratio: query rows per (sequence, KV head)
  int32_t m_blocks;         // packed-row blocks per (sequence, KV head)
  // Workspace (num_splits > 1): o_part[((s * batch + b) * heads_q + h) * seqlen_new + i][head_dim], fp32;
  // lse_part likewise without the last dimension.
  float* o_part;
  float* lse_part;
};

struct Plan {
  bool ok = false;
  Layout layout = Layout::kDecode;
  int head_dim = 0;    // the compiled one
  Shape shape{};
  int smem_bytes = 0;  // dynamic shared memory of the attention kernel
  int splits = 1;
  int m_blocks = 0;    // packed-row blocks per (sequence, KV head); grid = (m_blocks * splits, heads_kv, batch)
  size_t workspace = 0;
};

// The plan of a call (shapes only; see the top of this file). !ok: *why says what is not supported.
Plan plan(const KvcacheParams& p, const cuda::DeviceLimits& dev, int num_sms, std::string* why);

// The entry points capi/kvcache.cpp calls for CUDA tensors (kvcache.cpp).
bool supports(const KvcacheParams& p, std::string* why);
size_t workspace(const KvcacheParams& p);
// Append and attention (and the combine of the splits); *splits_used: the splits it ran.
int32_t run(const KvcacheParams& p, int32_t* splits_used);
bool supports_combine(const CombineParams& p, std::string* why);
int32_t combine(const CombineParams& p);

// ---- Launches (kernel.cuh, one instantiation per generated .cu; combine.cu) ------------------------------
template <int kHeadDim, Layout kLayout, DType kDType>
int32_t launch_attention(const KernelParams& k, const Plan& plan, void* stream);
// Merges the num_splits partials of the workspace into o and lse.
int32_t launch_split_combine(const KernelParams& k, DType dtype, void* stream);
// flash_combine: at most kMaxCombineParts parts a call (their descriptors travel in the kernel's parameters).
constexpr int kMaxCombineParts = 256;
int32_t launch_combine(const CombineParams& p);

}  // namespace flash::sm80::kvcache
