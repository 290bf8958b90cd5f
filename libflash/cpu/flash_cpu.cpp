// libflash/cpu/flash_cpu.cpp -- FlashAttention (Algorithm 1) on the host.
//
// One work item is one (batch, head, query block) -- the FlashAttention-2 loop order, which keeps the
// running statistics of a query block in registers/L1 for its whole life instead of writing them back
// per key block as Algorithm 1's outer-KV order does. Per query block Q_i (block_m rows):
//   for each key block K_j, V_j that the mask leaves visible:
//     S_ij = scale * Q_i K_j^T                       (fp32; fp64 for fp32 inputs, see Acc)
//     m_new = max(m_i, rowmax(S_ij))
//     P_ij  = exp(S_ij - m_new)
//     l_i   = exp(m_i - m_new) * l_i + rowsum(P_ij)
//     O_i   = exp(m_i - m_new) * O_i + P_ij V_j
//   O_i /= l_i;  LSE_i = m_i + log(l_i)
// Extra memory is O(block_m * (d + block_n)) per thread: the N x N matrix never exists.
// A packed variable-length batch (flash.h; libflash/varlen.h) runs as the list of its sequences' dense problems of
// batch 1 (each with its own lengths and diagonal), their work items numbered one after another and shared out
// together: the same per-block step, at per-sequence offsets.
// The backward (further down) is FlashAttention's: per key block, P recomputed from the saved LSE.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <new>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "../../flash.h"
#include "../algorithm.h"
#include "../error.h"
#include "../varlen.h"
#include "block_range.h"
#include "convert.h"
#include "parallel.h"

namespace flash {
namespace cpu {
namespace {

constexpr int kBlockM = 64;  // query rows per work item (unless a block mask dictates its own)
constexpr int kBlockN = 64;  // key rows per step: 64 x 256 fp32 K and V blocks fit in L2

// The arithmetic type of S, the softmax and O: fp32 for fp16/bf16 inputs; double for fp32 ones. In fp32 the fused
// algorithm's extra roundings (O and l rescaled at every new row max, P taken against a running max) put its error
// at the size of naive fp32 attention's own, and past twice it on ~1 random case in 300 (max |o - ref|
// 8.1e-7 against naive's 3.5e-7); computed in double, fp32 output is rounded once, as the project's accuracy rule
// wants of every backend. The cost is the fp32 path's vector width: fa-bench on 2 cores, b 1, h 4, 1k, d 64, fp32:
// forward 60 -> 99 ms, fwd_bwd 149 -> 290 ms. (16-bit inputs keep fp32: their output rounding, 2^-8 or
// 2^-11, dwarfs the arithmetic's; bf16 measured the same before and after.)
template <DType T>
using Acc = std::conditional_t<T == DType::FP32, double, float>;

template <class A>
struct Scratch {
  std::vector<A> q, kt, v, s, o, m, l;
};

template <DType T>
void fwd_block(const FwdParams& p, int64_t b, int64_t h, int64_t q_begin, int64_t q_end, int block_n, int64_t q_block,
               Scratch<Acc<T>>& w) {
  using E = Elem<T>;
  using S = typename E::storage;
  using A = Acc<T>;
  const int d = p.head_dim;
  const int64_t rows = q_end - q_begin;
  const int64_t hk = h / p.head_ratio;  // GQA: query head h reads key/value head h / ratio
  const S* q = static_cast<const S*>(p.q);
  const S* k = static_cast<const S*>(p.k);
  const S* v = static_cast<const S*>(p.v);
  const A neg_inf = -std::numeric_limits<A>::infinity();

  w.q.resize(rows * d);
  w.kt.assign(size_t(d) * block_n, A(0));
  w.v.resize(size_t(block_n) * d);
  w.s.resize(rows * block_n);
  w.o.assign(rows * d, A(0));
  w.m.assign(rows, neg_inf);
  w.l.assign(rows, A(0));

  // Load Q_i once, pre-multiplied by the softmax scale.
  for (int64_t r = 0; r < rows; ++r) {
    const S* src = q + b * p.q_batch_stride + (q_begin + r) * p.q_row_stride + h * p.q_head_stride;
    for (int c = 0; c < d; ++c) w.q[r * d + c] = A(E::load(src[c])) * A(p.scale);
  }

  KeyBlocks blocks(p, b, h, q_begin, q_end, q_block, block_n);
  for (int64_t kb; blocks.next(&kb);) {
    const int64_t k_begin = kb * block_n, k_end = std::min<int64_t>(k_begin + block_n, p.seqlen_k);
    const int64_t cols = k_end - k_begin;
    // Load K_j transposed (K_j^T: the S loop below then runs over contiguous keys and vectorises; each
    // S_ij is still summed over e in order, bit for bit what the backward recomputes) and V_j.
    for (int64_t c = 0; c < cols; ++c) {
      const S* ks = k + b * p.k_batch_stride + (k_begin + c) * p.k_row_stride + hk * p.k_head_stride;
      const S* vs = v + b * p.v_batch_stride + (k_begin + c) * p.v_row_stride + hk * p.v_head_stride;
      for (int e = 0; e < d; ++e) {
        w.kt[e * block_n + c] = E::load(ks[e]);
        w.v[c * d + e] = E::load(vs[e]);
      }
    }
    const bool needs_element_mask = blocks.partial(kb);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t i = q_begin + r;
      A* s = &w.s[r * block_n];
      // S_ij row r = (scale Q_i) K_j^T, masked entries -inf.
      std::fill(s, s + cols, A(0));
      const A* qr = &w.q[r * d];
      for (int e = 0; e < d; ++e) {
        const A x = qr[e];
        const A* kt = &w.kt[e * block_n];
        for (int64_t c = 0; c < cols; ++c) s[c] += x * kt[c];
      }
      A row_max = neg_inf;
      for (int64_t c = 0; c < cols; ++c) {
        if (needs_element_mask && !window_visible(p, i, k_begin + c)) s[c] = neg_inf;
        row_max = std::max(row_max, s[c]);
      }
      if (row_max == neg_inf) continue;  // nothing visible in this block for this row
      // Online softmax: rescale what we had, add this block.
      const A m_new = std::max(w.m[r], row_max);
      const A correction = std::exp(w.m[r] - m_new);  // exp(-inf) = 0 on the first visible block
      A row_sum = 0;
      for (int64_t c = 0; c < cols; ++c) {
        s[c] = std::exp(s[c] - m_new);  // exp(-inf) = 0 for masked entries
        row_sum += s[c];
      }
      w.l[r] = w.l[r] * correction + row_sum;
      w.m[r] = m_new;
      A* o = &w.o[r * d];
      for (int e = 0; e < d; ++e) o[e] *= correction;
      for (int64_t c = 0; c < cols; ++c) {
        const A pc = s[c];
        if (pc == 0) continue;
        const A* vr = &w.v[c * d];
        for (int e = 0; e < d; ++e) o[e] += pc * vr[e];
      }
    }
  }

  // Finalise: O = O / l (0 for rows that saw no key), LSE = m + log(l) (-inf for those rows).
  S* out = static_cast<S*>(p.o);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t i = q_begin + r;
    const A inv_l = w.l[r] > 0 ? 1 / w.l[r] : A(0);
    S* dst = out + b * p.o_batch_stride + i * p.o_row_stride + h * p.o_head_stride;
    for (int e = 0; e < d; ++e) dst[e] = E::store(float(w.o[r * d + e] * inv_l));
    if (p.lse)
      p.lse[b * p.lse_batch_stride + h * p.lse_head_stride + i * p.lse_row_stride] =
          w.l[r] > 0 ? float(w.m[r] + std::log(w.l[r])) : -std::numeric_limits<float>::infinity();
  }
}

// A varlen call (libflash/varlen.h) is the list of its sequences' dense problems of batch 1; a dense call is a list
// of one. Work items are numbered across the list: item x belongs to the part whose range [first[i], first[i+1])
// holds it.
std::vector<int64_t> part_ranges(const std::vector<int64_t>& items_per_part) {
  std::vector<int64_t> first(items_per_part.size() + 1, 0);
  for (size_t i = 0; i < items_per_part.size(); ++i) first[i + 1] = first[i] + items_per_part[i];
  return first;
}
size_t part_of(const std::vector<int64_t>& first, int64_t item) {
  return static_cast<size_t>(std::upper_bound(first.begin(), first.end(), item) - first.begin() - 1);
}

template <DType T>
int32_t fwd_typed(const FwdParams& whole) {
  const int block_m = whole.has_block_mask ? whole.block_mask.block_m : kBlockM;
  const int block_n = whole.has_block_mask ? whole.block_mask.block_n : kBlockN;
  // One work item per (part, batch, head, query block).
  const std::vector<FwdParams> parts = dense_parts(whole);
  std::vector<int64_t> counts;
  for (const FwdParams& p : parts) counts.push_back(int64_t{p.batch} * p.heads_q * ((p.seqlen_q + block_m - 1) / block_m));
  const std::vector<int64_t> first = part_ranges(counts);
  const int64_t items = first.back();
  std::vector<Scratch<Acc<T>>> scratch(static_cast<size_t>(std::min<int64_t>(num_threads(), std::max<int64_t>(items, 1))));
  parallel_for(items, [&](int64_t global, int t) {
    const size_t part = part_of(first, global);
    const FwdParams& p = parts[part];
    const int64_t item = global - first[part];
    const int64_t q_blocks = (p.seqlen_q + block_m - 1) / block_m;
    const int64_t qb = item % q_blocks, bh = item / q_blocks;
    const int64_t h = bh % p.heads_q, b = bh / p.heads_q;
    const int64_t q_begin = qb * block_m, q_end = std::min<int64_t>(q_begin + block_m, p.seqlen_q);
    fwd_block<T>(p, b, h, q_begin, q_end, block_n, qb, scratch[t]);
  });
  return FLASH_OK;
}

int32_t fwd(const FwdParams& p) {
  return with_dtype(p.dtype, [&](auto t) { return fwd_typed<decltype(t)::value>(p); });
}

// ---- Backward ---------------------------------------------------------------------------------------
//
// FlashAttention's backward (the paper's Algorithm 4, FlashAttention-2's loop order): nothing N x N is
// stored; P is recomputed tile by tile from Q, K and the forward's LSE.
//   1. Preprocess: D_i = rowsum(dO_i o O_i) (summed in double, stored fp32), dQacc = 0.
//   2. One work item per (batch, kv head, key block j); K_j, V_j and dK_j, dV_j (in Acc) stay in the item's
//      scratch for its whole life, so dK and dV need no atomics. For every query block i that sees key
//      block j, and every query head h of the kv head's GQA group:
//        S  = (scale * Q_i) K_j^T,  P = exp(S - LSE_i)  (0 where masked, 0 for a row with LSE = -inf;
//                                                         S bit for bit the cpu forward's: same scaling,
//                                                         same summation order, so P matches its LSE)
//        dV_j += P^T dO_i
//        dP = dO_i V_j^T,  dS = P o (dP - D_i)
//        dK_j += dS^T (scale * Q_i)
//        dQacc_i += dS K_j                                (times scale at the end)
//   3. dQ = scale * dQacc, rounded to the dtype.
// dQ is the one reduction across work items. Key blocks add into a query block's rows strictly in key
// block order 0, 1, 2, ...: a per-(batch, kv head, query block) counter says which key block's turn it
// is (each item waits for its turn, adds its tile, passes the turn on, visiting query blocks in order).
// Items are handed out in increasing key block order, so the lowest unfinished item never waits and the
// scheme cannot deadlock; items are ordered key block major, so threads mostly work on different heads
// (with fewer heads than threads, consecutive key blocks of a head run as a wavefront). The sum is therefore
// the same sequence of fp32 additions whatever the thread count: the cpu backward is always bitwise
// deterministic (FLASH_FLAG_DETERMINISTIC costs nothing here).
//
// Workspace (exactly bwd_workspace()): fp32 dQacc [b, hq, sq, d], fp32 D [b, hq, sq], int32 turn
// counters [b, hkv, ceil(sq / block_m)]: 4 * (b*hq*sq*(d + 1) + b*hkv*ceil(sq/block_m)) bytes, O(N). A varlen call
// has the sum of its sequences' (each with b = 1, sq = its own length: 4 * (hq*total_q*(d + 1) + hkv*sum of
// ceil(sq_i/block_m)) bytes at most, when its sequences cover q), each step's items numbered across the sequences.
// Per thread: O((block_m + block_n) * d + block_m * block_n) scratch in Acc (plus block_m * d per GQA
// head for the dQ tiles waiting for their turn).

static_assert(sizeof(std::atomic<int32_t>) == 4, "the documented workspace size counts 4-byte counters");

struct BwdLayout {
  int block_m, block_n;
  int64_t q_blocks, k_blocks;
  size_t dq_elems, d_elems, counters;
};

BwdLayout bwd_layout(const BwdParams& p) {
  BwdLayout l;
  l.block_m = p.has_block_mask ? p.block_mask.block_m : kBlockM;
  l.block_n = p.has_block_mask ? p.block_mask.block_n : kBlockN;
  l.q_blocks = (p.seqlen_q + l.block_m - 1) / l.block_m;
  l.k_blocks = (p.seqlen_k + l.block_n - 1) / l.block_n;
  l.dq_elems = size_t(p.batch) * p.heads_q * p.seqlen_q * p.head_dim;
  l.d_elems = size_t(p.batch) * p.heads_q * p.seqlen_q;
  l.counters = size_t(p.batch) * p.heads_kv * l.q_blocks;
  return l;
}

template <class A>
struct BwdScratch {
  std::vector<A> k, v, kt, vt, dk, dv, q, d_o, p, dp, lse, D, dq;
  std::vector<char> head_done;  // per GQA head: a dQ tile waits in dq
};

// In the forward's arithmetic type (Acc: double for fp32 inputs), so S is recomputed bit for bit.
template <DType T>
void bwd_item(const BwdParams& p, const BwdLayout& l, int64_t b, int64_t hk, int64_t kb, float* dq_acc, const float* D,
              std::atomic<int32_t>* turns, BwdScratch<Acc<T>>& w) {
  using E = Elem<T>;
  using St = typename E::storage;
  using A = Acc<T>;
  const int d = p.head_dim, bm = l.block_m, bn = l.block_n;
  const int64_t k_begin = kb * bn, k_end = std::min<int64_t>(k_begin + bn, p.seqlen_k);
  const int64_t cols = k_end - k_begin;
  const int ratio = p.head_ratio;
  const A scale = p.scale;
  const A neg_inf = -std::numeric_limits<A>::infinity();
  const St* k = static_cast<const St*>(p.k);
  const St* v = static_cast<const St*>(p.v);
  const St* q = static_cast<const St*>(p.q);
  const St* dO = static_cast<const St*>(p.d_o);

  w.k.assign(size_t(bn) * d, A(0));
  w.v.assign(size_t(bn) * d, A(0));
  w.kt.assign(size_t(d) * bn, A(0));  // K_j^T, V_j^T: the inner loops then run over contiguous keys
  w.vt.assign(size_t(d) * bn, A(0));
  w.dk.assign(size_t(bn) * d, A(0));
  w.dv.assign(size_t(bn) * d, A(0));
  w.q.resize(size_t(bm) * d);
  w.d_o.resize(size_t(bm) * d);
  w.p.resize(size_t(bm) * bn);
  w.dp.resize(size_t(bm) * bn);
  w.lse.resize(bm);
  w.D.resize(bm);
  w.dq.resize(size_t(ratio) * bm * d);
  for (int64_t c = 0; c < cols; ++c) {
    const St* ks = k + b * p.k_batch_stride + (k_begin + c) * p.k_row_stride + hk * p.k_head_stride;
    const St* vs = v + b * p.v_batch_stride + (k_begin + c) * p.v_row_stride + hk * p.v_head_stride;
    for (int e = 0; e < d; ++e) {
      w.k[c * d + e] = w.kt[e * bn + c] = E::load(ks[e]);
      w.v[c * d + e] = w.vt[e * bn + c] = E::load(vs[e]);
    }
  }

  for (int64_t qb = 0; qb < l.q_blocks; ++qb) {
    const int64_t q_begin = qb * bm, q_end = std::min<int64_t>(q_begin + bm, p.seqlen_q);
    const int64_t rows = q_end - q_begin;
    const bool in_window = tile_in_window(p, q_begin, q_end, k_begin, k_end);
    const bool partial = in_window && tile_partial(p, q_begin, q_end, k_begin, k_end);
    bool any = false;                       // some head of the group computed a dQ tile for this block
    std::vector<char>& head_done = w.head_done;
    head_done.assign(ratio, 0);
    for (int g = 0; in_window && g < ratio; ++g) {
      const int64_t h = hk * ratio + g;
      if (!block_listed(p, b, h, qb, kb)) continue;
      // Q_i, dO_i, LSE_i, D_i.
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t i = q_begin + r;
        const St* qs = q + b * p.q_batch_stride + i * p.q_row_stride + h * p.q_head_stride;
        const St* ds = dO + b * p.do_batch_stride + i * p.do_row_stride + h * p.do_head_stride;
        for (int e = 0; e < d; ++e) {
          w.q[r * d + e] = A(E::load(qs[e])) * scale;  // as the forward loads it
          w.d_o[r * d + e] = E::load(ds[e]);
        }
        w.lse[r] = p.lse[b * p.lse_batch_stride + h * p.lse_head_stride + i * p.lse_row_stride];
        w.D[r] = D[(b * p.heads_q + h) * p.seqlen_q + i];
      }
      // P = exp(S - LSE), masked entries and empty rows 0.
      for (int64_t r = 0; r < rows; ++r) {
        A* s = &w.p[r * bn];
        std::fill(s, s + bn, A(0));
        const A* qr = &w.q[r * d];
        for (int e = 0; e < d; ++e) {
          const A x = qr[e];
          const A* kt = &w.kt[e * bn];
          for (int64_t c = 0; c < cols; ++c) s[c] += x * kt[c];
        }
        const A lse = w.lse[r];
        const int64_t i = q_begin + r;
        for (int64_t c = 0; c < cols; ++c) {
          const bool visible = lse != neg_inf && (!partial || window_visible(p, i, k_begin + c));
          s[c] = visible ? std::exp(s[c] - lse) : A(0);
        }
      }
      // dV_j += P^T dO_i.
      for (int64_t r = 0; r < rows; ++r) {
        const A* pr = &w.p[r * bn];
        const A* dor = &w.d_o[r * d];
        for (int64_t c = 0; c < cols; ++c) {
          const A pc = pr[c];
          if (pc == 0) continue;
          A* dvr = &w.dv[c * d];
          for (int e = 0; e < d; ++e) dvr[e] += pc * dor[e];
        }
      }
      // dP = dO_i V_j^T, dS = P o (dP - D) (in place of dP).
      for (int64_t r = 0; r < rows; ++r) {
        A* dp = &w.dp[r * bn];
        std::fill(dp, dp + bn, A(0));
        const A* dor = &w.d_o[r * d];
        for (int e = 0; e < d; ++e) {
          const A x = dor[e];
          const A* vt = &w.vt[e * bn];
          for (int64_t c = 0; c < cols; ++c) dp[c] += x * vt[c];
        }
        const A* pr = &w.p[r * bn];
        const A Dr = w.D[r];
        for (int64_t c = 0; c < cols; ++c) dp[c] = pr[c] * (dp[c] - Dr);
      }
      // dK_j += dS^T (scale Q_i);  dQ tile = dS K_j.
      A* dq = &w.dq[size_t(g) * bm * d];
      for (int64_t r = 0; r < rows; ++r) {
        const A* ds = &w.dp[r * bn];
        const A* qr = &w.q[r * d];
        A* dqr = &dq[r * d];
        std::fill(dqr, dqr + d, A(0));
        for (int64_t c = 0; c < cols; ++c) {
          const A x = ds[c];
          if (x == 0) continue;
          A* dkr = &w.dk[c * d];
          const A* kr = &w.k[c * d];
          for (int e = 0; e < d; ++e) {
            dkr[e] += x * qr[e];
            dqr[e] += x * kr[e];
          }
        }
      }
      head_done[g] = 1;
      any = true;
    }
    // Our turn on this query block (key blocks add in order 0, 1, 2, ...): add the tiles, pass it on.
    std::atomic<int32_t>& turn = turns[(b * p.heads_kv + hk) * l.q_blocks + qb];
    while (turn.load(std::memory_order_acquire) != kb) std::this_thread::yield();
    if (any)
      for (int g = 0; g < ratio; ++g) {
        if (!head_done[g]) continue;
        const int64_t h = hk * ratio + g;
        float* acc = dq_acc + ((b * p.heads_q + h) * p.seqlen_q + q_begin) * d;
        const A* dq = &w.dq[size_t(g) * bm * d];
        for (int64_t x = 0; x < rows * d; ++x) acc[x] = float(A(acc[x]) + dq[x]);
      }
    turn.store(static_cast<int32_t>(kb + 1), std::memory_order_release);
  }

  // dK_j, dV_j: written once, by their only owner.
  St* dk = static_cast<St*>(p.dk);
  St* dv = static_cast<St*>(p.dv);
  for (int64_t c = 0; c < cols; ++c) {
    St* dks = dk + b * p.dk_batch_stride + (k_begin + c) * p.dk_row_stride + hk * p.dk_head_stride;
    St* dvs = dv + b * p.dv_batch_stride + (k_begin + c) * p.dv_row_stride + hk * p.dv_head_stride;
    for (int e = 0; e < d; ++e) {
      dks[e] = E::store(float(w.dk[c * d + e]));
      dvs[e] = E::store(float(w.dv[c * d + e]));
    }
  }
}

// The workspace of a whole call: each dense part's dQacc, D and turn counters (bwd_layout), the parts' regions one
// after another within [all dQacc][all D][all counters]. A dense call is one part: exactly the layout above.
struct BwdPart {
  BwdParams p;
  BwdLayout l;
  size_t dq_off, d_off, counter_off;  // elements into each region
};
struct BwdPlan {
  std::vector<BwdPart> parts;
  size_t dq_elems = 0, d_elems = 0, counters = 0;
  size_t bytes() const { return (dq_elems + d_elems) * sizeof(float) + counters * sizeof(std::atomic<int32_t>); }
};

BwdPlan bwd_plan(const BwdParams& whole) {
  BwdPlan plan;
  for (const BwdParams& p : dense_parts(whole)) {
    const BwdLayout l = bwd_layout(p);
    plan.parts.push_back({p, l, plan.dq_elems, plan.d_elems, plan.counters});
    plan.dq_elems += l.dq_elems, plan.d_elems += l.d_elems, plan.counters += l.counters;
  }
  return plan;
}

template <DType T>
int32_t bwd_typed(const BwdParams& whole) {
  using E = Elem<T>;
  using St = typename E::storage;
  const BwdPlan plan = bwd_plan(whole);
  const int d = whole.head_dim;
  float* dq_region = static_cast<float*>(whole.workspace);
  float* D_region = dq_region + plan.dq_elems;
  std::atomic<int32_t>* turn_region = reinterpret_cast<std::atomic<int32_t>*>(D_region + plan.d_elems);
  for (size_t x = 0; x < plan.counters; ++x) new (&turn_region[x]) std::atomic<int32_t>(0);

  // Items numbered across the parts (see part_ranges): (part, batch, query head) rows for steps 1 and 3.
  std::vector<int64_t> row_counts, key_counts;
  for (const BwdPart& part : plan.parts) {
    row_counts.push_back(int64_t{part.p.batch} * part.p.heads_q);
    key_counts.push_back(int64_t{part.p.batch} * part.p.heads_kv * part.l.k_blocks);
  }
  const std::vector<int64_t> row_first = part_ranges(row_counts), key_first = part_ranges(key_counts);

  // 1. D = rowsum(dO o O), dQacc = 0.
  parallel_for(row_first.back(), [&](int64_t global, int) {
    const size_t i = part_of(row_first, global);
    const BwdParams& p = plan.parts[i].p;
    float* dq_acc = dq_region + plan.parts[i].dq_off;
    float* D = D_region + plan.parts[i].d_off;
    const int64_t bh = global - row_first[i];
    const int64_t b = bh / p.heads_q, h = bh % p.heads_q;
    const St* o = static_cast<const St*>(p.o) + b * p.o_batch_stride + h * p.o_head_stride;
    const St* dO = static_cast<const St*>(p.d_o) + b * p.do_batch_stride + h * p.do_head_stride;
    for (int64_t r = 0; r < p.seqlen_q; ++r) {
      // In double: D is subtracted from every dP_ij of the row (dS = P o (dP - D)), so its own rounding
      // should be one fp32 rounding, not d of them. O(b * hq * sq * d): free next to the main loop.
      double sum = 0.0;
      for (int e = 0; e < d; ++e)
        sum += double(E::load(o[r * p.o_row_stride + e])) * double(E::load(dO[r * p.do_row_stride + e]));
      D[bh * p.seqlen_q + r] = static_cast<float>(sum);
    }
    std::fill(dq_acc + bh * p.seqlen_q * d, dq_acc + (bh + 1) * p.seqlen_q * d, 0.0f);
  });

  // 2. Key blocks: within a part, item = kb * (b * hkv) + (b * hkv + hk). Key blocks of one head are handed out in
  //    increasing order (the dQ turns rely on it; parts follow each other, so the lowest unfinished item still never
  //    waits), and the items that run side by side belong to different heads whenever b * hkv >= threads, so they
  //    seldom wait for each other's turns; with fewer heads the key blocks of a head run as a wavefront.
  std::vector<BwdScratch<Acc<T>>> scratch(
      static_cast<size_t>(std::min<int64_t>(num_threads(), std::max<int64_t>(key_first.back(), 1))));
  parallel_for(key_first.back(), [&](int64_t global, int t) {
    const size_t i = part_of(key_first, global);
    const BwdPart& part = plan.parts[i];
    const int64_t heads = int64_t{part.p.batch} * part.p.heads_kv;
    const int64_t item = global - key_first[i];
    const int64_t kb = item / heads, bh = item % heads;
    bwd_item<T>(part.p, part.l, bh / part.p.heads_kv, bh % part.p.heads_kv, kb, dq_region + part.dq_off,
                D_region + part.d_off, turn_region + part.counter_off, scratch[t]);
  });

  // 3. dQ = scale * dQacc.
  parallel_for(row_first.back(), [&](int64_t global, int) {
    const size_t i = part_of(row_first, global);
    const BwdParams& p = plan.parts[i].p;
    const int64_t bh = global - row_first[i];
    const int64_t b = bh / p.heads_q, h = bh % p.heads_q;
    St* dq = static_cast<St*>(p.dq) + b * p.dq_batch_stride + h * p.dq_head_stride;
    const float* acc = dq_region + plan.parts[i].dq_off + bh * p.seqlen_q * d;
    for (int64_t r = 0; r < p.seqlen_q; ++r)
      for (int e = 0; e < d; ++e) dq[r * p.dq_row_stride + e] = E::store(acc[r * d + e] * p.scale);
  });
  zero_unused_key_rows(whole);  // varlen with seqused_k: dk = dv = 0 past each sequence's used keys
  return FLASH_OK;
}

int32_t bwd(const BwdParams& p) {
  return with_dtype(p.dtype, [&](auto t) { return bwd_typed<decltype(t)::value>(p); });
}

size_t bwd_workspace(const BwdParams& p) { return bwd_plan(p).bytes(); }

bool available(int32_t, std::string*) { return true; }
bool supports(const FwdParams&, std::string*) { return true; }
size_t workspace(const FwdParams&) { return 0; }

}  // namespace
}  // namespace cpu

extern const Algorithm kCpuFlash = {FLASH_ALGO_CPU,   "cpu",          FLASH_DEVICE_CPU, cpu::available,
                                    cpu::supports,    cpu::workspace, cpu::fwd,         /*supports_bwd=*/nullptr,
                                    cpu::bwd_workspace, cpu::bwd};

}  // namespace flash
