// libflash/cpu/naive_cpu.cpp -- standard attention on the host, materialising S and P (the baseline).
//
// For each (batch, head): S = scale * Q K^T written out in full (seqlen_q x seqlen_k fp32, in the
// workspace), masked, softmax row by row into P in place, then O = P V. This is what the FlashAttention
// paper compares against; its O(N^2) memory is the point. Its backward (below) materialises P, dP, dS.
// A packed variable-length batch runs sequence by sequence (libflash/varlen.h), each in a slot sized for
// max_seqlen_q x max_seqlen_k.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>
#include <vector>

#include "../../flash.h"
#include "../algorithm.h"
#include "../error.h"
#include "../varlen.h"
#include "convert.h"
#include "parallel.h"

namespace flash {
namespace cpu {
namespace {

int64_t slots(const FwdParams& p) { return std::min<int64_t>(num_threads(), int64_t{p.batch} * p.heads_q); }
// a * b * ..., or SIZE_MAX when the product overflows: the workspace allocation then fails cleanly with
// FLASH_ERROR_OUT_OF_MEMORY instead of a wrapped-around (too small) size.
size_t product_or_max(std::initializer_list<size_t> factors) {
  size_t r = 1;
  for (size_t f : factors)
    if (__builtin_mul_overflow(r, f, &r)) return SIZE_MAX;
  return r;
}
size_t matrix_bytes(const FwdParams& p) { return product_or_max({size_t(p.seqlen_q), size_t(p.seqlen_k), sizeof(float)}); }

// Block-mask membership, element-wise (the naive algorithm has no notion of skipping).
bool block_listed(const FwdParams& p, int64_t b, int64_t h, int64_t i, int64_t j) {
  if (!p.has_block_mask) return true;
  const BlockMaskParams& m = p.block_mask;
  if (m.max_kv_blocks == 0) return false;  // an empty mask lists nothing (and its kv_indices may be NULL: not offset)
  const int64_t qb = i / m.block_m, kb = j / m.block_n;
  const int32_t n = m.kv_num_blocks[b * m.num_batch_stride + h * m.num_head_stride + qb * m.num_qblock_stride];
  const int32_t* list = m.kv_indices + b * m.idx_batch_stride + h * m.idx_head_stride + qb * m.idx_qblock_stride;
  for (int32_t t = 0; t < n; ++t)
    if (list[t * m.idx_stride] == kb) return true;
  return false;
}

// The dense problem of work item x of a call over (batch, head) pairs (`heads` per batch entry): the call itself at
// batch x / heads, or (varlen) the view of sequence x / heads at batch 0 (libflash/varlen.h). Sets *b.
template <class Params>
const Params& item_problem(const Params& whole, const std::vector<Params>& parts, int64_t x, int64_t heads, int64_t* b) {
  *b = whole.varlen ? 0 : x / heads;
  return whole.varlen ? parts[static_cast<size_t>(x / heads)] : whole;
}

template <DType T>
int32_t fwd_typed(const FwdParams& whole) {
  using E = Elem<T>;
  using S = typename E::storage;
  const int d = whole.head_dim;
  const float neg_inf = -std::numeric_limits<float>::infinity();
  float* matrices = static_cast<float*>(whole.workspace);
  // Each thread's slot holds the largest S (varlen: max_seqlen_q x max_seqlen_k); a sequence uses its own part of it.
  const int64_t slot_floats = int64_t{whole.seqlen_q} * whole.seqlen_k;
  const std::vector<FwdParams> parts = whole.varlen ? dense_parts(whole) : std::vector<FwdParams>();
  parallel_for(int64_t{whole.batch} * whole.heads_q, [&](int64_t bh, int t) {
    int64_t b = 0;
    const FwdParams& p = item_problem(whole, parts, bh, whole.heads_q, &b);
    const int64_t sq = p.seqlen_q, sk = p.seqlen_k;
    const int64_t h = bh % p.heads_q, hk = h / p.head_ratio;
    float* P = matrices + t * slot_floats;
    const S* q = static_cast<const S*>(p.q) + b * p.q_batch_stride + h * p.q_head_stride;
    const S* k = static_cast<const S*>(p.k) + b * p.k_batch_stride + hk * p.k_head_stride;
    const S* v = static_cast<const S*>(p.v) + b * p.v_batch_stride + hk * p.v_head_stride;
    // S = scale * Q K^T, masked.
    for (int64_t i = 0; i < sq; ++i)
      for (int64_t j = 0; j < sk; ++j) {
        float acc = 0.0f;
        for (int e = 0; e < d; ++e) acc += E::load(q[i * p.q_row_stride + e]) * E::load(k[j * p.k_row_stride + e]);
        P[i * sk + j] = window_visible(p, i, j) && block_listed(p, b, h, i, j) ? acc * p.scale : neg_inf;
      }
    // P = softmax(S) row by row, in place.
    for (int64_t i = 0; i < sq; ++i) {
      float* row = P + i * sk;
      const float mx = sk > 0 ? *std::max_element(row, row + sk) : neg_inf;  // (a varlen sequence may have no keys)
      // The row sum runs over up to seqlen_k terms: accumulate it in double so the baseline's error is
      // that of its stored fp32 matrices, not of a long sequential float sum.
      double sum = 0.0;
      for (int64_t j = 0; j < sk; ++j) sum += (row[j] = mx == neg_inf ? 0.0f : std::exp(row[j] - mx));
      const float inv = sum > 0.0 ? static_cast<float>(1.0 / sum) : 0.0f;
      for (int64_t j = 0; j < sk; ++j) row[j] *= inv;
      if (p.lse)
        p.lse[b * p.lse_batch_stride + h * p.lse_head_stride + i * p.lse_row_stride] =
            sum > 0.0 ? static_cast<float>(mx + std::log(sum)) : neg_inf;
    }
    // O = P V.
    std::vector<float> acc(d);
    S* o = static_cast<S*>(p.o) + b * p.o_batch_stride + h * p.o_head_stride;
    for (int64_t i = 0; i < sq; ++i) {
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t j = 0; j < sk; ++j) {
        const float pij = P[i * sk + j];
        if (pij == 0.0f) continue;
        for (int e = 0; e < d; ++e) acc[e] += pij * E::load(v[j * p.v_row_stride + e]);
      }
      for (int e = 0; e < d; ++e) o[i * p.o_row_stride + e] = E::store(acc[e]);
    }
  });
  return FLASH_OK;
}

int32_t fwd(const FwdParams& p) {
  return with_dtype(p.dtype, [&](auto t) { return fwd_typed<decltype(t)::value>(p); });
}

// ---- Backward: standard attention's backward, every N x N matrix materialised -------------------------
//
// One work item per (batch, kv head), so the GQA group's dK and dV sums stay in one thread (no races,
// deterministic). For each query head h of the group, in fp32:
//   P  = exp((scale * Q) K^T - LSE)    [sq x sk]   (the forward's P, recomputed from its LSE; Q scaled
//                                                   first, as the cpu forward does, so S matches its bits)
//   dP = dO V^T                        [sq x sk]
//   D  = rowsum(P o dP)                            (the softmax backward as frameworks write it)
//   dS = P o (dP - D)                  (in place of dP)
//   dQ = scale * dS K,  dK += scale * dS^T Q,  dV += P^T dO
// Workspace per thread slot: P, dP (2 * sq * sk fp32) and the fp32 dK, dV sums (2 * sk * d).

size_t bwd_slot_floats(const BwdParams& p) {
  return 2 * size_t(p.seqlen_q) * size_t(p.seqlen_k) + 2 * size_t(p.seqlen_k) * size_t(p.head_dim);
}
int64_t bwd_slots(const BwdParams& p) { return std::min<int64_t>(num_threads(), int64_t{p.batch} * p.heads_kv); }

template <DType T>
int32_t bwd_typed(const BwdParams& whole) {
  using E = Elem<T>;
  using St = typename E::storage;
  const int d = whole.head_dim;
  const float neg_inf = -std::numeric_limits<float>::infinity();
  float* slots = static_cast<float*>(whole.workspace);
  const size_t slot_floats = bwd_slot_floats(whole);  // the largest problem's (varlen: at the max lengths)
  const std::vector<BwdParams> parts = whole.varlen ? dense_parts(whole) : std::vector<BwdParams>();
  parallel_for(int64_t{whole.batch} * whole.heads_kv, [&](int64_t bhk, int t) {
    int64_t b = 0;
    const BwdParams& p = item_problem(whole, parts, bhk, whole.heads_kv, &b);
    const int64_t sq = p.seqlen_q, sk = p.seqlen_k;
    const int64_t hk = bhk % p.heads_kv;
    float* P = slots + t * slot_floats;
    float* dS = P + sq * sk;
    float* dk_acc = dS + sq * sk;
    float* dv_acc = dk_acc + sk * d;
    std::fill(dk_acc, dk_acc + 2 * sk * d, 0.0f);
    const St* k = static_cast<const St*>(p.k) + b * p.k_batch_stride + hk * p.k_head_stride;
    const St* v = static_cast<const St*>(p.v) + b * p.v_batch_stride + hk * p.v_head_stride;
    std::vector<float> row(d);
    for (int64_t h = hk * p.head_ratio; h < (hk + 1) * p.head_ratio; ++h) {
      const St* q = static_cast<const St*>(p.q) + b * p.q_batch_stride + h * p.q_head_stride;
      const St* dO = static_cast<const St*>(p.d_o) + b * p.do_batch_stride + h * p.do_head_stride;
      const float* lse = p.lse + b * p.lse_batch_stride + h * p.lse_head_stride;
      // P and dP.
      for (int64_t i = 0; i < sq; ++i) {
        const float l = lse[i * p.lse_row_stride];
        for (int64_t j = 0; j < sk; ++j) {
          float s = 0.0f, dp = 0.0f;
          for (int e = 0; e < d; ++e) {
            s += E::load(q[i * p.q_row_stride + e]) * p.scale * E::load(k[j * p.k_row_stride + e]);
            dp += E::load(dO[i * p.do_row_stride + e]) * E::load(v[j * p.v_row_stride + e]);
          }
          const bool visible = l != neg_inf && window_visible(p, i, j) && block_listed(p, b, h, i, j);
          P[i * sk + j] = visible ? std::exp(s - l) : 0.0f;
          dS[i * sk + j] = dp;
        }
      }
      // dS = P o (dP - rowsum(P o dP)); the row sum in double, as the forward's softmax sum.
      for (int64_t i = 0; i < sq; ++i) {
        double D = 0.0;
        for (int64_t j = 0; j < sk; ++j) D += double(P[i * sk + j]) * dS[i * sk + j];
        for (int64_t j = 0; j < sk; ++j) dS[i * sk + j] = P[i * sk + j] * (dS[i * sk + j] - static_cast<float>(D));
      }
      // dQ = scale * dS K (this head's own rows).
      St* dq = static_cast<St*>(p.dq) + b * p.dq_batch_stride + h * p.dq_head_stride;
      for (int64_t i = 0; i < sq; ++i) {
        std::fill(row.begin(), row.end(), 0.0f);
        for (int64_t j = 0; j < sk; ++j) {
          const float x = dS[i * sk + j];
          if (x == 0.0f) continue;
          for (int e = 0; e < d; ++e) row[e] += x * E::load(k[j * p.k_row_stride + e]);
        }
        for (int e = 0; e < d; ++e) dq[i * p.dq_row_stride + e] = E::store(row[e] * p.scale);
      }
      // dK += dS^T Q, dV += P^T dO (summed over the group's heads).
      for (int64_t i = 0; i < sq; ++i)
        for (int64_t j = 0; j < sk; ++j) {
          const float x = dS[i * sk + j], pij = P[i * sk + j];
          if (x == 0.0f && pij == 0.0f) continue;
          for (int e = 0; e < d; ++e) {
            dk_acc[j * d + e] += x * E::load(q[i * p.q_row_stride + e]);
            dv_acc[j * d + e] += pij * E::load(dO[i * p.do_row_stride + e]);
          }
        }
    }
    St* dk = static_cast<St*>(p.dk) + b * p.dk_batch_stride + hk * p.dk_head_stride;
    St* dv = static_cast<St*>(p.dv) + b * p.dv_batch_stride + hk * p.dv_head_stride;
    for (int64_t j = 0; j < sk; ++j)
      for (int e = 0; e < d; ++e) {
        dk[j * p.dk_row_stride + e] = E::store(dk_acc[j * d + e] * p.scale);
        dv[j * p.dv_row_stride + e] = E::store(dv_acc[j * d + e]);
      }
  });
  zero_unused_key_rows(whole);  // varlen with seqused_k: dk = dv = 0 past each sequence's used keys
  return FLASH_OK;
}

int32_t bwd(const BwdParams& p) {
  return with_dtype(p.dtype, [&](auto t) { return bwd_typed<decltype(t)::value>(p); });
}

size_t bwd_workspace(const BwdParams& p) { return product_or_max({bwd_slot_floats(p), sizeof(float), size_t(bwd_slots(p))}); }

bool available(int32_t, std::string*) { return true; }
bool supports(const FwdParams&, std::string*) { return true; }
size_t workspace(const FwdParams& p) { return product_or_max({matrix_bytes(p), size_t(slots(p))}); }

}  // namespace
}  // namespace cpu

extern const Algorithm kCpuNaive = {FLASH_ALGO_NAIVE, "naive",        FLASH_DEVICE_CPU, cpu::available,
                                    cpu::supports,    cpu::workspace, cpu::fwd,         /*supports_bwd=*/nullptr,
                                    cpu::bwd_workspace, cpu::bwd};

}  // namespace flash
