// capi/validate.cpp -- turns a caller's flash_fwd_args (flash_bwd_args) into a checked, normalised
// flash::FwdParams (flash::BwdParams); the two share every helper below.
//
// Every rule of the ABI is enforced here, once, before any backend runs, and each failure names the
// exact field and value ("k.shape[3] is 96 but q.shape[3] is 128"). Backends may then assume a valid
// problem and only check what is specific to them (Algorithm::supports).
#include "validate.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <utility>
#include <vector>

#include "../libflash/error.h"
#include "tensor_checks.h"

namespace flash {
namespace {

int32_t check_dim(const flash_tensor& t, const char* tn, int td, const flash_tensor& ref, const char* rn, int rd) {
  if (t.shape[td] != ref.shape[rd])
    return fail(FLASH_ERROR_BAD_SHAPE, tn, ".shape[", td, "] is ", t.shape[td], " but ", rn, ".shape[", rd, "] is ",
                ref.shape[rd]);
  return FLASH_OK;
}

#define FLASH_CHECK(expr)                 \
  do {                                    \
    const int32_t status_ = (expr);       \
    if (status_ != FLASH_OK) return status_; \
  } while (0)

// The block mask's fields, then (host masks) its entries. Its two index arrays join `io`, the arrays the call
// reads, before any entry is read (their spans are checked there).
int32_t check_block_mask(const flash_block_mask& m, const flash_tensor& q, int64_t seqlen_k, FwdParams* p, Arrays* io) {
  if (m.block_m == 0 && m.block_n == 0)
    return fail(FLASH_ERROR_BAD_MASK, "block_mask->block_m and block_n are 0: the mask was not initialised "
                "(call flash_block_mask_init, which sets 128, then set its fields)");
  for (int32_t bs : {m.block_m, m.block_n})
    if (bs != 64 && bs != 128)
      return fail(FLASH_ERROR_BAD_MASK, "block_mask block size is ", bs, " but must be 64 or 128");
  const int64_t want_q_blocks = (q.shape[1] + m.block_m - 1) / m.block_m;
  if (m.num_q_blocks != want_q_blocks)
    return fail(FLASH_ERROR_BAD_MASK, "block_mask->num_q_blocks is ", m.num_q_blocks, " but seqlen_q ", q.shape[1],
                " with block_m ", m.block_m, " needs ", want_q_blocks);
  const int64_t kv_blocks = (seqlen_k + m.block_n - 1) / m.block_n;
  if (m.max_kv_blocks < 0 || m.max_kv_blocks > kv_blocks)
    return fail(FLASH_ERROR_BAD_MASK, "block_mask->max_kv_blocks is ", m.max_kv_blocks, " but must be in [0, ",
                kv_blocks, "]");
  if (m.kv_num_blocks == nullptr) return fail(FLASH_ERROR_NULL_POINTER, "block_mask->kv_num_blocks is NULL");
  if (m.kv_indices == nullptr && m.max_kv_blocks > 0) return fail(FLASH_ERROR_NULL_POINTER, "block_mask->kv_indices is NULL");
  for (const auto& [ptr, what] : {std::pair<const int32_t*, const char*>{m.kv_num_blocks, "kv_num_blocks"}, {m.kv_indices, "kv_indices"}})
    if (reinterpret_cast<uintptr_t>(ptr) % 4 != 0)
      return fail(FLASH_ERROR_BAD_MASK, "block_mask->", what, " is not aligned to its int32 elements (4 bytes)");
  for (int i = 0; i < 3; ++i)
    if (m.kv_num_blocks_strides[i] < 0)
      return fail(FLASH_ERROR_BAD_MASK, "block_mask->kv_num_blocks_strides[", i, "] is negative");
  for (int i = 0; i < 4; ++i)
    if (m.kv_indices_strides[i] < 0) return fail(FLASH_ERROR_BAD_MASK, "block_mask->kv_indices_strides[", i, "] is negative");
  BlockMaskParams& b = p->block_mask;
  b.kv_num_blocks = m.kv_num_blocks;
  b.kv_indices = m.kv_indices;
  b.num_batch_stride = m.kv_num_blocks_strides[0];
  b.num_head_stride = m.kv_num_blocks_strides[1];
  b.num_qblock_stride = m.kv_num_blocks_strides[2];
  b.idx_batch_stride = m.kv_indices_strides[0];
  b.idx_head_stride = m.kv_indices_strides[1];
  b.idx_qblock_stride = m.kv_indices_strides[2];
  b.idx_stride = m.kv_indices_strides[3];
  b.block_m = m.block_m;
  b.block_n = m.block_n;
  b.num_q_blocks = m.num_q_blocks;
  b.max_kv_blocks = m.max_kv_blocks;
  const int64_t num_shape[3] = {p->batch, p->heads_q, m.num_q_blocks};
  const int64_t idx_shape[4] = {p->batch, p->heads_q, m.num_q_blocks, m.max_kv_blocks};
  FLASH_CHECK(io->read_int32(m.kv_num_blocks, 3, num_shape, m.kv_num_blocks_strides, q.device_type, q.device_id,
                             "block_mask->kv_num_blocks", FLASH_ERROR_BAD_MASK));
  if (m.max_kv_blocks > 0)
    FLASH_CHECK(io->read_int32(m.kv_indices, 4, idx_shape, m.kv_indices_strides, q.device_type, q.device_id,
                               "block_mask->kv_indices", FLASH_ERROR_BAD_MASK));
  // Host-resident masks are checked element by element (device-resident ones cannot be read without a
  // synchronisation; the GPU kernels skip out-of-range entries instead of reading out of bounds).
  if (q.device_type == FLASH_DEVICE_CPU) {
    std::vector<char> seen(static_cast<size_t>(kv_blocks));
    for (int64_t bb = 0; bb < p->batch; ++bb)
      for (int64_t h = 0; h < p->heads_q; ++h)
        for (int64_t qb = 0; qb < m.num_q_blocks; ++qb) {
          const int32_t n = b.kv_num_blocks[bb * b.num_batch_stride + h * b.num_head_stride + qb * b.num_qblock_stride];
          if (n < 0 || n > m.max_kv_blocks)
            return fail(FLASH_ERROR_BAD_MASK, "block_mask->kv_num_blocks[", bb, ",", h, ",", qb, "] is ", n,
                        " but must be in [0, ", m.max_kv_blocks, "]");
          std::fill(seen.begin(), seen.end(), 0);
          for (int32_t t = 0; t < n; ++t) {
            const int32_t kb = b.kv_indices[bb * b.idx_batch_stride + h * b.idx_head_stride + qb * b.idx_qblock_stride +
                                            t * b.idx_stride];
            if (kb < 0 || kb >= kv_blocks)
              return fail(FLASH_ERROR_BAD_MASK, "block_mask->kv_indices[", bb, ",", h, ",", qb, ",", t, "] is ", kb,
                          " but must be in [0, ", kv_blocks, ")");
            if (seen[kb]++)
              return fail(FLASH_ERROR_BAD_MASK, "block_mask->kv_indices[", bb, ",", h, ",", qb, "] lists key block ", kb,
                          " twice");
          }
        }
  }
  return FLASH_OK;
}

struct Named {
  const flash_tensor* t;
  const char* n;
};

// The axes of a q/k/v-like tensor: dense [b, s, h, d] (ndim 4), varlen [total, h, d] (ndim 3).
struct Axes {
  int ndim, row, head, dim;  // the shape index of each axis
};
Axes axes(bool varlen) { return varlen ? Axes{3, 0, 1, 2} : Axes{4, 1, 2, 3}; }

// q, k, v and the tensors shaped like them: each tensor's own fields, then dtype and device agreement,
// then shapes (q [b, sq, hq, d]; k, v [b, sk, hkv, d]; like_q as q; like_k as k; varlen: q [total_q, hq, d],
// k, v [total_k, hkv, d]), GQA and head_dim.
// Shared by the forward (like_q = {o}) and the backward (like_q = {o, d_o, dq}, like_k = {dk, dv}).
int32_t check_attention_tensors(const flash_tensor& q, const flash_tensor& k, const flash_tensor& v,
                                std::initializer_list<Named> like_q, std::initializer_list<Named> like_k, bool varlen) {
  const Axes ax = axes(varlen);
  FLASH_CHECK(check_tensor(q, "q", ax.ndim, true));
  FLASH_CHECK(check_tensor(k, "k", ax.ndim, true));
  FLASH_CHECK(check_tensor(v, "v", ax.ndim, true));
  for (const Named& x : like_q) FLASH_CHECK(check_tensor(*x.t, x.n, ax.ndim, true));
  for (const Named& x : like_k) FLASH_CHECK(check_tensor(*x.t, x.n, ax.ndim, true));

  std::vector<Named> others = {{&k, "k"}, {&v, "v"}};
  others.insert(others.end(), like_q.begin(), like_q.end());
  others.insert(others.end(), like_k.begin(), like_k.end());
  for (const auto& x : others) {
    if (x.t->dtype != q.dtype)
      return fail(FLASH_ERROR_DTYPE_MISMATCH, x.n, ".dtype is ", dtype_name(x.t->dtype), " but q.dtype is ",
                  dtype_name(q.dtype));
    if (x.t->device_type != q.device_type || x.t->device_id != q.device_id)
      return fail(FLASH_ERROR_DEVICE_MISMATCH, x.n, " is on ", device_name(*x.t), " but q is on ", device_name(q));
  }

  if (!varlen) FLASH_CHECK(check_dim(k, "k", 0, q, "q", 0));  // (varlen: total_k and total_q are independent)
  FLASH_CHECK(check_dim(k, "k", ax.dim, q, "q", ax.dim));
  for (int i = 0; i < ax.ndim; ++i) FLASH_CHECK(check_dim(v, "v", i, k, "k", i));
  for (const Named& x : like_q)
    for (int i = 0; i < ax.ndim; ++i) FLASH_CHECK(check_dim(*x.t, x.n, i, q, "q", i));
  for (const Named& x : like_k)
    for (int i = 0; i < ax.ndim; ++i) FLASH_CHECK(check_dim(*x.t, x.n, i, k, "k", i));
  if (q.shape[ax.head] % k.shape[ax.head] != 0)
    return fail(FLASH_ERROR_BAD_SHAPE, "q.shape[", ax.head, "] (heads_q) is ", q.shape[ax.head], ", not a multiple of k.shape[",
                ax.head, "] (heads_kv) ", k.shape[ax.head]);
  const int64_t d = q.shape[ax.dim];
  if (d % 8 != 0 || d > 256)
    return fail(FLASH_ERROR_UNSUPPORTED_HEAD_DIM, "head_dim (q.shape[", ax.dim, "]) is ", d,
                " but must be a multiple of 8 in [8, 256]");

  if (q.device_type == FLASH_DEVICE_CUDA && q.dtype == FLASH_DTYPE_FP32)
    return fail(FLASH_ERROR_UNSUPPORTED_DTYPE, "q.dtype is fp32 but CUDA tensors must be fp16 or bf16");
  return FLASH_OK;
}

// The LSE tensor's own fields and its agreement with q: fp32 [b, hq, sq] (varlen: [hq, total_q]) on q's device.
int32_t check_lse_tensor(const flash_tensor& lse, const flash_tensor& q, bool varlen) {
  FLASH_CHECK(check_tensor(lse, "lse", varlen ? 2 : 3, false));
  if (lse.dtype != FLASH_DTYPE_FP32)
    return fail(FLASH_ERROR_DTYPE_MISMATCH, "lse.dtype is ", dtype_name(lse.dtype), " but must be fp32");
  if (lse.device_type != q.device_type || lse.device_id != q.device_id)
    return fail(FLASH_ERROR_DEVICE_MISMATCH, "lse is on ", device_name(lse), " but q is on ", device_name(q));
  if (varlen) {
    FLASH_CHECK(check_dim(lse, "lse", 0, q, "q", 1));
    FLASH_CHECK(check_dim(lse, "lse", 1, q, "q", 0));
    return FLASH_OK;
  }
  FLASH_CHECK(check_dim(lse, "lse", 0, q, "q", 0));
  FLASH_CHECK(check_dim(lse, "lse", 1, q, "q", 2));
  FLASH_CHECK(check_dim(lse, "lse", 2, q, "q", 1));
  return FLASH_OK;
}

// ---- Packed variable-length batches (flash.h) --------------------------------------------------------------

// The varlen fields among themselves, before any tensor is looked at (they decide the tensors' ndim): all 0/NULL
// (dense), or cu_seqlens_q and cu_seqlens_k with varlen_batch >= 1, max_seqlen_* >= 0, aligned arrays, no block
// mask. reserved_1_3 must be 0 either way.
template <class Args>
int32_t check_varlen_fields(const Args& a) {
  if (a.reserved_1_3 != 0)
    return fail(FLASH_ERROR_INVALID_ARGUMENT, "reserved_1_3 is ", a.reserved_1_3, " but must be 0");
  if (a.cu_seqlens_q == nullptr) {
    if (a.cu_seqlens_k != nullptr)
      return fail(FLASH_ERROR_NULL_POINTER, "cu_seqlens_q is NULL but cu_seqlens_k is set: a packed variable-length "
                  "batch needs both (or neither, for a dense call)");
    if (a.seqused_k != nullptr)
      return fail(FLASH_ERROR_INVALID_ARGUMENT, "seqused_k is set but cu_seqlens_q is NULL: seqused_k is for packed "
                  "variable-length batches only");
    if (a.varlen_batch != 0 || a.max_seqlen_q != 0 || a.max_seqlen_k != 0)
      return fail(FLASH_ERROR_INVALID_ARGUMENT, "varlen_batch (", a.varlen_batch, "), max_seqlen_q (", a.max_seqlen_q,
                  ") or max_seqlen_k (", a.max_seqlen_k, ") is set but cu_seqlens_q is NULL: they describe a packed "
                  "variable-length batch (set cu_seqlens_q and cu_seqlens_k too, or leave them 0)");
    return FLASH_OK;
  }
  if (a.cu_seqlens_k == nullptr)
    return fail(FLASH_ERROR_NULL_POINTER, "cu_seqlens_k is NULL but cu_seqlens_q is set: a packed variable-length batch "
                "needs both");
  if (a.varlen_batch < 1)
    return fail(FLASH_ERROR_INVALID_ARGUMENT, "varlen_batch is ", a.varlen_batch,
                " but must be >= 1 with cu_seqlens_q set (cu_seqlens_q and cu_seqlens_k hold varlen_batch + 1 offsets)");
  if (a.max_seqlen_q < 0) return fail(FLASH_ERROR_INVALID_ARGUMENT, "max_seqlen_q is ", a.max_seqlen_q, " but must be >= 0");
  if (a.max_seqlen_k < 0) return fail(FLASH_ERROR_INVALID_ARGUMENT, "max_seqlen_k is ", a.max_seqlen_k, " but must be >= 0");
  for (const auto& [ptr, what] : {std::pair<const int32_t*, const char*>{a.cu_seqlens_q, "cu_seqlens_q"},
                                  {a.cu_seqlens_k, "cu_seqlens_k"}, {a.seqused_k, "seqused_k"}})
    if (reinterpret_cast<uintptr_t>(ptr) % 4 != 0)
      return fail(FLASH_ERROR_INVALID_ARGUMENT, what, " is not aligned to its int32 elements (4 bytes)");
  if (a.block_mask != nullptr)
    return fail(FLASH_ERROR_UNSUPPORTED, "block_mask is set with cu_seqlens_q: block-sparse masks are not supported "
                "with packed variable-length batches (flash.h)");
  return FLASH_OK;
}

// One offsets array's contents (host memory): [0] == 0, non-decreasing, the last within `rows` (the tensors'
// first dimension); *longest = the longest sequence it describes.
int32_t check_offsets(const int32_t* cu, int64_t batch, const char* name, const char* tensor, int64_t rows, int64_t* longest) {
  if (cu[0] != 0) return fail(FLASH_ERROR_INVALID_ARGUMENT, name, "[0] is ", cu[0], " but must be 0");
  *longest = 0;
  for (int64_t i = 1; i <= batch; ++i) {
    if (cu[i] < cu[i - 1])
      return fail(FLASH_ERROR_INVALID_ARGUMENT, name, "[", i, "] is ", cu[i], ", less than ", name, "[", i - 1, "] = ",
                  cu[i - 1], ": the offsets must not decrease");
    *longest = std::max<int64_t>(*longest, int64_t{cu[i]} - cu[i - 1]);
  }
  if (cu[batch] > rows)
    return fail(FLASH_ERROR_INVALID_ARGUMENT, name, "[", batch, "] is ", cu[batch], " but ", tensor, " has ", rows, " rows (",
                tensor, ".shape[0])");
  return FLASH_OK;
}

// The contents of host-resident varlen arrays (a CPU call), before anything is written.
template <class Args>
int32_t check_varlen_contents(const Args& a) {
  const int64_t batch = a.varlen_batch;
  int64_t longest_q = 0, longest_slot = 0;
  FLASH_CHECK(check_offsets(a.cu_seqlens_q, batch, "cu_seqlens_q", "q", a.q.shape[0], &longest_q));
  FLASH_CHECK(check_offsets(a.cu_seqlens_k, batch, "cu_seqlens_k", "k", a.k.shape[0], &longest_slot));
  int64_t longest_k = longest_slot;
  if (a.seqused_k != nullptr) {
    longest_k = 0;
    for (int64_t i = 0; i < batch; ++i) {
      const int64_t slot = int64_t{a.cu_seqlens_k[i + 1]} - a.cu_seqlens_k[i];
      if (a.seqused_k[i] < 0 || a.seqused_k[i] > slot)
        return fail(FLASH_ERROR_INVALID_ARGUMENT, "seqused_k[", i, "] is ", a.seqused_k[i], " but sequence ", i,
                    "'s slot holds ", slot, " keys (cu_seqlens_k[", i + 1, "] - cu_seqlens_k[", i, "]): must be in [0, ",
                    slot, "]");
      longest_k = std::max<int64_t>(longest_k, a.seqused_k[i]);
    }
  }
  if (a.max_seqlen_q < longest_q)
    return fail(FLASH_ERROR_INVALID_ARGUMENT, "max_seqlen_q is ", a.max_seqlen_q, " but a sequence has ", longest_q,
                " queries (cu_seqlens_q)");
  if (a.max_seqlen_k < longest_k)
    return fail(FLASH_ERROR_INVALID_ARGUMENT, "max_seqlen_k is ", a.max_seqlen_k, " but a sequence has ", longest_k,
                a.seqused_k != nullptr ? " keys (seqused_k)" : " keys (cu_seqlens_k)");
  return FLASH_OK;
}

// The scalar options, which flash_fwd_args and flash_bwd_args share field for field.
// |softmax_scale| above this is refused (flash.h, softmax_scale). Every practical scale lies far inside
// (1/sqrt(head_dim) is 0.06..0.35; temperatures reach ~100). Beyond it the gradients, which scale with
// softmax_scale, leave fp16's range (65504) for unit inputs, and the scaled scores of fp16 inputs
// (|q.k| <= 256 * 65504^2) would come within 2^12 of fp32's range, where the kernels' online softmax
// (scale * s - scale * max) overflows to inf - inf = NaN.
constexpr float kMaxSoftmaxScale = 65536.0f;

// The shortest text that reads back as x ("3e+38", "-65536.01").
std::string float_text(float x) {
  char buf[32];
  for (int digits = 1; digits <= 9; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, static_cast<double>(x));
    if (std::strtof(buf, nullptr) == x) break;
  }
  return buf;
}

template <class Args>
int32_t check_options(const Args& a) {
  if (!std::isfinite(a.softmax_scale)) return fail(FLASH_ERROR_INVALID_ARGUMENT, "softmax_scale is not finite");
  if (std::fabs(a.softmax_scale) > kMaxSoftmaxScale)
    return fail(FLASH_ERROR_INVALID_ARGUMENT, "softmax_scale is ", float_text(a.softmax_scale),
                " but |softmax_scale| must be at most 65536 (2^16)");
  if (a.causal != 0 && a.causal != 1)
    return fail(FLASH_ERROR_INVALID_ARGUMENT, "causal is ", a.causal, " but must be 0 or 1");
  if (a.causal_alignment != FLASH_ALIGN_BOTTOM_RIGHT && a.causal_alignment != FLASH_ALIGN_TOP_LEFT)
    return fail(FLASH_ERROR_INVALID_ARGUMENT, "causal_alignment is ", a.causal_alignment,
                " but must be FLASH_ALIGN_BOTTOM_RIGHT (0) or FLASH_ALIGN_TOP_LEFT (1)");
  if (a.window_left < -1) return fail(FLASH_ERROR_BAD_MASK, "window_left is ", a.window_left, " but must be >= -1");
  if (a.window_right < -1) return fail(FLASH_ERROR_BAD_MASK, "window_right is ", a.window_right, " but must be >= -1");
  if (a.algorithm < 0 || a.algorithm >= FLASH_ALGO_COUNT)
    return fail(FLASH_ERROR_INVALID_ARGUMENT, "algorithm is ", a.algorithm, ", not a FLASH_ALGO_* value");
  if ((a.flags & ~FLASH_FLAG_DETERMINISTIC) != 0)
    return fail(FLASH_ERROR_INVALID_ARGUMENT, "flags has unknown bits 0x", std::to_string(a.flags & ~FLASH_FLAG_DETERMINISTIC));
  return FLASH_OK;
}

// Normalises what the forward and the backward share (q, k, v, o, lse, sizes, scale, mask, execution)
// into *p, then checks the block mask. `lse` may have data == NULL (the forward's optional LSE).
// A varlen call's index arrays, element by element when they are host memory (a CPU call), after the overlap checks
// (an output over an index array is reported as such, not as the garbage it holds). Device-resident arrays cannot be
// read without a synchronisation: they are the caller's promise, and the kernels clamp what they read into the tensors
// (libflash/varlen.h, seq_bounds); that they are device memory on q's device is checked by libflash/dispatch.cpp.
template <class Args>
int32_t check_varlen_host_arrays(const Args& a) {
  if (a.cu_seqlens_q == nullptr || a.q.device_type != FLASH_DEVICE_CPU) return FLASH_OK;
  return check_varlen_contents(a);
}

// Element strides of a q/k/v-like tensor as (batch, row, head): dense [b, s, h, d], varlen [total, h, d] (batch 0).
struct Strides {
  int64_t batch, row, head;
};
Strides strides_of(const flash_tensor& t, bool varlen) {
  return varlen ? Strides{0, t.strides[0], t.strides[1]} : Strides{t.strides[0], t.strides[1], t.strides[2]};
}

// Normalises what the forward and the backward share (q, k, v, o, lse, sizes, scale, mask, execution, the varlen
// arrays) into *p, then checks the block mask. `lse` may have data == NULL (the forward's optional LSE).
template <class Args>
int32_t normalise_common(const Args& a, FwdParams* p, Arrays* io) {
  const flash_tensor &q = a.q, &k = a.k, &v = a.v, &o = a.o, &lse = a.lse;
  const bool want_lse = lse.data != nullptr;
  const bool varlen = a.cu_seqlens_q != nullptr;
  const Axes ax = axes(varlen);
  p->q = q.data;
  p->k = k.data;
  p->v = v.data;
  p->o = o.data;
  p->lse = want_lse ? static_cast<float*>(lse.data) : nullptr;
  const Strides qs = strides_of(q, varlen), ks = strides_of(k, varlen), vs = strides_of(v, varlen), os = strides_of(o, varlen);
  p->q_batch_stride = qs.batch, p->q_row_stride = qs.row, p->q_head_stride = qs.head;
  p->k_batch_stride = ks.batch, p->k_row_stride = ks.row, p->k_head_stride = ks.head;
  p->v_batch_stride = vs.batch, p->v_row_stride = vs.row, p->v_head_stride = vs.head;
  p->o_batch_stride = os.batch, p->o_row_stride = os.row, p->o_head_stride = os.head;
  if (want_lse) {
    if (varlen) p->lse_batch_stride = 0, p->lse_head_stride = lse.strides[0], p->lse_row_stride = lse.strides[1];
    else p->lse_batch_stride = lse.strides[0], p->lse_head_stride = lse.strides[1], p->lse_row_stride = lse.strides[2];
  }
  p->batch = varlen ? a.varlen_batch : static_cast<int32_t>(q.shape[0]);
  p->seqlen_q = varlen ? a.max_seqlen_q : static_cast<int32_t>(q.shape[1]);
  p->heads_q = static_cast<int32_t>(q.shape[ax.head]);
  p->seqlen_k = varlen ? a.max_seqlen_k : static_cast<int32_t>(k.shape[1]);
  p->heads_kv = static_cast<int32_t>(k.shape[ax.head]);
  p->head_ratio = p->heads_q / p->heads_kv;
  const int64_t d = q.shape[ax.dim];
  p->head_dim = static_cast<int32_t>(d);
  p->dtype = static_cast<DType>(q.dtype);
  p->scale = a.softmax_scale != 0.0f ? a.softmax_scale : static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  p->scale_log2 = static_cast<float>(static_cast<double>(p->scale) * 1.4426950408889634);
  p->window_left = a.window_left;
  // causal is the window (w, 0): it caps window_right at 0 whatever the caller put there.
  p->window_right = a.causal ? 0 : a.window_right;
  p->bottom_right = a.causal_alignment == FLASH_ALIGN_BOTTOM_RIGHT;
  // (varlen: per sequence, libflash/varlen.h)
  p->diag_offset = p->bottom_right && !varlen ? int64_t{p->seqlen_k} - p->seqlen_q : 0;
  p->is_causal = p->window_right == 0 && p->window_left < 0;
  p->has_window = p->window_left >= 0 || p->window_right >= 0;
  p->device_id = q.device_type == FLASH_DEVICE_CUDA ? q.device_id : -1;
  p->stream = a.stream;
  p->workspace = a.workspace;
  p->workspace_size = a.workspace_size;
  p->flags = a.flags;
  if (a.block_mask != nullptr) {
    p->has_block_mask = true;
    FLASH_CHECK(check_block_mask(*a.block_mask, q, k.shape[1], p, io));
  }
  if (varlen) {
    p->varlen = true;
    p->cu_seqlens_q = a.cu_seqlens_q;
    p->cu_seqlens_k = a.cu_seqlens_k;
    p->seqused_k = a.seqused_k;
    p->total_q = static_cast<int32_t>(q.shape[0]);
    p->total_k = static_cast<int32_t>(k.shape[0]);
    const int64_t offsets[1] = {int64_t{a.varlen_batch} + 1}, used[1] = {a.varlen_batch}, unit[1] = {1};
    FLASH_CHECK(io->read_int32(a.cu_seqlens_q, 1, offsets, unit, q.device_type, q.device_id, "cu_seqlens_q",
                               FLASH_ERROR_INVALID_ARGUMENT));
    FLASH_CHECK(io->read_int32(a.cu_seqlens_k, 1, offsets, unit, q.device_type, q.device_id, "cu_seqlens_k",
                               FLASH_ERROR_INVALID_ARGUMENT));
    FLASH_CHECK(io->read_int32(a.seqused_k, 1, used, unit, q.device_type, q.device_id, "seqused_k",
                               FLASH_ERROR_INVALID_ARGUMENT));
  }
  io->write_bytes(a.workspace, a.workspace_size, q.device_type, q.device_id, "workspace");
  return FLASH_OK;
}

}  // namespace

int32_t validate_fwd(const flash_fwd_args* args, FwdParams* p) {
  if (args == nullptr) return fail(FLASH_ERROR_NULL_POINTER, "args is NULL");
  const flash_tensor &q = args->q, &k = args->k, &v = args->v, &o = args->o, &lse = args->lse;

  FLASH_CHECK(check_varlen_fields(*args));
  const bool varlen = args->cu_seqlens_q != nullptr;
  FLASH_CHECK(check_attention_tensors(q, k, v, {{&o, "o"}}, {}, varlen));
  FLASH_CHECK(check_no_self_overlap(o, "o"));
  if (lse.data != nullptr) {
    FLASH_CHECK(check_lse_tensor(lse, q, varlen));
    FLASH_CHECK(check_no_self_overlap(lse, "lse"));
  }
  FLASH_CHECK(check_options(*args));

  Arrays io;
  io.read(q, "q"), io.read(k, "k"), io.read(v, "v");
  io.write(o, "o"), io.write(lse, "lse");
  *p = FwdParams{};
  FLASH_CHECK(normalise_common(*args, p, &io));
  FLASH_CHECK(io.check_disjoint());
  return check_varlen_host_arrays(*args);
}

int32_t validate_bwd(const flash_bwd_args* args, BwdParams* p) {
  if (args == nullptr) return fail(FLASH_ERROR_NULL_POINTER, "args is NULL");
  const flash_tensor &q = args->q, &k = args->k, &v = args->v, &o = args->o, &d_o = args->d_o, &lse = args->lse;
  const flash_tensor &dq = args->dq, &dk = args->dk, &dv = args->dv;

  FLASH_CHECK(check_varlen_fields(*args));
  const bool varlen = args->cu_seqlens_q != nullptr;
  FLASH_CHECK(check_attention_tensors(q, k, v, {{&o, "o"}, {&d_o, "d_o"}, {&dq, "dq"}}, {{&dk, "dk"}, {&dv, "dv"}},
                                      varlen));
  // The backward recomputes P from the forward's LSE: it is required.
  FLASH_CHECK(check_lse_tensor(lse, q, varlen));
  FLASH_CHECK(check_no_self_overlap(dq, "dq"));
  FLASH_CHECK(check_no_self_overlap(dk, "dk"));
  FLASH_CHECK(check_no_self_overlap(dv, "dv"));
  FLASH_CHECK(check_options(*args));

  Arrays io;
  io.read(q, "q"), io.read(k, "k"), io.read(v, "v"), io.read(o, "o"), io.read(d_o, "d_o"), io.read(lse, "lse");
  io.write(dq, "dq"), io.write(dk, "dk"), io.write(dv, "dv");
  *p = BwdParams{};
  FLASH_CHECK(normalise_common(*args, p, &io));
  FLASH_CHECK(io.check_disjoint());
  FLASH_CHECK(check_varlen_host_arrays(*args));
  p->d_o = d_o.data;
  p->dq = dq.data;
  p->dk = dk.data;
  p->dv = dv.data;
  const Strides dos = strides_of(d_o, varlen), dqs = strides_of(dq, varlen), dks = strides_of(dk, varlen),
                dvs = strides_of(dv, varlen);
  p->do_batch_stride = dos.batch, p->do_row_stride = dos.row, p->do_head_stride = dos.head;
  p->dq_batch_stride = dqs.batch, p->dq_row_stride = dqs.row, p->dq_head_stride = dqs.head;
  p->dk_batch_stride = dks.batch, p->dk_row_stride = dks.row, p->dk_head_stride = dks.head;
  p->dv_batch_stride = dvs.batch, p->dv_row_stride = dvs.row, p->dv_head_stride = dvs.head;
  p->deterministic = (args->flags & FLASH_FLAG_DETERMINISTIC) != 0;
  return FLASH_OK;
}

}  // namespace flash
