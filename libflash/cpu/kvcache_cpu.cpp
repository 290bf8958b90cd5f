// libflash/cpu/kvcache_cpu.cpp -- KV-cache attention (append + split-KV attention through a block table or a
// batch index) and the combine of partial results, on the host.
//
// 1. Append: k_new/v_new rows are copied, bytes as they are, to their cache slots (capi/validate_kvcache.cpp has
//    checked that every slot is inside the cache and that no two sequences write, or write and read, one slot).
// 2. Attention: one work item per (sequence, query head, 64-row query block, split). The split's keys
//    [k_begin, k_end) are walked in 64-key blocks, each gathered through the block table (or the batch index)
//    into the rows of K_j and V_j; then the cpu forward's step (QueryBlock, kernels.h): S = scale Q K_j^T,
//    online softmax, O = corr O + P V_j; in fp32 for 16-bit inputs, in double for fp32 ones (KvBlock, below).
// 3. With one split the item writes O (rounded once) and LSE. With several, each split writes its normalised
//    partial O and its LSE to the workspace (in double for fp32 inputs, so the combined O is still rounded once;
//    fp32 for 16-bit ones), and combine_row (the arithmetic of flash_combine, below)
//    merges them: M = max LSE_s, w_s = exp(LSE_s - M), O = sum w_s O_s / sum w_s, LSE = M + log(sum w_s), in
//    double, O rounded once.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "../../flash.h"
#include "../kvcache.h"
#include "convert.h"
#include "kernels.h"
#include "parallel.h"

namespace flash {
namespace cpu {
namespace {

constexpr int kBlockM = 64;   // query rows per work item
constexpr int kBlockN = 64;   // keys per step
constexpr int kMaxSplits = 256;
constexpr int64_t kMinKeysPerSplit = 512;  // num_splits = 0 never makes splits shorter than this

// The type of the split partials in the workspace (above).
template <DType T>
using Part = std::conditional_t<T == DType::FP32, double, float>;

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

// The step's types: fp32 inputs in double throughout (their O is rounded once, as bindings/python/tests/
// test_kvcache.py checks to 1 ulp; decoding reads each key once per new token, so it is the reading, not this
// arithmetic, that sets the speed), 16-bit ones in fp32 as in the forward.
template <DType T>
using KvBlock = QueryBlock<T, ScoreType<T>, Part<T>>;

// Keys [k_begin, k_end) of split `split` of a sequence with L keys in `splits` splits.
void split_range(int64_t L, int splits, int split, int64_t* k_begin, int64_t* k_end) {
  const int64_t chunk = (L + splits - 1) / splits;
  *k_begin = std::min<int64_t>(L, split * chunk);
  *k_end = std::min<int64_t>(L, *k_begin + chunk);
}

struct Layout {
  int splits;
  int64_t q_blocks;
  size_t part_o, part_lse;  // elements of the partial O and LSE arrays (Part)
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
template <DType T, class Block>
void attend_item(const KvcacheParams& p, const Layout& lay, int64_t b, int64_t h, int64_t qb, int split,
                 Part<T>* o_part, Part<T>* lse_part, Block& blk) {
  using E = Elem<T>;
  using S = typename E::storage;
  const int d = p.head_dim;
  const int64_t sn = p.seqlen_new;
  const int64_t q_begin = qb * kBlockM, q_end = std::min<int64_t>(q_begin + kBlockM, sn);
  const int rows = static_cast<int>(q_end - q_begin);
  const int64_t hk = h / p.head_ratio;
  const int64_t L = p.seqlen_k(b);
  const int64_t diag_offset = L - sn;  // bottom-right: query row i sits at key position i + L - sn
  const S* q = static_cast<const S*>(p.q);
  const S* kc = static_cast<const S*>(p.k_cache);
  const S* vc = static_cast<const S*>(p.v_cache);

  int64_t k_begin, k_end;
  split_range(L, lay.splits, split, &k_begin, &k_end);
  // Keys some row of the block may see.
  if (p.window_left >= 0) k_begin = std::max<int64_t>(k_begin, q_begin + diag_offset - p.window_left);
  if (p.window_right >= 0) k_end = std::min<int64_t>(k_end, q_end - 1 + diag_offset + p.window_right + 1);
  const Window window{diag_offset, p.window_left, p.window_right};
  const bool windowed = p.window_left >= 0 || p.window_right >= 0;

  blk.begin(kernels(), rows, d, kBlockN, p.scale);
  for (int r = 0; r < rows; ++r) blk.set_query(r, q + b * p.q_batch_stride + (q_begin + r) * p.q_row_stride + h * p.q_head_stride);

  for (int64_t kb = k_begin; kb < k_end; kb += kBlockN) {
    const int keys = static_cast<int>(std::min<int64_t>(kBlockN, k_end - kb));
    // Gather K_j and V_j through the block table / batch index.
    for (int c = 0; c < keys; ++c) {
      blk.set_key(c, kc + p.cache_offset(b, kb + c, hk, p.kc_batch_stride, p.kc_row_stride, p.kc_head_stride));
      blk.set_value(c, vc + p.cache_offset(b, kb + c, hk, p.vc_batch_stride, p.vc_row_stride, p.vc_head_stride));
    }
    blk.step(keys, q_begin, kb, windowed ? &window : nullptr);
  }

  for (int r = 0; r < rows; ++r) {
    const int64_t i = q_begin + r;
    if (lay.splits == 1) {
      S* dst = static_cast<S*>(p.o) + b * p.o_batch_stride + i * p.o_row_stride + h * p.o_head_stride;
      for (int e = 0; e < d; ++e) dst[e] = E::store(static_cast<float>(blk.out(r, e)));
      if (p.lse) p.lse[b * p.lse_batch_stride + h * p.lse_head_stride + i * p.lse_row_stride] = static_cast<float>(blk.lse(r));
    } else {
      const size_t part = ((size_t(split) * p.batch + b) * p.heads_q + h) * sn + i;
      Part<T>* dst = o_part + part * d;
      for (int e = 0; e < d; ++e) dst[e] = static_cast<Part<T>>(blk.out(r, e));
      lse_part[part] = static_cast<Part<T>>(blk.lse(r));
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

template <DType T, class Block>
int32_t kvcache_with(const KvcacheParams& p) {
  using E = Elem<T>;
  using S = typename E::storage;
  const Layout lay = layout(p, kvcache_num_splits(p));
  Part<T>* o_part = lay.splits > 1 ? static_cast<Part<T>*>(p.workspace) : nullptr;
  Part<T>* lse_part = lay.splits > 1 ? o_part + lay.part_o : nullptr;
  const int64_t items = int64_t{p.batch} * p.heads_q * lay.q_blocks * lay.splits;
  std::vector<Block> scratch(static_cast<size_t>(std::min<int64_t>(num_threads(), items)));
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

template <DType T>
int32_t kvcache_typed(const KvcacheParams& p) {
  if (p.k_new != nullptr) append(p);
  if constexpr (T == DType::BF16)
    if (bf16_kernels()) return kvcache_with<T, QueryBlock<T, Bf16Dot>>(p);
  return kvcache_with<T, KvBlock<T>>(p);
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
  const size_t part = p.dtype == DType::FP32 ? sizeof(Part<DType::FP32>) : sizeof(Part<DType::BF16>);
  return (l.part_o + l.part_lse) * part;
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
