// libflash/cpu/flash_cpu.cpp -- FlashAttention (Algorithm 1) on the host.
//
// One work item is one (batch, head, query block) -- the FlashAttention-2 loop order, which keeps the
// running statistics of a query block in registers/L1 for its whole life instead of writing them back
// per key block as Algorithm 1's outer-KV order does. Per query block Q_i (block_m rows):
//   for each key block K_j, V_j that the mask leaves visible:
//     S_ij = scale * Q_i K_j^T                       (fp32)
//     m_new = max(m_i, rowmax(S_ij))
//     P_ij  = exp(S_ij - m_new)
//     l_i   = exp(m_i - m_new) * l_i + rowsum(P_ij)
//     O_i   = exp(m_i - m_new) * O_i + P_ij V_j
//   O_i /= l_i;  LSE_i = m_i + log(l_i)
// Extra memory is O(block_m * (d + block_n)) per thread: the N x N matrix never exists.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "../../flash.h"
#include "../algorithm.h"
#include "../error.h"
#include "block_range.h"
#include "convert.h"
#include "parallel.h"

namespace flash {
namespace cpu {
namespace {

constexpr int kBlockM = 64;  // query rows per work item (unless a block mask dictates its own)
constexpr int kBlockN = 64;  // key rows per step: 64 x 256 fp32 K and V blocks fit in L2

struct Scratch {
  std::vector<float> q, k, v, s, o, m, l;
};

template <DType T>
void fwd_block(const FwdParams& p, int64_t b, int64_t h, int64_t q_begin, int64_t q_end, int block_n, int64_t q_block,
               Scratch& w) {
  using E = Elem<T>;
  using S = typename E::storage;
  const int d = p.head_dim;
  const int64_t rows = q_end - q_begin;
  const int64_t hk = h / p.head_ratio;  // GQA: query head h reads key/value head h / ratio
  const S* q = static_cast<const S*>(p.q);
  const S* k = static_cast<const S*>(p.k);
  const S* v = static_cast<const S*>(p.v);
  const float neg_inf = -std::numeric_limits<float>::infinity();

  w.q.resize(rows * d);
  w.k.resize(size_t(block_n) * d);
  w.v.resize(size_t(block_n) * d);
  w.s.resize(rows * block_n);
  w.o.assign(rows * d, 0.0f);
  w.m.assign(rows, neg_inf);
  w.l.assign(rows, 0.0f);

  // Load Q_i once, pre-multiplied by the softmax scale.
  for (int64_t r = 0; r < rows; ++r) {
    const S* src = q + b * p.q_batch_stride + (q_begin + r) * p.q_row_stride + h * p.q_head_stride;
    for (int c = 0; c < d; ++c) w.q[r * d + c] = E::load(src[c]) * p.scale;
  }

  KeyBlocks blocks(p, b, h, q_begin, q_end, q_block, block_n);
  for (int64_t kb; blocks.next(&kb);) {
    const int64_t k_begin = kb * block_n, k_end = std::min<int64_t>(k_begin + block_n, p.seqlen_k);
    const int64_t cols = k_end - k_begin;
    // Load K_j, V_j.
    for (int64_t c = 0; c < cols; ++c) {
      const S* ks = k + b * p.k_batch_stride + (k_begin + c) * p.k_row_stride + hk * p.k_head_stride;
      const S* vs = v + b * p.v_batch_stride + (k_begin + c) * p.v_row_stride + hk * p.v_head_stride;
      for (int e = 0; e < d; ++e) {
        w.k[c * d + e] = E::load(ks[e]);
        w.v[c * d + e] = E::load(vs[e]);
      }
    }
    const bool needs_element_mask = blocks.partial(kb);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t i = q_begin + r;
      float* s = &w.s[r * block_n];
      // S_ij row r, masked entries -inf.
      float row_max = neg_inf;
      for (int64_t c = 0; c < cols; ++c) {
        if (needs_element_mask && !window_visible(p, i, k_begin + c)) {
          s[c] = neg_inf;
          continue;
        }
        const float* qr = &w.q[r * d];
        const float* kr = &w.k[c * d];
        float acc = 0.0f;
        for (int e = 0; e < d; ++e) acc += qr[e] * kr[e];
        s[c] = acc;
        row_max = std::max(row_max, acc);
      }
      if (row_max == neg_inf) continue;  // nothing visible in this block for this row
      // Online softmax: rescale what we had, add this block.
      const float m_new = std::max(w.m[r], row_max);
      const float correction = std::exp(w.m[r] - m_new);  // exp(-inf) = 0 on the first visible block
      float row_sum = 0.0f;
      for (int64_t c = 0; c < cols; ++c) {
        s[c] = std::exp(s[c] - m_new);  // exp(-inf) = 0 for masked entries
        row_sum += s[c];
      }
      w.l[r] = w.l[r] * correction + row_sum;
      w.m[r] = m_new;
      float* o = &w.o[r * d];
      for (int e = 0; e < d; ++e) o[e] *= correction;
      for (int64_t c = 0; c < cols; ++c) {
        const float pc = s[c];
        if (pc == 0.0f) continue;
        const float* vr = &w.v[c * d];
        for (int e = 0; e < d; ++e) o[e] += pc * vr[e];
      }
    }
  }

  // Finalise: O = O / l (0 for rows that saw no key), LSE = m + log(l) (-inf for those rows).
  S* out = static_cast<S*>(p.o);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t i = q_begin + r;
    const float inv_l = w.l[r] > 0.0f ? 1.0f / w.l[r] : 0.0f;
    S* dst = out + b * p.o_batch_stride + i * p.o_row_stride + h * p.o_head_stride;
    for (int e = 0; e < d; ++e) dst[e] = E::store(w.o[r * d + e] * inv_l);
    if (p.lse)
      p.lse[b * p.lse_batch_stride + h * p.lse_head_stride + i * p.lse_row_stride] =
          w.l[r] > 0.0f ? w.m[r] + std::log(w.l[r]) : neg_inf;
  }
}

template <DType T>
int32_t fwd_typed(const FwdParams& p) {
  const int block_m = p.has_block_mask ? p.block_mask.block_m : kBlockM;
  const int block_n = p.has_block_mask ? p.block_mask.block_n : kBlockN;
  const int64_t q_blocks = (p.seqlen_q + block_m - 1) / block_m;
  const int64_t items = int64_t{p.batch} * p.heads_q * q_blocks;
  std::vector<Scratch> scratch(static_cast<size_t>(std::min<int64_t>(num_threads(), items)));
  parallel_for(items, [&](int64_t item, int t) {
    const int64_t qb = item % q_blocks, bh = item / q_blocks;
    const int64_t h = bh % p.heads_q, b = bh / p.heads_q;
    const int64_t q_begin = qb * block_m, q_end = std::min<int64_t>(q_begin + block_m, p.seqlen_q);
    fwd_block<T>(p, b, h, q_begin, q_end, block_n, qb, scratch[t]);
  });
  return FLASH_OK;
}

int32_t fwd(const FwdParams& p) {
  switch (p.dtype) {
    case DType::FP32: return fwd_typed<DType::FP32>(p);
    case DType::FP16: return fwd_typed<DType::FP16>(p);
    case DType::BF16: return fwd_typed<DType::BF16>(p);
  }
  return fail(FLASH_ERROR_INTERNAL, "cpu: unknown dtype");
}

bool available(int32_t, std::string*) { return true; }
bool supports(const FwdParams&, std::string*) { return true; }
size_t workspace(const FwdParams&) { return 0; }

}  // namespace
}  // namespace cpu

extern const Algorithm kCpuFlash = {FLASH_ALGO_CPU, "cpu", FLASH_DEVICE_CPU, cpu::available, cpu::supports, cpu::workspace,
                                    cpu::fwd};

}  // namespace flash
