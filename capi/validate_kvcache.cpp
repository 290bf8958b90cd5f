// capi/validate_kvcache.cpp -- turns a caller's flash_kvcache_args (flash_combine_args) into a checked, normalised
// flash::KvcacheParams (flash::CombineParams). Every rule of those two calls is checked here, once, before
// anything is written; each failure names the field and its value.
//
// Each tensor's own fields and the overlap rule (every array written against every array read) are capi/tensor_checks.h's,
// shared with capi/validate.cpp so every entry point words them the same; the shape checks between tensors are
// repeated here (validate.cpp's are file-local and take its own layouts).
//
// Host-resident index arrays are read element by element: cache_seqlens (every append and read fits the
// cache), cache_batch_idx (rows exist), block_table (the pages a sequence uses exist), and, when k_new is given,
// that no cache slot is written by two sequences or written by one and read by another (the result would depend
// on the order of the work). Device-resident arrays cannot be read without a synchronisation.
#include "validate.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "../libflash/error.h"
#include "tensor_checks.h"

namespace flash {
namespace {

constexpr int32_t kMaxSplits = 256;

int32_t check_dim(const flash_tensor& t, const std::string& tn, int td, const flash_tensor& ref, const std::string& rn,
                  int rd) {
  if (t.shape[td] != ref.shape[rd])
    return fail(FLASH_ERROR_BAD_SHAPE, tn, ".shape[", td, "] is ", t.shape[td], " but ", rn, ".shape[", rd, "] is ",
                ref.shape[rd]);
  return FLASH_OK;
}

int32_t check_same_kind(const flash_tensor& t, const std::string& tn, const flash_tensor& ref, const std::string& rn) {
  if (t.dtype != ref.dtype)
    return fail(FLASH_ERROR_DTYPE_MISMATCH, tn, ".dtype is ", dtype_name(t.dtype), " but ", rn, ".dtype is ",
                dtype_name(ref.dtype));
  return FLASH_OK;
}

int32_t check_same_device(const flash_tensor& t, const std::string& tn, const flash_tensor& ref, const std::string& rn) {
  if (t.device_type != ref.device_type || t.device_id != ref.device_id)
    return fail(FLASH_ERROR_DEVICE_MISMATCH, tn, " is on ", device_name(t), " but ", rn, " is on ", device_name(ref));
  return FLASH_OK;
}

// An LSE tensor: fp32 [b, h, s] on ref's device, ref being [b, s, h, d].
int32_t check_lse(const flash_tensor& lse, const std::string& name, const flash_tensor& ref, const std::string& rn) {
  if (const int32_t s = check_tensor(lse, name, 3, false); s != FLASH_OK) return s;
  if (lse.dtype != FLASH_DTYPE_FP32)
    return fail(FLASH_ERROR_DTYPE_MISMATCH, name, ".dtype is ", dtype_name(lse.dtype), " but must be fp32");
  if (const int32_t s = check_same_device(lse, name, ref, rn); s != FLASH_OK) return s;
  if (const int32_t s = check_dim(lse, name, 0, ref, rn, 0); s != FLASH_OK) return s;
  if (const int32_t s = check_dim(lse, name, 1, ref, rn, 2); s != FLASH_OK) return s;
  return check_dim(lse, name, 2, ref, rn, 1);
}

#define FLASH_CHECK(expr)                    \
  do {                                       \
    const int32_t status_ = (expr);          \
    if (status_ != FLASH_OK) return status_; \
  } while (0)

// The host-resident index arrays of a KV-cache call, against the normalised sizes in p.
int32_t check_indices(const flash_kvcache_args& a, const KvcacheParams& p) {
  const bool append = p.k_new != nullptr;
  const int64_t capacity = p.paged ? int64_t{p.max_pages_per_seq} * p.max_len : p.max_len;
  const char* cap_what = p.paged ? "max_pages_per_seq * page_size" : "k_cache.shape[1] (max_len)";
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t n = a.cache_seqlens[b];
    if (n < 0) return fail(FLASH_ERROR_INVALID_ARGUMENT, "cache_seqlens[", b, "] is ", n, " but must be >= 0");
    const int64_t L = n + (append ? p.seqlen_new : 0);
    if (L > capacity) {
      if (append)
        return fail(FLASH_ERROR_INVALID_ARGUMENT, "cache_seqlens[", b, "] is ", n, ": appending seqlen_new ", p.seqlen_new,
                    " keys needs ", L, " positions but ", cap_what, " is ", capacity);
      return fail(FLASH_ERROR_INVALID_ARGUMENT, "cache_seqlens[", b, "] is ", n, " but ", cap_what, " is ", capacity);
    }
    if (p.paged) {
      const int64_t pages = (L + p.max_len - 1) / p.max_len;
      for (int64_t j = 0; j < pages; ++j) {
        const int64_t page = p.block_table[b * p.block_table_stride + j];
        if (page < 0 || page >= p.cache_rows)
          return fail(FLASH_ERROR_INVALID_ARGUMENT, "block_table[", b, ",", j, "] is ", page, " but must be in [0, ",
                      p.cache_rows, ") (k_cache.shape[0], num_pages)");
      }
    } else if (p.cache_batch_idx != nullptr) {
      const int64_t row = p.cache_batch_idx[b];
      if (row < 0 || row >= p.cache_rows)
        return fail(FLASH_ERROR_INVALID_ARGUMENT, "cache_batch_idx[", b, "] is ", row, " but must be in [0, ", p.cache_rows,
                    ") (k_cache.shape[0], batch_cache)");
    }
  }
  if (!append) return FLASH_OK;

  // Slots (cache row or page, position in it) as one number; the appended ones with their sequence, sorted.
  const auto slot = [&](int64_t b, int64_t t) -> int64_t {
    if (p.paged) return int64_t{p.block_table[b * p.block_table_stride + t / p.max_len]} * p.max_len + t % p.max_len;
    return (p.cache_batch_idx ? int64_t{p.cache_batch_idx[b]} : b) * p.max_len + t;
  };
  std::vector<std::pair<int64_t, int64_t>> written;  // (slot, sequence)
  written.reserve(size_t(p.batch) * p.seqlen_new);
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t t = a.cache_seqlens[b]; t < int64_t{a.cache_seqlens[b]} + p.seqlen_new; ++t) written.emplace_back(slot(b, t), b);
  std::sort(written.begin(), written.end());
  for (size_t x = 1; x < written.size(); ++x)
    if (written[x].first == written[x - 1].first)
      return fail(FLASH_ERROR_INVALID_ARGUMENT, "k_new: sequences ", written[x - 1].second, " and ", written[x].second,
                  " append to the same cache slot (",
                  p.paged ? "page " : "row ", written[x].first / p.max_len, ", position ", written[x].first % p.max_len,
                  "); check ", p.paged ? "block_table" : "cache_batch_idx");
  // Reads of the keys already in the cache: each sequence's slots [0, n) in runs that are contiguous slots (one
  // per page, or one per cache row); no other sequence may write inside them.
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t n = a.cache_seqlens[b];
    for (int64_t t0 = 0; t0 < n;) {
      const int64_t t1 = p.paged ? std::min<int64_t>(n, (t0 / p.max_len + 1) * p.max_len) : n;
      const int64_t lo = slot(b, t0), hi = lo + (t1 - t0);
      auto it = std::lower_bound(written.begin(), written.end(), std::make_pair(lo, int64_t{-1}));
      for (; it != written.end() && it->first < hi; ++it)
        if (it->second != b)
          return fail(FLASH_ERROR_INVALID_ARGUMENT, "k_new: sequence ", it->second, " appends to a cache slot (",
                      p.paged ? "page " : "row ", it->first / p.max_len, ", position ", it->first % p.max_len,
                      ") that sequence ", b, " reads as one of its cache_seqlens[", b, "] = ", n, " cached keys; check ",
                      p.paged ? "block_table" : "cache_batch_idx");
      t0 = t1;
    }
  }
  return FLASH_OK;
}

}  // namespace

int32_t validate_kvcache(const flash_kvcache_args* args, KvcacheParams* p) {
  if (args == nullptr) return fail(FLASH_ERROR_NULL_POINTER, "args is NULL");
  const flash_kvcache_args& a = *args;
  const flash_tensor &q = a.q, &kc = a.k_cache, &vc = a.v_cache, &kn = a.k_new, &vn = a.v_new, &o = a.o, &lse = a.lse;
  const bool append = kn.data != nullptr || vn.data != nullptr;
  const bool paged = a.block_table != nullptr;

  // Each tensor's own fields, then dtypes and devices.
  FLASH_CHECK(check_tensor(q, "q", 4, true));
  FLASH_CHECK(check_tensor(kc, "k_cache", 4, true));
  FLASH_CHECK(check_tensor(vc, "v_cache", 4, true));
  FLASH_CHECK(check_tensor(o, "o", 4, true));
  if (append) {
    if (kn.data == nullptr) return fail(FLASH_ERROR_NULL_POINTER, "k_new.data is NULL but v_new.data is set (give both or neither)");
    if (vn.data == nullptr) return fail(FLASH_ERROR_NULL_POINTER, "v_new.data is NULL but k_new.data is set (give both or neither)");
    FLASH_CHECK(check_tensor(kn, "k_new", 4, true));
    FLASH_CHECK(check_tensor(vn, "v_new", 4, true));
  }
  struct Named {
    const flash_tensor* t;
    const char* n;
  };
  std::vector<Named> like_q_dtype = {{&kc, "k_cache"}, {&vc, "v_cache"}, {&o, "o"}};
  if (append) like_q_dtype.insert(like_q_dtype.end(), {{&kn, "k_new"}, {&vn, "v_new"}});
  for (const Named& x : like_q_dtype) {
    FLASH_CHECK(check_same_kind(*x.t, x.n, q, "q"));
    FLASH_CHECK(check_same_device(*x.t, x.n, q, "q"));
  }

  // Shapes: q [b, sn, hq, d]; o as q; caches [rows, len, hkv, d] alike; k_new, v_new [b, sn, hkv, d].
  for (int i = 0; i < 4; ++i) FLASH_CHECK(check_dim(o, "o", i, q, "q", i));
  for (int i = 0; i < 4; ++i) FLASH_CHECK(check_dim(vc, "v_cache", i, kc, "k_cache", i));
  FLASH_CHECK(check_dim(kc, "k_cache", 3, q, "q", 3));
  if (q.shape[2] % kc.shape[2] != 0)
    return fail(FLASH_ERROR_BAD_SHAPE, "q.shape[2] (heads_q) is ", q.shape[2], ", not a multiple of k_cache.shape[2] (heads_kv) ",
                kc.shape[2]);
  if (append) {
    for (const Named& x : {Named{&kn, "k_new"}, Named{&vn, "v_new"}}) {
      FLASH_CHECK(check_dim(*x.t, x.n, 0, q, "q", 0));
      FLASH_CHECK(check_dim(*x.t, x.n, 1, q, "q", 1));
      FLASH_CHECK(check_dim(*x.t, x.n, 2, kc, "k_cache", 2));
      FLASH_CHECK(check_dim(*x.t, x.n, 3, q, "q", 3));
    }
  }
  const int64_t d = q.shape[3];
  if (d % 8 != 0 || d > 256)
    return fail(FLASH_ERROR_UNSUPPORTED_HEAD_DIM, "head_dim (q.shape[3]) is ", d, " but must be a multiple of 8 in [8, 256]");
  if (q.device_type == FLASH_DEVICE_CUDA && q.dtype == FLASH_DTYPE_FP32)
    return fail(FLASH_ERROR_UNSUPPORTED_DTYPE, "q.dtype is fp32 but CUDA tensors must be fp16 or bf16");
  if (lse.data != nullptr) FLASH_CHECK(check_lse(lse, "lse", q, "q"));

  // The cache's addressing.
  const int64_t batch = q.shape[0];
  if (a.cache_seqlens == nullptr) return fail(FLASH_ERROR_NULL_POINTER, "cache_seqlens is NULL");
  int64_t bt_stride = 0;
  if (paged) {
    if (a.cache_batch_idx != nullptr)
      return fail(FLASH_ERROR_INVALID_ARGUMENT, "cache_batch_idx is set but block_table is too: cache_batch_idx is only for "
                  "the contiguous cache (a paged sequence's pages are its block_table row)");
    if (a.max_pages_per_seq < 1)
      return fail(FLASH_ERROR_INVALID_ARGUMENT, "max_pages_per_seq is ", a.max_pages_per_seq, " but must be >= 1 with a block_table");
    if (a.block_table_stride < 0)
      return fail(FLASH_ERROR_INVALID_ARGUMENT, "block_table_stride is ", a.block_table_stride, " but must be >= 0");
    bt_stride = a.block_table_stride != 0 ? a.block_table_stride : a.max_pages_per_seq;
    if (bt_stride > (std::numeric_limits<int64_t>::max() / 8) / batch)
      return fail(FLASH_ERROR_INVALID_ARGUMENT, "block_table_stride is ", a.block_table_stride, ", too large");
  } else if (a.cache_batch_idx == nullptr && kc.shape[0] < batch) {
    return fail(FLASH_ERROR_BAD_SHAPE, "k_cache.shape[0] (batch_cache) is ", kc.shape[0], " but q.shape[0] (batch) is ", batch,
                " and cache_batch_idx is NULL");
  }

  // Options.
  if (!std::isfinite(a.softmax_scale)) return fail(FLASH_ERROR_INVALID_ARGUMENT, "softmax_scale is not finite");
  if (a.causal != 0 && a.causal != 1) return fail(FLASH_ERROR_INVALID_ARGUMENT, "causal is ", a.causal, " but must be 0 or 1");
  if (a.window_left < -1) return fail(FLASH_ERROR_BAD_MASK, "window_left is ", a.window_left, " but must be >= -1");
  if (a.window_right < -1) return fail(FLASH_ERROR_BAD_MASK, "window_right is ", a.window_right, " but must be >= -1");
  if (a.num_splits < 0 || a.num_splits > kMaxSplits)
    return fail(FLASH_ERROR_INVALID_ARGUMENT, "num_splits is ", a.num_splits, " but must be in [0, ", kMaxSplits, "] (0 = choose)");
  if (a.algorithm < 0 || a.algorithm >= FLASH_ALGO_COUNT)
    return fail(FLASH_ERROR_INVALID_ARGUMENT, "algorithm is ", a.algorithm, ", not a FLASH_ALGO_* value");
  if (a.flags != 0) return fail(FLASH_ERROR_INVALID_ARGUMENT, "flags is ", a.flags, " but no flag is defined for flash_fwd_kvcache");
  if (a.workspace != nullptr && reinterpret_cast<uintptr_t>(a.workspace) % 8 != 0)
    return fail(FLASH_ERROR_INVALID_ARGUMENT, "workspace is not 8-byte aligned");

  // The overlap rule (flash.h CONVENTIONS): nothing the call writes -- o, lse, the workspace, and the caches when
  // appended to -- may overlap anything it reads (q, k_new, v_new, the caches otherwise, the index arrays) or another
  // array it writes; a written tensor may not alias itself. The workspace is part of it: the split partials written
  // there over q or cache_seqlens would be read back as the next sequence's queries or lengths.
  if (append) {
    FLASH_CHECK(check_no_self_overlap(kc, "k_cache"));
    FLASH_CHECK(check_no_self_overlap(vc, "v_cache"));
  }
  FLASH_CHECK(check_no_self_overlap(o, "o"));
  if (lse.data != nullptr) FLASH_CHECK(check_no_self_overlap(lse, "lse"));
  Arrays io;
  io.read(q, "q");
  const int64_t per_seq[1] = {batch}, unit[1] = {1};
  FLASH_CHECK(io.read_int32(a.cache_seqlens, 1, per_seq, unit, q.device_type, q.device_id, "cache_seqlens",
                            FLASH_ERROR_INVALID_ARGUMENT));
  if (append) io.read(kn, "k_new"), io.read(vn, "v_new");
  FLASH_CHECK(io.read_int32(a.cache_batch_idx, 1, per_seq, unit, q.device_type, q.device_id, "cache_batch_idx",
                            FLASH_ERROR_INVALID_ARGUMENT));
  if (paged) {
    const int64_t table[2] = {batch, a.max_pages_per_seq}, table_strides[2] = {bt_stride, 1};
    FLASH_CHECK(io.read_int32(a.block_table, 2, table, table_strides, q.device_type, q.device_id, "block_table",
                              FLASH_ERROR_INVALID_ARGUMENT));
  }
  if (append) io.write(kc, "k_cache"), io.write(vc, "v_cache");
  else io.read(kc, "k_cache"), io.read(vc, "v_cache");
  io.write(o, "o");
  io.write(lse, "lse");
  io.write_bytes(a.workspace, a.workspace_size, q.device_type, q.device_id, "workspace");
  FLASH_CHECK(io.check_disjoint());

  // Normalise.
  *p = KvcacheParams{};
  p->q = q.data;
  p->k_cache = kc.data;
  p->v_cache = vc.data;
  p->k_new = append ? kn.data : nullptr;
  p->v_new = append ? vn.data : nullptr;
  p->o = o.data;
  p->lse = lse.data != nullptr ? static_cast<float*>(lse.data) : nullptr;
  p->cache_seqlens = a.cache_seqlens;
  p->cache_batch_idx = paged ? nullptr : a.cache_batch_idx;
  p->block_table = a.block_table;
  p->block_table_stride = bt_stride;
  p->max_pages_per_seq = paged ? a.max_pages_per_seq : 0;
  p->q_batch_stride = q.strides[0], p->q_row_stride = q.strides[1], p->q_head_stride = q.strides[2];
  p->o_batch_stride = o.strides[0], p->o_row_stride = o.strides[1], p->o_head_stride = o.strides[2];
  p->kc_batch_stride = kc.strides[0], p->kc_row_stride = kc.strides[1], p->kc_head_stride = kc.strides[2];
  p->vc_batch_stride = vc.strides[0], p->vc_row_stride = vc.strides[1], p->vc_head_stride = vc.strides[2];
  if (append) {
    p->kn_batch_stride = kn.strides[0], p->kn_row_stride = kn.strides[1], p->kn_head_stride = kn.strides[2];
    p->vn_batch_stride = vn.strides[0], p->vn_row_stride = vn.strides[1], p->vn_head_stride = vn.strides[2];
  }
  if (p->lse) p->lse_batch_stride = lse.strides[0], p->lse_head_stride = lse.strides[1], p->lse_row_stride = lse.strides[2];
  p->batch = static_cast<int32_t>(batch);
  p->seqlen_new = static_cast<int32_t>(q.shape[1]);
  p->heads_q = static_cast<int32_t>(q.shape[2]);
  p->heads_kv = static_cast<int32_t>(kc.shape[2]);
  p->head_ratio = p->heads_q / p->heads_kv;
  p->head_dim = static_cast<int32_t>(d);
  p->cache_rows = static_cast<int32_t>(kc.shape[0]);
  p->max_len = static_cast<int32_t>(kc.shape[1]);
  p->paged = paged;
  p->dtype = static_cast<DType>(q.dtype);
  p->scale = a.softmax_scale != 0.0f ? a.softmax_scale : static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  p->window_left = a.window_left;
  p->window_right = a.causal ? 0 : a.window_right;
  p->num_splits = a.num_splits;
  p->device_id = q.device_type == FLASH_DEVICE_CUDA ? q.device_id : -1;
  p->stream = a.stream;
  p->workspace = a.workspace;
  p->workspace_size = a.workspace_size;

  // No sequence could take the appended keys: refused here for every device (the GPU kernels cannot see a
  // host-side refusal of their device-resident cache_seqlens, and clamp them into [0, capacity - seqlen_new]).
  const int64_t capacity = paged ? int64_t{p->max_pages_per_seq} * p->max_len : p->max_len;
  if (append && capacity < p->seqlen_new)
    return fail(FLASH_ERROR_INVALID_ARGUMENT, "seqlen_new is ", p->seqlen_new, " but a sequence holds at most ", capacity,
                paged ? " keys (max_pages_per_seq * page_size)" : " keys (k_cache.shape[1], max_len)");
  if (q.device_type == FLASH_DEVICE_CPU) FLASH_CHECK(check_indices(a, *p));
  return FLASH_OK;
}

int32_t validate_combine(const flash_combine_args* args, CombineParams* p, std::vector<CombinePart>* parts) {
  if (args == nullptr) return fail(FLASH_ERROR_NULL_POINTER, "args is NULL");
  const flash_combine_args& a = *args;
  if (a.num_parts < 1) return fail(FLASH_ERROR_INVALID_ARGUMENT, "num_parts is ", a.num_parts, " but must be >= 1");
  if (a.o_parts == nullptr) return fail(FLASH_ERROR_NULL_POINTER, "o_parts is NULL");
  if (a.lse_parts == nullptr) return fail(FLASH_ERROR_NULL_POINTER, "lse_parts is NULL");
  const flash_tensor &o = a.o, &lse = a.lse;
  FLASH_CHECK(check_tensor(o, "o", 4, true));
  Arrays io;  // the parts are read, o and lse written
  for (int32_t s = 0; s < a.num_parts; ++s) {
    const std::string on = "o_parts[" + std::to_string(s) + "]", ln = "lse_parts[" + std::to_string(s) + "]";
    const flash_tensor &op = a.o_parts[s], &lp = a.lse_parts[s];
    FLASH_CHECK(check_tensor(op, on, 4, true));
    if (s > 0) FLASH_CHECK(check_same_kind(op, on, a.o_parts[0], "o_parts[0]"));
    FLASH_CHECK(check_same_device(op, on, o, "o"));
    for (int i = 0; i < 4; ++i) FLASH_CHECK(check_dim(op, on, i, o, "o", i));
    FLASH_CHECK(check_lse(lp, ln, o, "o"));
    io.read(op, on);
    io.read(lp, ln);
  }
  if (lse.data != nullptr) FLASH_CHECK(check_lse(lse, "lse", o, "o"));
  FLASH_CHECK(check_no_self_overlap(o, "o"));
  if (lse.data != nullptr) FLASH_CHECK(check_no_self_overlap(lse, "lse"));
  io.write(o, "o");
  io.write(lse, "lse");
  FLASH_CHECK(io.check_disjoint());

  parts->assign(a.num_parts, CombinePart{});
  for (int32_t s = 0; s < a.num_parts; ++s) {
    const flash_tensor &op = a.o_parts[s], &lp = a.lse_parts[s];
    CombinePart& x = (*parts)[s];
    x.o = op.data;
    x.lse = static_cast<const float*>(lp.data);
    x.o_batch_stride = op.strides[0], x.o_row_stride = op.strides[1], x.o_head_stride = op.strides[2];
    x.lse_batch_stride = lp.strides[0], x.lse_head_stride = lp.strides[1], x.lse_row_stride = lp.strides[2];
  }
  *p = CombineParams{};
  p->num_parts = a.num_parts;
  p->parts = parts->data();
  p->part_dtype = static_cast<DType>(a.o_parts[0].dtype);
  p->o = o.data;
  p->lse = lse.data != nullptr ? static_cast<float*>(lse.data) : nullptr;
  p->o_batch_stride = o.strides[0], p->o_row_stride = o.strides[1], p->o_head_stride = o.strides[2];
  if (p->lse) p->lse_batch_stride = lse.strides[0], p->lse_head_stride = lse.strides[1], p->lse_row_stride = lse.strides[2];
  p->o_dtype = static_cast<DType>(o.dtype);
  p->batch = static_cast<int32_t>(o.shape[0]);
  p->seqlen = static_cast<int32_t>(o.shape[1]);
  p->heads = static_cast<int32_t>(o.shape[2]);
  p->head_dim = static_cast<int32_t>(o.shape[3]);
  p->device_id = o.device_type == FLASH_DEVICE_CUDA ? o.device_id : -1;
  p->stream = a.stream;
  return FLASH_OK;
}

}  // namespace flash
