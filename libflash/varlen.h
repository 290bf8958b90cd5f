// libflash/varlen.h -- packed variable-length batches (flash.h, "Packed variable-length batches").
//
// A varlen call is a list of dense problems of batch 1, one per sequence, each with its own lengths and diagonal.
// sequence_view() writes that problem for sequence s (pointers moved to the sequence's first rows), so a backend
// that runs dense problems runs varlen ones by running each sequence's view: the CPU algorithms do exactly that
// (libflash/cpu/), and the naive GPU algorithm on host copies of the offsets (cuda/naive/). The fused CUDA kernels
// (sm80 forward and backward) read the offsets themselves, per CTA, through seq_bounds() below, which also serves
// dense calls (offsets 0, the call's lengths) so one code path addresses both; the sm90 forward's general kernels read
// them per tile (cuda/sm90/fwd/producer.cuh, varlen mode), through seq_bounds() too.
//
// sequence_view(), dense_parts() and zero_unused_key_rows() read cu_seqlens and seqused_k on the host: host memory (a
// CPU call's, checked by capi/validate.cpp before any backend runs, or the naive GPU algorithm's host copies of a CUDA
// call's arrays, which nothing checked: they place each sequence through seq_bounds(), which clamps).
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "params.h"

namespace flash {

#if defined(__CUDACC__)
#define FLASH_VARLEN_HD __host__ __device__
#else
#define FLASH_VARLEN_HD
#endif

// ---- Where sequence b lies, as a kernel sees it ------------------------------------------------------------------
// A CUDA call's cu_seqlens and seqused_k are device memory that the host never reads: their values are the caller's
// promise (flash.h), not checked. A kernel must nevertheless never touch memory outside the tensors whatever they
// hold, so seq_bounds() clamps what it reads:
//   q_start = cu_seqlens_q[b] clamped to [0, total_q], its end cu_seqlens_q[b+1] to [q_start, total_q];
//   k_start = cu_seqlens_k[b] clamped to [0, total_k], the slot's end cu_seqlens_k[b+1] to [k_start, total_k];
//   seqlen_k = seqused_k[b] clamped to [0, slot] (the slot without seqused_k);
//   seqlen_q and seqlen_k at most max_seqlen_q and max_seqlen_k: the grids cover that many query rows (forward, dQ)
//   and keys (the backward's key blocks), so a sequence longer than its promise is cut there, the same way in every
//   kernel of a call (the backward then agrees with the forward).
// So every row a kernel addresses is in [0, total), whatever the arrays hold; wrong (non-monotone, negative, huge)
// offsets give unspecified results -- sequences may overlap, outputs may race -- but no access outside the tensors and
// no hang (the backward's deterministic counters are per (sequence, head, query block), never shared through an
// offset). For a dense call: offsets 0 (batch strides address b), the call's lengths and diagonal.
struct SeqBounds {
  int32_t q_start, k_start;  // the sequence's first query row and first key (0 for a dense call)
  int32_t seqlen_q, seqlen_k;  // its queries and (used) keys
  int32_t k_slot;              // its key slot, >= seqlen_k: dk and dv rows [k_start + seqlen_k, k_start + k_slot) are 0
  int64_t diag_offset;         // query i sees the diagonal key i + diag_offset (bottom_right: seqlen_k - seqlen_q)
};

FLASH_VARLEN_HD inline int64_t clamp_to(int64_t x, int64_t lo, int64_t hi) { return x < lo ? lo : (x > hi ? hi : x); }

// A dense call's bounds (every batch entry the same).
FLASH_VARLEN_HD inline SeqBounds dense_bounds(const FwdParams& p) {
  SeqBounds s;
  s.q_start = s.k_start = 0;
  s.seqlen_q = p.seqlen_q, s.seqlen_k = s.k_slot = p.seqlen_k;
  s.diag_offset = p.diag_offset;
  return s;
}

FLASH_VARLEN_HD inline SeqBounds seq_bounds(const FwdParams& p, int64_t b) {
  if (!p.varlen) return dense_bounds(p);
  SeqBounds s;
  const int64_t q0 = clamp_to(p.cu_seqlens_q[b], 0, p.total_q), q1 = clamp_to(p.cu_seqlens_q[b + 1], q0, p.total_q);
  const int64_t k0 = clamp_to(p.cu_seqlens_k[b], 0, p.total_k), k1 = clamp_to(p.cu_seqlens_k[b + 1], k0, p.total_k);
  const int64_t slot = k1 - k0;
  const int64_t used = p.seqused_k != nullptr ? clamp_to(p.seqused_k[b], 0, slot) : slot;
  s.q_start = int32_t(q0), s.k_start = int32_t(k0);
  s.seqlen_q = int32_t(clamp_to(q1 - q0, 0, p.seqlen_q));
  s.seqlen_k = int32_t(clamp_to(used, 0, p.seqlen_k));
  s.k_slot = int32_t(slot);
  s.diag_offset = p.bottom_right ? int64_t{s.seqlen_k} - s.seqlen_q : 0;
  return s;
}

namespace varlen_detail {
template <class Ptr>
Ptr advance(Ptr base, int64_t elements, size_t elem_bytes) {
  if (base == nullptr) return base;
  using Byte = std::conditional_t<std::is_const_v<std::remove_pointer_t<Ptr>>, const char, char>;
  return reinterpret_cast<Ptr>(reinterpret_cast<Byte*>(base) + elements * static_cast<int64_t>(elem_bytes));
}
// The forward's part of a view: everything a FwdParams holds (BwdParams's own fields are done by the caller).
inline void view_common(const FwdParams& p, const SeqBounds& sb, FwdParams* v) {
  const int64_t q0 = sb.q_start, k0 = sb.k_start;
  const size_t e = dtype_size(p.dtype);
  v->q = advance(p.q, q0 * p.q_row_stride, e);
  v->o = advance(p.o, q0 * p.o_row_stride, e);
  v->k = advance(p.k, k0 * p.k_row_stride, e);
  v->v = advance(p.v, k0 * p.v_row_stride, e);
  v->lse = advance(p.lse, q0 * p.lse_row_stride, sizeof(float));
  v->batch = 1;
  v->seqlen_q = sb.seqlen_q;
  v->seqlen_k = sb.seqlen_k;
  v->diag_offset = sb.diag_offset;
  v->varlen = false;
  v->cu_seqlens_q = v->cu_seqlens_k = v->seqused_k = nullptr;
  v->total_q = v->total_k = 0;
}
}  // namespace varlen_detail

// The dense problem of sequence s of varlen call p: batch 1, seqlen_q/seqlen_k the sequence's own, its diagonal,
// the data pointers at its first query row and first key (batch index 0, so the batch strides are never used). The
// sequence is placed by seq_bounds() (for validated offsets exactly cu_seqlens_*[s] and the differences).
inline FwdParams sequence_view(const FwdParams& p, int64_t s) {
  FwdParams v = p;
  varlen_detail::view_common(p, seq_bounds(p, s), &v);
  return v;
}
inline BwdParams sequence_view(const BwdParams& p, int64_t s) {
  BwdParams v = p;
  const SeqBounds sb = seq_bounds(p, s);
  varlen_detail::view_common(p, sb, &v);
  const int64_t q0 = sb.q_start, k0 = sb.k_start;
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
  for (int64_t s = 0; s < p.batch; ++s) {
    const SeqBounds sb = seq_bounds(p, s);
    for (int64_t r = int64_t{sb.k_start} + sb.seqlen_k; r < int64_t{sb.k_start} + sb.k_slot; ++r)
      for (int64_t h = 0; h < p.heads_kv; ++h) {
        std::memset(varlen_detail::advance(p.dk, r * p.dk_row_stride + h * p.dk_head_stride, dtype_size(p.dtype)), 0,
                    row_bytes);
        std::memset(varlen_detail::advance(p.dv, r * p.dv_row_stride + h * p.dv_head_stride, dtype_size(p.dtype)), 0,
                    row_bytes);
      }
  }
}

}  // namespace flash
