// libflash/cpu/flash_cpu.cpp -- FlashAttention (Algorithm 1) on the host.
//
// One work item is one (batch, head, query block) -- the FlashAttention-2 loop order, which keeps the
// running statistics of a query block in L1 for its whole life instead of writing them back per key block
// as Algorithm 1's outer-KV order does. Per query block Q_i (block_m rows):
//   for each key block K_j, V_j that the mask leaves visible:
//     S_ij = scale * Q_i K_j^T
//     m_new = max(m_i, rowmax(S_ij))
//     P_ij  = exp(S_ij - m_new)
//     l_i   = exp(m_i - m_new) * l_i + rowsum(P_ij)
//     O_i   = exp(m_i - m_new) * O_i + P_ij V_j
//   O_i /= l_i;  LSE_i = m_i + log(l_i)
// The step itself is QueryBlock::step (kernels.h, shared with the KV-cache forward), built from the tile
// kernels; this file walks the blocks the mask leaves and moves data in and out.
// Extra memory is O(block_m * (d + block_n)) per thread, plus where it pays a packed copy of one head's K and V
// (HeadRows, at most 64 MB): the N x N matrix never exists.
// A packed variable-length batch (flash.h; libflash/varlen.h) runs as the list of its sequences' dense problems of
// batch 1 (each with its own lengths and diagonal), their work items numbered one after another and shared out
// together: the same per-block step, at per-sequence offsets.
// The backward (further down) is FlashAttention's: per key block, P recomputed from the saved LSE.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
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
#include "kernels.h"
#include "parallel.h"

namespace flash {
namespace cpu {
namespace {

constexpr int kBlockM = 64;  // query rows per work item (unless a block mask dictates its own)
constexpr int kBlockN = 64;  // keys per step (likewise)

// The keys and values of one (problem, batch, kv head), their rows packed one after another (stride d) by the thread
// whose item needs them first and kept for its next items of that head. In the usual [batch, seqlen, heads, d] layout
// a head's rows lie heads * d elements apart -- 4 KB from 8 heads of d128 fp32, a page per row, every row in the same
// few cache sets -- and every query block walks all of them again (at 4k keys 8192 pages a pass, twice the L2 TLB's
// entries). One thread, b1 h8 4k d128 fp32: 70 -> 91 GFLOP/s packed (82 with h1, whose rows are adjacent); two threads,
// d64 4k: 230 -> 195 ms (docs/kernels.md, "CPU backend"). Only where it pays: rows apart, the head split into at least
// 2 query blocks per thread (each copy read twice or more), the copy at most kMaxPackedHead bytes; else read in place.
constexpr size_t kMaxPackedHead = size_t{64} << 20;

template <class St>
class HeadRows {
 public:
  // K's and V's rows of head hk of batch b of p: *k, *v and their row strides.
  void get(const FwdParams& p, int64_t b, int64_t hk, int64_t q_blocks, const St** k, const St** v, int64_t* k_rs,
           int64_t* v_rs) {
    const int d = p.head_dim;
    const St* k0 = static_cast<const St*>(p.k) + b * p.k_batch_stride + hk * p.k_head_stride;
    const St* v0 = static_cast<const St*>(p.v) + b * p.v_batch_stride + hk * p.v_head_stride;
    const size_t bytes = size_t(p.seqlen_k) * d * 2 * sizeof(St);
    const bool pays = (p.k_row_stride != d || p.v_row_stride != d) && q_blocks >= 2 * int64_t{num_threads()} &&
                      bytes <= kMaxPackedHead;
    if (!pays) {
      *k = k0, *v = v0, *k_rs = p.k_row_stride, *v_rs = p.v_row_stride;
      return;
    }
    if (k0 != k_src_ || v0 != v_src_ || p.seqlen_k != rows_) {
      k_.resize(size_t(p.seqlen_k) * d), v_.resize(size_t(p.seqlen_k) * d);
      for (int64_t j = 0; j < p.seqlen_k; ++j) {
        std::memcpy(&k_[size_t(j) * d], k0 + j * p.k_row_stride, sizeof(St) * d);
        std::memcpy(&v_[size_t(j) * d], v0 + j * p.v_row_stride, sizeof(St) * d);
      }
      k_src_ = k0, v_src_ = v0, rows_ = p.seqlen_k;
    }
    *k = k_.data(), *v = v_.data(), *k_rs = *v_rs = d;
  }

 private:
  const St *k_src_ = nullptr, *v_src_ = nullptr;  // the head packed now (its first rows)
  int64_t rows_ = -1;
  std::vector<St> k_, v_;
};

// Per thread: the query block's state (QueryBlock) and the packed head.
template <DType T, class Block>
struct FwdScratch {
  Block block;
  HeadRows<typename Elem<T>::storage> head;
};

template <DType T, class Block>
void fwd_block(const FwdParams& p, int64_t b, int64_t h, int64_t q_begin, int64_t q_end, int block_n, int64_t q_block,
               int64_t q_blocks, FwdScratch<T, Block>& w) {
  using E = Elem<T>;
  using S = typename E::storage;
  const int d = p.head_dim;
  const int rows = static_cast<int>(q_end - q_begin);
  const int64_t hk = h / p.head_ratio;  // GQA: query head h reads key/value head h / ratio
  const S* q = static_cast<const S*>(p.q);
  const S *k, *v;
  int64_t k_rs, v_rs;
  w.head.get(p, b, hk, q_blocks, &k, &v, &k_rs, &v_rs);
  Block& qb = w.block;
  qb.begin(kernels(), rows, d, block_n, p.scale);
  for (int r = 0; r < rows; ++r) qb.set_query(r, q + b * p.q_batch_stride + (q_begin + r) * p.q_row_stride + h * p.q_head_stride);

  const Window window{p.diag_offset, p.window_left, p.window_right};
  KeyBlocks blocks(p, b, h, q_begin, q_end, q_block, block_n);
  for (int64_t kb; blocks.next(&kb);) {
    const int64_t k_begin = kb * block_n, k_end = std::min<int64_t>(k_begin + block_n, p.seqlen_k);
    const int keys = static_cast<int>(k_end - k_begin);
    for (int c = 0; c < keys; ++c) {
      const int64_t j = k_begin + c;
      qb.set_key(c, k + j * k_rs);
      qb.set_value(c, v + j * v_rs);
    }
    qb.step(keys, q_begin, k_begin, blocks.partial(kb) ? &window : nullptr);
  }

  // O = O / l (0 for rows that saw no key), rounded once; LSE = m + log(l) (-inf for those rows).
  S* out = static_cast<S*>(p.o);
  for (int r = 0; r < rows; ++r) {
    const int64_t i = q_begin + r;
    S* dst = out + b * p.o_batch_stride + i * p.o_row_stride + h * p.o_head_stride;
    for (int e = 0; e < d; ++e) dst[e] = E::store(static_cast<float>(qb.out(r, e)));
    if (p.lse) p.lse[b * p.lse_batch_stride + h * p.lse_head_stride + i * p.lse_row_stride] = static_cast<float>(qb.lse(r));
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

template <DType T, class Block>
int32_t fwd_with(const FwdParams& whole) {
  const int block_m = whole.has_block_mask ? whole.block_mask.block_m : kBlockM;
  const int block_n = whole.has_block_mask ? whole.block_mask.block_n : kBlockN;
  // One work item per (part, batch, head, query block).
  const std::vector<FwdParams> parts = dense_parts(whole);
  std::vector<int64_t> counts;
  for (const FwdParams& p : parts) counts.push_back(int64_t{p.batch} * p.heads_q * ((p.seqlen_q + block_m - 1) / block_m));
  const std::vector<int64_t> first = part_ranges(counts);
  const int64_t items = first.back();
  std::vector<FwdScratch<T, Block>> scratch(
      static_cast<size_t>(std::min<int64_t>(num_threads(), std::max<int64_t>(items, 1))));
  parallel_for(items, [&](int64_t global, int t) {
    const size_t part = part_of(first, global);
    const FwdParams& p = parts[part];
    const int64_t item = global - first[part];
    const int64_t q_blocks = (p.seqlen_q + block_m - 1) / block_m;
    const int64_t qb = item % q_blocks, bh = item / q_blocks;
    const int64_t h = bh % p.heads_q, b = bh / p.heads_q;
    const int64_t q_begin = qb * block_m, q_end = std::min<int64_t>(q_begin + block_m, p.seqlen_q);
    fwd_block<T>(p, b, h, q_begin, q_end, block_n, qb, q_blocks, scratch[t]);
  });
  return FLASH_OK;
}

template <DType T>
int32_t fwd_typed(const FwdParams& p) {
  if constexpr (T == DType::BF16)
    if (bf16_kernels()) return fwd_with<T, QueryBlock<T, Bf16Dot>>(p);
  return fwd_with<T, QueryBlock<T, ScoreType<T>>>(p);
}

int32_t fwd(const FwdParams& p) {
  return with_dtype(p.dtype, [&](auto t) { return fwd_typed<decltype(t)::value>(p); });
}

// ---- Backward ---------------------------------------------------------------------------------------
//
// FlashAttention's backward (the paper's Algorithm 4, FlashAttention-2's loop order): nothing N x N is
// stored; P is recomputed tile by tile from Q, K and the forward's LSE.
//   1. Preprocess: D_i = rowsum(dO_i o O_i) (summed in double, stored fp32), dQacc = 0.
//   2. One work item per (batch, kv head, key block j); K_j, V_j and dK_j, dV_j (fp32) stay in the item's
//      scratch for its whole life, so dK and dV need no atomics. For every query block i that sees key
//      block j, and every query head h of the kv head's GQA group, five products (kernels.h's tile kernels):
//        S  = sign(scale) Q_i K_j^T,  P = 2^(S c - LSE_i log2(e))   (c = |scale| log2(e); 0 where masked, 0 for
//                                                         a row with LSE = -inf; every product in fp32 with fp32
//                                                         sums, bf16 ones on AVX512-BF16: KeyBlockGrads)
//        dV_j += P^T dO_i
//        dP = dO_i V_j^T,  dS = P o (dP - D_i)
//        dK_j += dS^T Q_i                                 (times scale at the end)
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
// Per thread: O((block_m + block_n) * d + block_m * block_n) scratch (plus block_m * d per GQA head for the
// dQ tiles waiting for their turn).

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

template <DType T, class Block>
void bwd_item(const BwdParams& p, const BwdLayout& l, int64_t b, int64_t hk, int64_t kb, float* dq_acc, const float* D,
              std::atomic<int32_t>* turns, Block& kb_state, std::vector<float>& dq_tiles, std::vector<char>& head_done) {
  using E = Elem<T>;
  using St = typename E::storage;
  const int d = p.head_dim, bm = l.block_m, bn = l.block_n;
  const int64_t k_begin = kb * bn, k_end = std::min<int64_t>(k_begin + bn, p.seqlen_k);
  const int cols = static_cast<int>(k_end - k_begin);
  const int ratio = p.head_ratio;
  const St* k = static_cast<const St*>(p.k);
  const St* v = static_cast<const St*>(p.v);
  const St* q = static_cast<const St*>(p.q);
  const St* dO = static_cast<const St*>(p.d_o);

  Block& blk = kb_state;
  blk.begin(kernels(), d, bm, bn, cols, p.scale);
  for (int c = 0; c < cols; ++c) {
    const int64_t j = k_begin + c;
    blk.set_key(c, k + b * p.k_batch_stride + j * p.k_row_stride + hk * p.k_head_stride,
                v + b * p.v_batch_stride + j * p.v_row_stride + hk * p.v_head_stride);
  }
  blk.keys_done();
  const int dp = blk.padded_dim();
  dq_tiles.resize(size_t(ratio) * bm * dp);
  const Window window{p.diag_offset, p.window_left, p.window_right};

  for (int64_t qb = 0; qb < l.q_blocks; ++qb) {
    const int64_t q_begin = qb * bm, q_end = std::min<int64_t>(q_begin + bm, p.seqlen_q);
    const int rows = static_cast<int>(q_end - q_begin);
    const bool in_window = tile_in_window(p, q_begin, q_end, k_begin, k_end);
    const bool partial = in_window && tile_partial(p, q_begin, q_end, k_begin, k_end);
    bool any = false;                       // some head of the group computed a dQ tile for this block
    head_done.assign(ratio, 0);
    for (int g = 0; in_window && g < ratio; ++g) {
      const int64_t h = hk * ratio + g;
      if (!block_listed(p, b, h, qb, kb)) continue;
      for (int r = 0; r < rows; ++r) {
        const int64_t i = q_begin + r;
        blk.set_query(r, q + b * p.q_batch_stride + i * p.q_row_stride + h * p.q_head_stride,
                      dO + b * p.do_batch_stride + i * p.do_row_stride + h * p.do_head_stride,
                      p.lse[b * p.lse_batch_stride + h * p.lse_head_stride + i * p.lse_row_stride],
                      D[(b * p.heads_q + h) * p.seqlen_q + i]);
      }
      blk.tile(rows, q_begin, k_begin, partial ? &window : nullptr, dq_tiles.data() + size_t(g) * bm * dp);
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
        const float* tile = dq_tiles.data() + size_t(g) * bm * dp;
        for (int r = 0; r < rows; ++r)
          for (int e = 0; e < d; ++e) acc[r * d + e] += tile[size_t(r) * dp + e];
      }
    turn.store(static_cast<int32_t>(kb + 1), std::memory_order_release);
  }

  // dK_j = scale * dK_j, dV_j: written once, by their only owner.
  St* dko = static_cast<St*>(p.dk);
  St* dvo = static_cast<St*>(p.dv);
  for (int c = 0; c < cols; ++c) {
    St* dks = dko + b * p.dk_batch_stride + (k_begin + c) * p.dk_row_stride + hk * p.dk_head_stride;
    St* dvs = dvo + b * p.dv_batch_stride + (k_begin + c) * p.dv_row_stride + hk * p.dv_head_stride;
    for (int e = 0; e < d; ++e) {
      dks[e] = E::store(p.scale * blk.dk(c, e));
      dvs[e] = E::store(blk.dv(c, e));
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

// Per thread: the key block's state, the dQ tiles waiting for their turn (one per GQA head), which heads made one.
template <class Block>
struct BwdScratch {
  Block block;
  std::vector<float> dq_tiles;
  std::vector<char> head_done;
};

// Step 2 of bwd_typed, the key blocks. Within a part, item = kb * (b * hkv) + (b * hkv + hk). Key blocks of one head
// are handed out in increasing order (the dQ turns rely on it; parts follow each other, so the lowest unfinished
// item still never waits), and the items that run side by side belong to different heads whenever
// b * hkv >= threads, so they seldom wait for each other's turns; with fewer heads the key blocks of a head run as
// a wavefront.
template <DType T, class Block>
void bwd_items(const BwdPlan& plan, const std::vector<int64_t>& key_first, float* dq_region, const float* D_region,
               std::atomic<int32_t>* turn_region) {
  std::vector<BwdScratch<Block>> scratch(
      static_cast<size_t>(std::min<int64_t>(num_threads(), std::max<int64_t>(key_first.back(), 1))));
  parallel_for(key_first.back(), [&](int64_t global, int t) {
    const size_t i = part_of(key_first, global);
    const BwdPart& part = plan.parts[i];
    const int64_t heads = int64_t{part.p.batch} * part.p.heads_kv;
    const int64_t item = global - key_first[i];
    const int64_t kb = item / heads, bh = item % heads;
    BwdScratch<Block>& w = scratch[t];
    bwd_item<T>(part.p, part.l, bh / part.p.heads_kv, bh % part.p.heads_kv, kb, dq_region + part.dq_off,
                D_region + part.d_off, turn_region + part.counter_off, w.block, w.dq_tiles, w.head_done);
  });
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

  // 2. Key blocks (bwd_items): bf16 inputs on the bf16 products where the CPU has them.
  bool done = false;
  if constexpr (T == DType::BF16)
    if (bf16_kernels())
      bwd_items<T, KeyBlockGrads<T, Bf16Dot>>(plan, key_first, dq_region, D_region, turn_region), done = true;
  if (!done) bwd_items<T, KeyBlockGrads<T, float>>(plan, key_first, dq_region, D_region, turn_region);

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
