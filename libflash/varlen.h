// libflash/varlen.h -- packed variable-length batches on the host side (flash.h, "Packed variable-length batches").
//
// A varlen call is a list of dense problems of batch 1, one per sequence, each with its own lengths and diagonal.
// sequence_view() writes that problem for sequence s (pointers moved to the sequence's first rows), so a backend
// that runs dense problems runs varlen ones by running each sequence's view: the CPU algorithms do exactly that
// (libflash/cpu/). The CUDA algorithms refuse varlen in their supports() until their kernels read the offsets
// (issue 72): gpu_refuses_varlen() is that one refusal, worded once.
//
// Host code only: the views read cu_seqlens and seqused_k, which must be host memory (a CPU call's, checked by
// capi/validate.cpp before any backend runs).
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "params.h"

namespace flash {

// The message of every CUDA algorithm's refusal of a varlen call (tests match it).
inline constexpr const char* kVarlenGpuRefusal = "varlen runs on the cpu algorithm so far (GPU kernels: issue 72)";

// True (and *why set) when p is a varlen call: the CUDA algorithms' kernels do not read cu_seqlens yet.
inline bool gpu_refuses_varlen(const FwdParams& p, std::string* why) {
  if (!p.varlen) return false;
  if (why) *why = kVarlenGpuRefusal;
  return true;
}

// Query rows and keys of sequence s.
inline int64_t varlen_seqlen_q(const FwdParams& p, int64_t s) { return int64_t{p.cu_seqlens_q[s + 1]} - p.cu_seqlens_q[s]; }
inline int64_t varlen_seqlen_k(const FwdParams& p, int64_t s) {
  return p.seqused_k != nullptr ? int64_t{p.seqused_k[s]} : int64_t{p.cu_seqlens_k[s + 1]} - p.cu_seqlens_k[s];
}

namespace varlen_detail {
template <class Ptr>
Ptr advance(Ptr base, int64_t elements, size_t elem_bytes) {
  if (base == nullptr) return base;
  using Byte = std::conditional_t<std::is_const_v<std::remove_pointer_t<Ptr>>, const char, char>;
  return reinterpret_cast<Ptr>(reinterpret_cast<Byte*>(base) + elements * static_cast<int64_t>(elem_bytes));
}
// The forward's part of a view: everything a FwdParams holds (BwdParams's own fields are done by the caller).
inline void view_common(const FwdParams& p, int64_t s, FwdParams* v) {
  const int64_t q0 = p.cu_seqlens_q[s], k0 = p.cu_seqlens_k[s];
  const size_t e = dtype_size(p.dtype);
  v->q = advance(p.q, q0 * p.q_row_stride, e);
  v->o = advance(p.o, q0 * p.o_row_stride, e);
  v->k = advance(p.k, k0 * p.k_row_stride, e);
  v->v = advance(p.v, k0 * p.v_row_stride, e);
  v->lse = advance(p.lse, q0 * p.lse_row_stride, sizeof(float));
  v->batch = 1;
  v->seqlen_q = static_cast<int32_t>(varlen_seqlen_q(p, s));
  v->seqlen_k = static_cast<int32_t>(varlen_seqlen_k(p, s));
  v->diag_offset = p.bottom_right ? int64_t{v->seqlen_k} - v->seqlen_q : 0;
  v->varlen = false;
  v->cu_seqlens_q = v->cu_seqlens_k = v->seqused_k = nullptr;
  v->total_q = v->total_k = 0;
}
}  // namespace varlen_detail

// The dense problem of sequence s of varlen call p: batch 1, seqlen_q/seqlen_k the sequence's own, its diagonal,
// the data pointers at its first query row and first key (batch index 0, so the batch strides are never used).
inline FwdParams sequence_view(const FwdParams& p, int64_t s) {
  FwdParams v = p;
  varlen_detail::view_common(p, s, &v);
  return v;
}
inline BwdParams sequence_view(const BwdParams& p, int64_t s) {
  BwdParams v = p;
  varlen_detail::view_common(p, s, &v);
  const int64_t q0 = p.cu_seqlens_q[s], k0 = p.cu_seqlens_k[s];
  const size_t e = dtype_size(p.dtype);
  v.d_o = varlen_detail::advance(p.d_o, q0 * p.do_row_stride, e);
  v.dq = varlen_detail::advance(p.dq, q0 * p.dq_row_stride, e);
  v.dk = varlen_detail::advance(p.dk, k0 * p.dk_row_stride, e);
  v.dv = varlen_detail::advance(p.dv, k0 * p.dv_row_stride, e);
  return v;
}

// The dense problems a call is made of: the call itself, or the view of each of its sequences (in order; zero-length
// ones included: a sequence with keys and no queries still owns dk and dv rows).
template <class Params>
std::vector<Params> dense_parts(const Params& p) {
  if (!p.varlen) return {p};
  std::vector<Params> parts;
  parts.reserve(static_cast<size_t>(p.batch));
  for (int64_t s = 0; s < p.batch; ++s) parts.push_back(sequence_view(p, s));
  return parts;
}

// The backward's dk and dv rows of each slot past seqused_k (keys no query sees): written 0 (all-zero bits in every
// dtype). Nothing to do without seqused_k.
inline void zero_unused_key_rows(const BwdParams& p) {
  if (!p.varlen || p.seqused_k == nullptr) return;
  const size_t row_bytes = size_t(p.head_dim) * dtype_size(p.dtype);
  for (int64_t s = 0; s < p.batch; ++s)
    for (int64_t r = int64_t{p.cu_seqlens_k[s]} + p.seqused_k[s]; r < p.cu_seqlens_k[s + 1]; ++r)
      for (int64_t h = 0; h < p.heads_kv; ++h) {
        std::memset(varlen_detail::advance(p.dk, r * p.dk_row_stride + h * p.dk_head_stride, dtype_size(p.dtype)), 0,
                    row_bytes);
        std::memset(varlen_detail::advance(p.dv, r * p.dv_row_stride + h * p.dv_head_stride, dtype_size(p.dtype)), 0,
                    row_bytes);
      }
}

}  // namespace flash
