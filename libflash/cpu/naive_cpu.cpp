// libflash/cpu/naive_cpu.cpp -- standard attention on the host, materialising S and P (the baseline).
//
// For each (batch, head): S = scale * Q K^T written out in full (seqlen_q x seqlen_k fp32, in the
// workspace), masked, softmax row by row into P in place, then O = P V. This is what the FlashAttention
// paper compares against; its O(N^2) memory is the point.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "../../flash.h"
#include "../algorithm.h"
#include "../error.h"
#include "convert.h"
#include "parallel.h"

namespace flash {
namespace cpu {
namespace {

int64_t slots(const FwdParams& p) { return std::min<int64_t>(num_threads(), int64_t{p.batch} * p.heads_q); }
size_t matrix_bytes(const FwdParams& p) { return size_t(p.seqlen_q) * size_t(p.seqlen_k) * sizeof(float); }

// Block-mask membership, element-wise (the naive algorithm has no notion of skipping).
bool block_listed(const FwdParams& p, int64_t b, int64_t h, int64_t i, int64_t j) {
  if (!p.has_block_mask) return true;
  const BlockMaskParams& m = p.block_mask;
  const int64_t qb = i / m.block_m, kb = j / m.block_n;
  const int32_t n = m.kv_num_blocks[b * m.num_batch_stride + h * m.num_head_stride + qb * m.num_qblock_stride];
  const int32_t* list = m.kv_indices + b * m.idx_batch_stride + h * m.idx_head_stride + qb * m.idx_qblock_stride;
  for (int32_t t = 0; t < n; ++t)
    if (list[t * m.idx_stride] == kb) return true;
  return false;
}

template <DType T>
int32_t fwd_typed(const FwdParams& p) {
  using E = Elem<T>;
  using S = typename E::storage;
  const int d = p.head_dim;
  const int64_t sq = p.seqlen_q, sk = p.seqlen_k;
  const float neg_inf = -std::numeric_limits<float>::infinity();
  float* matrices = static_cast<float*>(p.workspace);
  parallel_for(int64_t{p.batch} * p.heads_q, [&](int64_t bh, int t) {
    const int64_t b = bh / p.heads_q, h = bh % p.heads_q, hk = h / p.head_ratio;
    float* P = matrices + t * sq * sk;
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
      const float mx = *std::max_element(row, row + sk);
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
  switch (p.dtype) {
    case DType::FP32: return fwd_typed<DType::FP32>(p);
    case DType::FP16: return fwd_typed<DType::FP16>(p);
    case DType::BF16: return fwd_typed<DType::BF16>(p);
  }
  return fail(FLASH_ERROR_INTERNAL, "naive: unknown dtype");
}

bool available(int32_t, std::string*) { return true; }
bool supports(const FwdParams&, std::string*) { return true; }
size_t workspace(const FwdParams& p) { return matrix_bytes(p) * size_t(slots(p)); }

}  // namespace
}  // namespace cpu

extern const Algorithm kCpuNaive = {FLASH_ALGO_NAIVE, "naive", FLASH_DEVICE_CPU, cpu::available, cpu::supports,
                                    cpu::workspace, cpu::fwd};

}  // namespace flash
