// libflash/cuda/sm80/kvcache/kvcache.cpp -- the KV-cache family's plan and the entry points capi/kvcache.cpp
// calls for CUDA tensors: support checks, workspace size and the run all go through plan().
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>

#include "../../../../flash.h"
#include "../../../error.h"
#include "../../runtime.h"
#include "plan.h"

namespace flash::sm80::kvcache {
namespace {

Plan refuse(std::string* why, std::string reason) {
  if (why) *why = std::move(reason);
  return {};
}

// Keys a sequence can hold: what the plan sizes the split for (the device's cache_seqlens are not read).
int64_t capacity(const KvcacheParams& p) { return p.paged ? int64_t{p.max_pages_per_seq} * p.max_len : p.max_len; }

// FlashAttention-3's rule: the fewest splits whose wave efficiency (CTAs over the SMs' slots, against the waves
// that takes) is within 85% of the best, one split when the CTAs already fill 80% of a wave -- with each split
// keeping at least kMinKeysPerSplit keys of the cache's capacity: a CTA's fixed cost (index loads, the ring's
// fill, the epilogue) must stay small against its loads. On the H200 (d128, heads 32/8, one token): b1 x 8k
// ran 31.6 us at the unbounded rule's 29 splits, 27.4 us at 16 (the bound gives 14); b1 x 128k, 16 x 8k,
// 16 x 32k, 64 x 4k, 128 x 2k are at their measured best (29, 2, 2, 1, 1 splits).
constexpr int64_t kMinKeysPerSplit = 512;
int choose_splits(int64_t ctas, int64_t slots, int64_t tiles, int64_t keys) {
  if (ctas >= slots * 8 / 10) return 1;
  const int max_splits = int(std::max<int64_t>(1, std::min<int64_t>({kMaxSplits, tiles, keys / kMinKeysPerSplit})));
  auto efficiency = [&](int s) {
    const double waves = double(ctas * s) / double(slots);
    return waves / std::ceil(waves);
  };
  double best = 0;
  for (int s = 1; s <= max_splits; ++s) best = std::max(best, efficiency(s));
  for (int s = 1; s <= max_splits; ++s)
    if (efficiency(s) >= 0.85 * best) return s;
  return 1;
}

}  // namespace

Plan plan(const KvcacheParams& p, const cuda::DeviceLimits& dev, int num_sms, std::string* why) {
  if (p.dtype != DType::FP16 && p.dtype != DType::BF16) return refuse(why, "supports fp16 and bf16 only");
  if (dev.compute_capability < 80) return refuse(why, "needs compute capability 8.0 or newer");
  const int d = compiled_head_dim(p.head_dim);
  if (d == 0 || p.head_dim % 8 != 0)
    return refuse(why, "head_dim " + std::to_string(p.head_dim) + " is not a multiple of 8 in [8, 256]");
  if (p.batch > 65535 || p.heads_kv > 65535)
    return refuse(why, "batch and heads_kv must be at most 65535 (grid dimensions)");
  Plan pl;
  pl.head_dim = d;
  const int64_t packed = int64_t{p.seqlen_new} * p.head_ratio;
  if (packed > (int64_t{1} << 30)) return refuse(why, "seqlen_new * heads_q / heads_kv exceeds 2^30 rows");
  // 16 packed rows or fewer: the warps split the keys (decode: one token, GQA groups up to 16). Where the decode
  // tiles do not fit the device's shared memory (d256 on 99 KB parts), the 64-row layout runs it.
  pl.layout = packed <= 16 && shape_of(Layout::kDecode, d).smem_bytes(d) <= dev.smem_per_block_optin ? Layout::kDecode
                                                                                                      : Layout::kChunk;
  pl.shape = shape_of(pl.layout, d);
  pl.smem_bytes = pl.shape.smem_bytes(d);
  if (pl.smem_bytes > dev.smem_per_block_optin)
    return refuse(why, "head_dim " + std::to_string(p.head_dim) + " needs " + std::to_string(pl.smem_bytes) +
                           " bytes of shared memory per block; this device has " + std::to_string(dev.smem_per_block_optin));
  const int64_t m_blocks = (packed + pl.shape.block_m - 1) / pl.shape.block_m;
  pl.m_blocks = int(m_blocks);

  const int64_t ctas = m_blocks * p.heads_kv * p.batch;
  const int64_t per_sm = std::max<int64_t>(1, std::min<int64_t>(dev.smem_per_sm / (pl.smem_bytes + 1024), 4));
  const int64_t tiles = std::max<int64_t>(1, (capacity(p) + pl.shape.block_n - 1) / pl.shape.block_n);
  pl.splits = p.num_splits > 0 ? int(std::min<int64_t>(p.num_splits, kMaxSplits))
                               : choose_splits(ctas, int64_t{num_sms} * per_sm, tiles, capacity(p));
  if (m_blocks * pl.splits > 0x7fffffff) return refuse(why, "too many query blocks for one launch");
  if (pl.splits > 1) {
    const size_t rows = size_t(p.batch) * p.heads_q * p.seqlen_new * pl.splits;
    const size_t o_bytes = (rows * p.head_dim * sizeof(float) + 255) / 256 * 256;
    pl.workspace = o_bytes + rows * sizeof(float);
  }
  pl.ok = true;
  return pl;
}

namespace {
Plan plan_for(const KvcacheParams& p, std::string* why) {
  return plan(p, cuda::device_limits(p.device_id), cuda::multiprocessor_count(p.device_id), why);
}
}  // namespace

bool supports(const KvcacheParams& p, std::string* why) {
  if (!plan_for(p, why).ok) return false;
  const int64_t len = p.max_len;  // positions of a cache row, or rows of a page
  if (!cuda::aligned16(p.q, {{p.q_batch_stride, p.batch}, {p.q_row_stride, p.seqlen_new}, {p.q_head_stride, p.heads_q}}) ||
      !cuda::aligned16(p.k_cache, {{p.kc_batch_stride, p.cache_rows}, {p.kc_row_stride, len}, {p.kc_head_stride, p.heads_kv}}) ||
      !cuda::aligned16(p.v_cache, {{p.vc_batch_stride, p.cache_rows}, {p.vc_row_stride, len}, {p.vc_head_stride, p.heads_kv}}) ||
      (p.k_new != nullptr &&
       (!cuda::aligned16(p.k_new, {{p.kn_batch_stride, p.batch}, {p.kn_row_stride, p.seqlen_new}, {p.kn_head_stride, p.heads_kv}}) ||
        !cuda::aligned16(p.v_new, {{p.vn_batch_stride, p.batch}, {p.vn_row_stride, p.seqlen_new}, {p.vn_head_stride, p.heads_kv}})))) {
    *why = "needs 16-byte aligned q/k_cache/v_cache/k_new/v_new pointers and batch/row/head strides that are multiples "
           "of 8 elements (cp.async moves 16-byte chunks)";
    return false;
  }
  return true;
}

size_t workspace(const KvcacheParams& p) { return plan_for(p, nullptr).workspace; }

int32_t run(const KvcacheParams& p, int32_t* splits_used) {
  std::string why;
  const Plan pl = plan_for(p, &why);
  if (!pl.ok) return fail(FLASH_ERROR_INTERNAL, "kvcache: run called on a call it does not support: ", why);
  *splits_used = pl.splits;
  if (p.batch == 0 || p.heads_q == 0) return FLASH_OK;

  KernelParams k{};
  k.q = p.q, k.k_cache = p.k_cache, k.v_cache = p.v_cache, k.k_new = p.k_new, k.v_new = p.v_new;
  k.o = p.o, k.lse = p.lse;
  k.cache_seqlens = p.cache_seqlens, k.cache_batch_idx = p.cache_batch_idx, k.block_table = p.block_table;
  k.block_table_stride = p.block_table_stride;
  k.q_batch_stride = p.q_batch_stride, k.q_row_stride = p.q_row_stride, k.q_head_stride = p.q_head_stride;
  k.o_batch_stride = p.o_batch_stride, k.o_row_stride = p.o_row_stride, k.o_head_stride = p.o_head_stride;
  k.kc_batch_stride = p.kc_batch_stride, k.kc_row_stride = p.kc_row_stride, k.kc_head_stride = p.kc_head_stride;
  k.vc_batch_stride = p.vc_batch_stride, k.vc_row_stride = p.vc_row_stride, k.vc_head_stride = p.vc_head_stride;
  k.kn_batch_stride = p.kn_batch_stride, k.kn_row_stride = p.kn_row_stride, k.kn_head_stride = p.kn_head_stride;
  k.vn_batch_stride = p.vn_batch_stride, k.vn_row_stride = p.vn_row_stride, k.vn_head_stride = p.vn_head_stride;
  k.lse_batch_stride = p.lse_batch_stride, k.lse_head_stride = p.lse_head_stride, k.lse_row_stride = p.lse_row_stride;
  k.batch = p.batch, k.seqlen_new = p.seqlen_new, k.heads_q = p.heads_q, k.heads_kv = p.heads_kv;
  k.head_ratio = p.head_ratio, k.head_dim = p.head_dim;
  k.cache_rows = p.cache_rows;
  k.page_size = p.max_len;
  k.page_shift = -1;
  if ((p.max_len & (p.max_len - 1)) == 0)
    for (k.page_shift = 0; (1 << k.page_shift) < p.max_len; ++k.page_shift) {
    }
  k.max_pages = p.paged ? p.max_pages_per_seq : 1;
  k.capacity = int32_t(std::min<int64_t>(capacity(p), INT32_MAX));
  k.window_left = p.window_left, k.window_right = p.window_right;
  k.scale = p.scale;
  k.scale_log2 = p.scale * 1.4426950408889634f;
  k.num_splits = pl.splits;
  k.packed_rows = p.seqlen_new * p.head_ratio;
  k.m_blocks = pl.m_blocks;

  const cuda::DeviceGuard guard(p.device_id);
  void* ws = p.workspace;
  void* owned = nullptr;
  if (pl.workspace > 0) {
    if (ws != nullptr && p.workspace_size < pl.workspace)
      return fail(FLASH_ERROR_WORKSPACE_TOO_SMALL, "workspace_size is ", p.workspace_size, " bytes but this call needs ",
                  pl.workspace, " (see flash_fwd_kvcache_workspace_size)");
    if (ws == nullptr) {
      if (const int32_t s = cuda::malloc_async(&owned, pl.workspace, p.stream); s != FLASH_OK) return s;
      ws = owned;
    }
    const size_t rows = size_t(p.batch) * p.heads_q * p.seqlen_new * pl.splits;
    k.o_part = static_cast<float*>(ws);
    k.lse_part = reinterpret_cast<float*>(static_cast<char*>(ws) + (rows * p.head_dim * sizeof(float) + 255) / 256 * 256);
  }
  int32_t status = cuda::with_dtype(p.dtype, [&](auto dtype) {
    constexpr DType kDType = decltype(dtype)::value;
    return cuda::with_index<kNumHeadDims * kLayouts>(
        (pl.head_dim == 64 ? 0 : pl.head_dim == 128 ? 1 : 2) * kLayouts + int(pl.layout), [&](auto index) {
          constexpr int kIndex = decltype(index)::value;
          return launch_attention<kHeadDims[kIndex / kLayouts], Layout(kIndex % kLayouts), kDType>(k, pl, p.stream);
        });
  });
  if (status == FLASH_OK && pl.splits > 1) status = launch_split_combine(k, p.dtype, p.stream);
  if (owned != nullptr) cuda::free_async(owned, p.stream);
  return status;
}

bool supports_combine(const CombineParams& p, std::string* why) {
  if (p.num_parts > kMaxCombineParts) {
    *why = "takes at most " + std::to_string(kMaxCombineParts) + " parts a call on CUDA tensors (their descriptors travel "
           "in the kernel's parameters); merge in groups of up to " + std::to_string(kMaxCombineParts) +
           " with fp32 outputs, then merge the groups";
    return false;
  }
  if (p.head_dim > 256) {
    *why = "head_dim " + std::to_string(p.head_dim) + " is over 256 (one warp a row, 8 elements a lane)";
    return false;
  }
  return true;
}

int32_t combine(const CombineParams& p) {
  const cuda::DeviceGuard guard(p.device_id);
  return launch_combine(p);
}

}  // namespace flash::sm80::kvcache
