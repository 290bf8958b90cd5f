// libflash/cpu/kvcache_cpu.cpp -- KV-cache attention (append + split-KV attention through a block table or a
// batch index) and the combine of partial results, on the host.
//
// 1. Append: k_new/v_new rows are copied, bytes as they are, to their cache slots (capi/validate_kvcache.cpp has
//    checked that every slot is inside the cache and that no two sequences write, or write and read, one slot).
// 2. Attention: one work item per (sequence, query head, 64-row query block, split). The split's keys
//    [k_begin, k_end) are walked in 64-key blocks, each gathered through the block table (or the batch index)
//    into K_j^T and V_j; then the cpu forward's step: S = (scale Q) K_j^T, online softmax, O += P V_j
//    (libflash/cpu/flash_cpu.cpp; the same Acc type: fp32 for 16-bit inputs, double for fp32 ones).
// 3. With one split the item writes O (rounded once) and LSE. With several, each split writes its normalised
//    partial O and its LSE in Acc to the workspace, and combine_row (the arithmetic of flash_combine, below)
//    merges them: M = max LSE_s, w_s = exp(LSE_s - M), O = sum w_s O_s / sum w_s, LSE = M + log(sum w_s), in
//    double, O rounded once.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "../../flash.h"
#include "../kvcache.h"
#include "convert.h"
#include "parallel.h"

namespace flash {
namespace cpu {
namespace {

constexpr int kBlockM = 64;   // query rows per work item
constexpr int kBlockN = 64;   // keys per step
constexpr int kMaxSplits = 256;
constexpr int64_t kMinKeysPerSplit = 512;  // num_splits = 0 never makes splits shorter than this

// As in flash_cpu.cpp: fp32 for 16-bit inputs, double for fp32 inputs (one output rounding).
template <DType T>
using Acc = std::conditional_t<T == DType::FP32, double, float>;

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// Merges one output row from n parts: lse_of(s) gives part s's LSE, o_of(s, e) element e of its O, store(e, x)
// writes the result; returns the merged LSE. The one implementation of flash_combine's arithmetic.
template <class LseOf, class OOf, class Store>
double combine_row(int n, int d, LseOf&& lse_of, OOf&& o_of, Store&& store, std::vector<double>& acc) {
  double m = kNegInf;
  bool nan = false;
  for (int s = 0; s < n; ++s) {
    const double l = lse_of(s);
    nan |= std::isnan(l);
    m = std::max(m, l);
  }
  if (nan) {
    for (int e = 0; e < d; ++e) store(e, std::numeric_limits<double>::quiet_NaN());
    return std::numeric_limits<double>::quiet_NaN();
  }
  if (m == kNegInf) {  // no part saw a key
    for (int e = 0; e < d; ++e) store(e, 0.0);
    return kNegInf;
  }
  acc.assign(d, 0.0);
  double sum = 0.0;
  for (int s = 0; s < n; ++s) {
    const double l = lse_of(s);
    if (l == kNegInf) continue;
    const double w = std::exp(l - m);
    sum += w;
    for (int e = 0; e < d; ++e) acc[e] += w * o_of(s, e);
  }
  for (int e = 0; e < d; ++e) store(e, acc[e] / sum);
  return m + std::log(sum);
}

template <class A>
struct Scratch {
  std::vector<A> q, kt, v, s, o, m, l;
};

// Keys [k_begin, k_end) of split `split` of a sequence with L keys in `splits` splits.
void split_range(int64_t L, int splits, int split, int64_t* k_begin, int64_t* k_end) {
  const int64_t chunk = (L + splits - 1) / splits;
  *k_begin = std::min<int64_t>(L, split * chunk);
  *k_end = std::min<int64_t>(L, *k_begin + chunk);
}

struct Layout {
  int splits;
  int64_t q_blocks;
  size_t part_o, part_lse;  // elements of the partial O and LSE arrays (Acc)
};

Layout layout(const KvcacheParams& p, int splits) {
  Layout l;
  l.splits = splits;
  l.q_blocks = (p.seqlen_new + kBlockM - 1) / kBlockM;
  const size_t rows = size_t(p.batch) * p.heads_q * p.seqlen_new;
  l.part_lse = splits > 1 ? size_t(splits) * rows : 0;
  l.part_o = l.part_lse * p.head_dim;
  return l;
}

// Partial arrays: o_part[((s * b + bb) * hq + h) * sn + i][e], lse_part[((s * b + bb) * hq + h) * sn + i].
template <DType T>
void attend_item(const KvcacheParams& p, const Layout& lay, int64_t b, int64_t h, int64_t qb, int split,
                 Acc<T>* o_part, Acc<T>* lse_part, Scratch<Acc<T>>& w) {
  using E = Elem<T>;
  using S = typename E::storage;
  using A = Acc<T>;
  const int d = p.head_dim;
  const int64_t sn = p.seqlen_new;
  const int64_t q_begin = qb * kBlockM, q_end = std::min<int64_t>(q_begin + kBlockM, sn);
  const int64_t rows = q_end - q_begin;
  const int64_t hk = h / p.head_ratio;
  const int64_t L = p.seqlen_k(b);
  const int64_t diag_offset = L - sn;  // bottom-right: query row i sits at key position i + L - sn
  const S* q = static_cast<const S*>(p.q);
  const S* kc = static_cast<const S*>(p.k_cache);
  const S* vc = static_cast<const S*>(p.v_cache);
  const A neg_inf = -std::numeric_limits<A>::infinity();

  int64_t k_begin, k_end;
  split_range(L, lay.splits, split, &k_begin, &k_end);
  // Keys some row of the block may see.
  if (p.window_left >= 0) k_begin = std::max<int64_t>(k_begin, q_begin + diag_offset - p.window_left);
  if (p.window_right >= 0) k_end = std::min<int64_t>(k_end, q_end - 1 + diag_offset + p.window_right + 1);
  const bool windowed = p.window_left >= 0 || p.window_right >= 0;

  w.q.resize(size_t(rows) * d);
  w.kt.assign(size_t(d) * kBlockN, A(0));
  w.v.resize(size_t(kBlockN) * d);
  w.s.resize(size_t(rows) * kBlockN);
  w.o.assign(size_t(rows) * d, A(0));
  w.m.assign(rows, neg_inf);
  w.l.assign(rows, A(0));
  for (int64_t r = 0; r < rows; ++r) {
    const S* src = q + b * p.q_batch_stride + (q_begin + r) * p.q_row_stride + h * p.q_head_stride;
    for (int c = 0; c < d; ++c) w.q[r * d + c] = A(E::load(src[c])) * A(p.scale);
  }

  for (int64_t kb = k_begin; kb < k_end; kb += kBlockN) {
    const int64_t cols = std::min<int64_t>(kBlockN, k_end - kb);
    // Gather K_j (transposed) and V_j through the block table / batch index.
    for (int64_t c = 0; c < cols; ++c) {
      const S* ks = kc + p.cache_offset(b, kb + c, hk, p.kc_batch_stride, p.kc_row_stride, p.kc_head_stride);
      const S* vs = vc + p.cache_offset(b, kb + c, hk, p.vc_batch_stride, p.vc_row_stride, p.vc_head_stride);
      for (int e = 0; e < d; ++e) {
        w.kt[e * kBlockN + c] = E::load(ks[e]);
        w.v[c * d + e] = E::load(vs[e]);
      }
    }
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t diag = q_begin + r + diag_offset;
      A* s = &w.s[r * kBlockN];
      std::fill(s, s + cols, A(0));
      const A* qr = &w.q[r * d];
      for (int e = 0; e < d; ++e) {
        const A x = qr[e];
        const A* kt = &w.kt[e * kBlockN];
        for (int64_t c = 0; c < cols; ++c) s[c] += x * kt[c];
      }
      A row_max = neg_inf;
      for (int64_t c = 0; c < cols; ++c) {
        const int64_t j = kb + c;
        if (windowed && ((p.window_left >= 0 && j < diag - p.window_left) ||
                         (p.window_right >= 0 && j > diag + p.window_right)))
          s[c] = neg_inf;
        row_max = std::max(row_max, s[c]);
      }
      if (row_max == neg_inf) continue;
      const A m_new = std::max(w.m[r], row_max);
      const A correction = std::exp(w.m[r] - m_new);
      A row_sum = 0;
      for (int64_t c = 0; c < cols; ++c) {
        s[c] = std::exp(s[c] - m_new);
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

  for (int64_t r = 0; r < rows; ++r) {
    const int64_t i = q_begin + r;
    const A inv_l = w.l[r] > 0 ? 1 / w.l[r] : A(0);
    const A lse = w.l[r] > 0 ? w.m[r] + std::log(w.l[r]) : neg_inf;
    if (lay.splits == 1) {
      S* dst = static_cast<S*>(p.o) + b * p.o_batch_stride + i * p.o_row_stride + h * p.o_head_stride;
      for (int e = 0; e < d; ++e) dst[e] = E::store(float(w.o[r * d + e] * inv_l));
      if (p.lse) p.lse[b * p.lse_batch_stride + h * p.lse_head_stride + i * p.lse_row_stride] = float(lse);
    } else {
      const size_t row = ((size_t(split) * p.batch + b) * p.heads_q + h) * sn + i;
      A* dst = o_part + row * d;
      for (int e = 0; e < d; ++e) dst[e] = w.o[r * d + e] * inv_l;
      lse_part[row] = lse;
    }
  }
}

// Copies k_new/v_new into the cache: bytes as they are, so the cache afterwards holds exactly k_new's values.
void append(const KvcacheParams& p) {
  const size_t row_bytes = size_t(p.head_dim) * dtype_size(p.dtype);
  const size_t es = dtype_size(p.dtype);
  char* kc = static_cast<char*>(p.k_cache);
  char* vc = static_cast<char*>(p.v_cache);
  const char* kn = static_cast<const char*>(p.k_new);
  const char* vn = static_cast<const char*>(p.v_new);
  parallel_for(p.batch, [&](int64_t b, int) {
    const int64_t n0 = p.cache_seqlens[b];
    for (int64_t t = 0; t < p.seqlen_new; ++t)
      for (int64_t h = 0; h < p.heads_kv; ++h) {
        std::memcpy(kc + es * p.cache_offset(b, n0 + t, h, p.kc_batch_stride, p.kc_row_stride, p.kc_head_stride),
                    kn + es * (b * p.kn_batch_stride + t * p.kn_row_stride + h * p.kn_head_stride), row_bytes);
        std::memcpy(vc + es * p.cache_offset(b, n0 + t, h, p.vc_batch_stride, p.vc_row_stride, p.vc_head_stride),
                    vn + es * (b * p.vn_batch_stride + t * p.vn_row_stride + h * p.vn_head_stride), row_bytes);
      }
  });
}

template <DType T>
int32_t kvcache_typed(const KvcacheParams& p) {
  using E = Elem<T>;
  using S = typename E::storage;
  using A = Acc<T>;
  if (p.k_new != nullptr) append(p);
  const Layout lay = layout(p, kvcache_num_splits(p));
  A* o_part = lay.splits > 1 ? static_cast<A*>(p.workspace) : nullptr;
  A* lse_part = lay.splits > 1 ? o_part + lay.part_o : nullptr;
  const int64_t items = int64_t{p.batch} * p.heads_q * lay.q_blocks * lay.splits;
  std::vector<Scratch<A>> scratch(static_cast<size_t>(std::min<int64_t>(num_threads(), items)));
  parallel_for(items, [&](int64_t item, int t) {
    const int split = static_cast<int>(item % lay.splits);
    int64_t rest = item / lay.splits;
    const int64_t qb = rest % lay.q_blocks;
    rest /= lay.q_blocks;
    const int64_t h = rest % p.heads_q, b = rest / p.heads_q;
    attend_item<T>(p, lay, b, h, qb, split, o_part, lse_part, scratch[t]);
  });
  if (lay.splits == 1) return FLASH_OK;

  // Merge the splits: flash_combine's arithmetic, one row at a time.
  const int d = p.head_dim;
  const int64_t sn = p.seqlen_new;
  const size_t split_rows = size_t(p.batch) * p.heads_q * sn;
  parallel_for(int64_t{p.batch} * p.heads_q, [&](int64_t bh, int) {
    const int64_t b = bh / p.heads_q, h = bh % p.heads_q;
    std::vector<double> acc;
    for (int64_t i = 0; i < sn; ++i) {
      const size_t row = size_t(bh) * sn + i;
      S* dst = static_cast<S*>(p.o) + b * p.o_batch_stride + i * p.o_row_stride + h * p.o_head_stride;
      const double lse = combine_row(
          lay.splits, d, [&](int s) { return double(lse_part[s * split_rows + row]); },
          [&](int s, int e) { return double(o_part[(s * split_rows + row) * d + e]); },
          [&](int e, double x) { dst[e] = E::store(float(x)); }, acc);
      if (p.lse) p.lse[b * p.lse_batch_stride + h * p.lse_head_stride + i * p.lse_row_stride] = float(lse);
    }
  });
  return FLASH_OK;
}

template <DType TP, DType TO>
int32_t combine_typed(const CombineParams& p) {
  using SP = typename Elem<TP>::storage;
  using SO = typename Elem<TO>::storage;
  const int d = p.head_dim;
  parallel_for(int64_t{p.batch} * p.heads, [&](int64_t bh, int) {
    const int64_t b = bh / p.heads, h = bh % p.heads;
    std::vector<double> acc;
    for (int64_t i = 0; i < p.seqlen; ++i) {
      SO* dst = static_cast<SO*>(p.o) + b * p.o_batch_stride + i * p.o_row_stride + h * p.o_head_stride;
      const double lse = combine_row(
          p.num_parts, d,
          [&](int s) {
            const CombinePart& x = p.parts[s];
            return double(x.lse[b * x.lse_batch_stride + h * x.lse_head_stride + i * x.lse_row_stride]);
          },
          [&](int s, int e) {
            const CombinePart& x = p.parts[s];
            const SP* src = static_cast<const SP*>(x.o) + b * x.o_batch_stride + i * x.o_row_stride + h * x.o_head_stride;
            return double(Elem<TP>::load(src[e]));
          },
          [&](int e, double x) {
            if constexpr (TO == DType::FP32) dst[e] = static_cast<float>(x);
            else dst[e] = Elem<TO>::store(static_cast<float>(x));
          },
          acc);
      if (p.lse) p.lse[b * p.lse_batch_stride + h * p.lse_head_stride + i * p.lse_row_stride] = float(lse);
    }
  });
  return FLASH_OK;
}

}  // namespace

int32_t kvcache_num_splits(const KvcacheParams& p) {
  if (p.num_splits > 0) return std::min(p.num_splits, kMaxSplits);
  // Enough items for every thread, but no split shorter than kMinKeysPerSplit keys.
  int64_t max_keys = 0;
  for (int64_t b = 0; b < p.batch; ++b) max_keys = std::max(max_keys, p.seqlen_k(b));
  const int64_t items = int64_t{p.batch} * p.heads_q * ((p.seqlen_new + kBlockM - 1) / kBlockM);
  const int64_t threads = num_threads();
  if (items >= threads) return 1;
  const int64_t want = (threads + items - 1) / items;
  const int64_t cap = std::max<int64_t>(1, max_keys / kMinKeysPerSplit);
  return static_cast<int32_t>(std::clamp<int64_t>(std::min(want, cap), 1, kMaxSplits));
}

size_t kvcache_workspace(const KvcacheParams& p) {
  const Layout l = layout(p, kvcache_num_splits(p));
  const size_t acc = p.dtype == DType::FP32 ? sizeof(double) : sizeof(float);
  return (l.part_o + l.part_lse) * acc;
}

int32_t kvcache_fwd(const KvcacheParams& p) {
  return with_dtype(p.dtype, [&](auto t) { return kvcache_typed<decltype(t)::value>(p); });
}

int32_t combine(const CombineParams& p) {
  return with_dtype(p.part_dtype, [&](auto tp) {
    return with_dtype(p.o_dtype, [&](auto to) { return combine_typed<decltype(tp)::value, decltype(to)::value>(p); });
  });
}

}  // namespace cpu
}  // namespace flash
