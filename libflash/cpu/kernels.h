// libflash/cpu/kernels.h -- the cpu algorithm's arithmetic: the tile operations it is built from, compiled once per
// x86 instruction set level and chosen at run time (kernels.cpp), and the two blocks built from them: QueryBlock, the
// forward step (flash_cpu.cpp's forward and the KV-cache forward, kvcache_cpu.cpp), and KeyBlockGrads, the backward's
// five products for one key block (flash_cpu.cpp's backward).
//
// Everything the tile operations work on is an fp32 tile already in the thread's scratch (the blocks pack and convert
// the inputs): a register-blocked matrix product with the epilogues the FlashAttention step needs, the online softmax
// of Algorithm 1 on a score tile, the backward's P and dS, and the 16-bit -> fp32 conversion of rows. Their
// implementation (kernels.cpp) is plain C++ on GCC/Clang vector types as wide as the level's registers (zmm, ymm, xmm):
// one source, no intrinsics but the AVX512-BF16 products', and the portable build (any other architecture, or an x86
// without AVX2) runs the same code. Results are a function of the
// inputs and the level only: no reduction order depends on threads or on where a tile sits.
//
// kernels.cpp's level copies use only the declarations of the first part: the blocks below are templates and inline
// functions that only the callers' translation units (compiled for the baseline) instantiate.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "../params.h"
#include "convert.h"

namespace flash::cpu {

// ---- Tile kernels (kernels.cpp) --------------------------------------------------------------------------------

constexpr int kVec = 16;  // tile widths that are GEMM columns are padded to a multiple of it (a zmm of floats)

inline int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

enum class Epilogue : int32_t {
  kStore,       // C = alpha * (A B)
  kAdd,         // C += A B
  kRescaleAdd,  // C = row_scale[r] * C + A B   (the forward's O update: one rounding per element)
};

// C (m x n) op= A (m x k) B (k x n), A and B of type T, C of type C. Every element of A B is the same sequence
// of fused multiply-adds over kk = 0 .. k-1 whatever the tile shape (one chain, or with `chunk` > 0 chunks of that
// many terms, each summed from 0 and added to the total in order): so a product recomputed elsewhere (the
// backward's S of 16-bit inputs) is bit for bit the first one, and a block's sum is formed on its own before it
// meets C (blocked summation). A double product with an fp32 C (the fp32 inputs' scores) only stores, rounding once.
template <class T, class C = T>
struct GemmOf {
  int m = 0, n = 0, k = 0;     // n: a multiple of kVec
  int chunk = 0;               // > 0: sum k in chunks of this many terms (blocked summation)
  const T* a = nullptr;        // A(r, kk) = a[r * a_rs + kk * a_ks]
  int64_t a_rs = 0, a_ks = 0;
  const T* b = nullptr;        // B(kk, c) = b[kk * ldb + c]
  int64_t ldb = 0;
  C* c = nullptr;              // C(r, c) = c[r * ldc + c]
  int64_t ldc = 0;
  Epilogue epilogue = Epilogue::kStore;
  float alpha = 1.0f;
  const C* row_scale = nullptr;
};
using Gemm = GemmOf<float>;

// The softmax scale times log2(e), as hi + lo (lo the rounding error of hi): exp(scale x) = 2^(x (hi + lo)).
struct Log2Scale {
  float hi, lo;
};
inline Log2Scale log2_scale(double scale) {
  const double c = scale * 1.4426950408889634;
  const float hi = static_cast<float>(c);
  return {hi, static_cast<float>(c - hi)};
}

struct Kernels {
  const char* name;  // "avx512", "avx2", "portable"; "sve512", "sve256", "neon" on AArch64

  void (*gemm)(const Gemm& g);
  void (*gemm_f64)(const GemmOf<double>& g);
  void (*scores_f64)(const GemmOf<double, float>& g);  // kStore only

  // The forward step's online softmax, on a tile S^T of `keys` rows (keys) by `cols` columns (queries; a multiple
  // of kVec) with row stride lds: unscaled scores (the scale's sign applied), masked entries -inf, c = |scale|
  // log2(e). Per column q: m' = max(m[q], max_k S[k][q]); corr[q] = 2^((m[q] - m') c);
  // S[k][q] <- P = 2^((S[k][q] - m') c); l[q] = corr[q] * l[q] + sum_k P. A column that has seen no visible key
  // keeps m = -inf, l = 0 and gets P = 0, corr = 0 (never a NaN from -inf - -inf). l is double (kernels.cpp).
  void (*online_softmax)(float* s, int64_t lds, int keys, int cols, Log2Scale c, float* m, double* l, float* corr);
  void (*online_softmax_f64)(double* s, int64_t lds, int keys, int cols, Log2Scale c, double* m, double* l,
                             double* corr);  // the same in double (the KV-cache's fp32 path)

  // The backward's P = 2^(S c - LSE log2(e)) on a tile of `rows` query rows by `cols` keys (a multiple of kVec),
  // S unscaled as above, the row's LSE log2(e) given as hi + lo (hi = +inf for a row that saw no key: P = 0).
  void (*probabilities)(float* s, int64_t lds, int rows, int cols, Log2Scale c, const float* lse_hi,
                        const float* lse_lo);

  // The backward's dS = P o (dP - D), in place of dP, rows x cols as above.
  void (*softmax_grad)(float* dp, const float* p, int64_t ld, int rows, int cols, const float* D);

  // dst[0 .. n) = the fp32 values of n fp16 or bf16 elements (exact); dst[n .. n_pad) = 0.
  void (*widen)(const uint16_t* src, DType t, int n, int n_pad, float* dst);
};

// The fastest level this CPU runs (checked once).
const Kernels& kernels();

// bf16 products on AVX512-BF16 (kernels.cpp's avx512bf16 level). Operands are bf16 pairs along k in 32-bit words:
// A(r, t) = a[r * a_rs + t * a_ks] holds (A(r, 2t), A(r, 2t + 1)) in its (low, high) halves, B(t, c) = b[t * ldb + c]
// holds (B(2t, c), B(2t + 1, c)); k counts pairs. The products are exact, the sums fp32 in one chain (the bf16
// inputs' error budget is the baseline's, which rounds S to bf16).
struct Bf16Kernels {
  void (*gemm)(const GemmOf<uint32_t, float>& g);
  // out[c] = r0[c] | r1[c] << 16 for c < n (r1 null: 0), 0 up to n_pad.
  void (*pair_rows_bf16)(const uint16_t* r0, const uint16_t* r1, int n, int n_pad, uint32_t* out);
  // The same from fp32 rows rounded to bf16 (to nearest even); n a multiple of kVec.
  void (*pair_rows_f32)(const float* r0, const float* r1, int n, uint32_t* out);
  // One fp32 row rounded to bf16 (to nearest even); n a multiple of kVec.
  void (*round_row_f32)(const float* src, int n, uint16_t* dst);

  // Rows 2u and 2u + 1 of a block of `rows` rows of ld elements (the second absent past the block), paired as above: the
  // k-pairs of the products whose k runs along the block's rows.
  void pair_block_rows(const uint16_t* x, int ld, int u, int rows, int n_pad, uint32_t* out) const {
    pair_rows_bf16(x + size_t(2 * u) * ld, 2 * u + 1 < rows ? x + size_t(2 * u + 1) * ld : nullptr, ld, n_pad, out);
  }
  void pair_block_rows(const float* x, int ld, int u, int rows, uint32_t* out) const {
    pair_rows_f32(x + size_t(2 * u) * ld, 2 * u + 1 < rows ? x + size_t(2 * u + 1) * ld : nullptr, ld, out);
  }
};

// The bf16 kernels, or null where the CPU lacks AVX512-BF16 (bf16 inputs are then widened to fp32).
const Bf16Kernels* bf16_kernels();

// ---- QueryBlock: the forward step ------------------------------------------------------------------------------
//
// One block of query rows through FlashAttention's forward step (Algorithm 1 in FlashAttention-2's loop order), the
// part the forward (flash_cpu.cpp) and the KV-cache forward (kvcache_cpu.cpp) share. Per key block K_j, V_j (the
// caller sets their rows: set_key, set_value), with c = |scale| log2(e) (exp(scale x) = 2^(c x) for scale > 0; a
// negative scale's sign goes into S):
//   S^T = sign(scale) K_j Q_i^T                       (exact scaling: S's only roundings are the dot's own)
//   m'  = max(m, colmax S^T);  P^T = 2^((S^T - m') c);  corr = 2^((m - m') c);  l = corr * l + colsum P^T
//   O_i = corr * O_i + P V_j
// and at the end O_i / l, LSE = |scale| m + ln l. S is kept transposed (keys x queries) so that the softmax's
// row max and row sum over keys run down columns, 16 queries to a vector (Kernels::online_softmax).
// The softmax and P V are fp32 (P V summed in chunks, kPvChunk, and each O element the sum of its key
// blocks' P V, each formed on its own, not one running sum over every key); (S - m') c is formed without rounding
// the product; the normalisation and the LSE are double (O is rounded once, to the output type). S itself is
// summed in double for fp32 inputs (ScoreType, below) and rounded once to fp32. (The KV-cache's fp32 path runs
// the same step in double throughout: QueryBlock's second type.)

// A 64-byte-aligned float array that keeps its storage between uses (one per thread, reused by every item).
class Scratch {
 public:
  float* get(size_t n) {
    if (n + kVec > v_.size()) v_.resize(n + kVec);
    const uintptr_t a = reinterpret_cast<uintptr_t>(v_.data());
    return v_.data() + ((64 - a % 64) % 64) / sizeof(float);
  }
  template <class X>
  X* get_as(size_t n) {
    static_assert(sizeof(X) % sizeof(float) == 0, "whole floats");
    return reinterpret_cast<X*>(get(n * (sizeof(X) / sizeof(float))));
  }

 private:
  std::vector<float> v_;
};

// Row `src` of head_dim d elements of dtype T, as fp32 into dst[0, d), zeros in dst[d, d_pad).
template <DType T>
inline void load_row(const Kernels& k, const typename Elem<T>::storage* src, int d, int d_pad, float* dst) {
  if constexpr (T == DType::FP32) {
    std::memcpy(dst, src, sizeof(float) * d);
    for (int e = d; e < d_pad; ++e) dst[e] = 0.0f;
  } else {
    k.widen(src, T, d, d_pad, dst);
  }
}

// The window part of the mask (params.h): key j is visible to query i iff
// (left < 0 || j >= i + diag_offset - left) && (right < 0 || j <= i + diag_offset + right).
struct Window {
  int64_t diag_offset;
  int64_t left, right;
  // The queries in [q_begin, q_end) that see key j: [*lo, *hi) (possibly empty).
  void rows_seeing(int64_t j, int64_t q_begin, int64_t q_end, int64_t* lo, int64_t* hi) const {
    *lo = right >= 0 ? std::max(q_begin, j - diag_offset - right) : q_begin;
    *hi = left >= 0 ? std::min(q_end, j - diag_offset + left + 1) : q_end;
  }
  // The keys in [k_begin, k_end) that query i sees: [*lo, *hi).
  void keys_seen(int64_t i, int64_t k_begin, int64_t k_end, int64_t* lo, int64_t* hi) const {
    *lo = left >= 0 ? std::max(k_begin, i + diag_offset - left) : k_begin;
    *hi = right >= 0 ? std::min(k_end, i + diag_offset + right + 1) : k_end;
  }
};

// The type the forward's S = Q K^T is summed in. fp32 inputs: double, each product exact and the sum all but exact,
// then one rounding to fp32. S's error is what O's follows (P = 2^((S - m) c)); summed in fp32, even in chunks of 16
// (1.1e-6 rms for d = 128 against the naive baseline's 2.3e-6), it left random cases past twice the baseline's error:
// with everything else as now, 2 of 1004 fp32 forward cases (LIBFLASH_TEST_SEED 1..75), worst 1.65 of the bound (d 192,
// scale 1), p99 0.76; in double none, worst 0.55, p99 0.36 (of 16000 more: chunks of 16, 4 past, worst 1.83 -- at small
// d a chunk is the whole sum, the baseline's own -- double none, worst 0.63). The cost: that product at half the vector
// width (the fp32 forward 1.36x slower: docs/kernels.md). 16-bit inputs: fp32 (the baseline's S is rounded to the
// 16-bit type, 2^-8 or 2^-11). The backward's S is fp32 for every input type (KeyBlockGrads).
template <DType T>
using ScoreType = std::conditional_t<T == DType::FP32, double, float>;

// SA for bf16 inputs where the CPU has AVX512-BF16: S = Q K^T and P V on the bf16 kernels (kernels.h), with P
// rounded to bf16 for the second product (as the GPU kernels do; the baseline rounds P to bf16 too).
struct Bf16Dot {};

// The types of the step: T, the inputs' dtype; SA, the type S = Q K^T is summed in (above, or Bf16Dot); A, that of
// the softmax, P, V and O: fp32, or double for the KV-cache's fp32 path, whose outputs are rounded once
// (kvcache_cpu.cpp).
// P V's chunks (Gemm::chunk) in fp32: with P_max = 1 every P V sum starts from a term as large as the result, and
// each of the others' additions rounds at the scale of l |O|, where the baseline's normalised sum rounds at |O|'s
// (up to 2x finer). In chunks of 8 fewer additions meet the large partial sum: the worst of 2100 random fp32 cases
// fell from 0.75 to 0.52 of the bound (p99 0.39 -> 0.36), for 14% of P V's speed (chunks of 4: 0.52, -27%).
constexpr int kPvChunk = 8;

template <DType T, class SA, class A = float>
class QueryBlock {
  using St = typename Elem<T>::storage;
  static constexpr bool kBf16 = std::is_same_v<SA, Bf16Dot>;
  using Q = std::conditional_t<kBf16, uint32_t, SA>;  // element of Q_i^T (a bf16 pair along d for Bf16Dot)
  static_assert(!kBf16 || (T == DType::BF16 && std::is_same_v<A, float>), "bf16 products take bf16 inputs");
  static_assert(kBf16 || sizeof(A) <= sizeof(SA), "a double softmax takes double scores");

 public:
  // A block of `rows` queries of head_dim d, at most block_n keys a step, softmax scale `scale`.
  void begin(const Kernels& k, int rows, int d, int block_n, float scale) {
    kern_ = &k;
    if constexpr (kBf16) bf16_ = bf16_kernels();
    rows_ = rows, d_ = d;
    sign_ = scale < 0 ? -1.0f : 1.0f;
    abs_scale_ = std::fabs(static_cast<double>(scale));
    c_ = log2_scale(abs_scale_);
    ldq_ = static_cast<int>(round_up(rows, kVec));
    dp_ = static_cast<int>(round_up(d, kVec));
    const int qd = kBf16 ? d / 2 : d;                  // Q^T's rows
    const int pairs = kBf16 ? (block_n + 1) / 2 : 0;   // rows of P and V as bf16 pairs
    // Every array starts on a 64-byte boundary (ldq and dp are multiples of 16, d of 8), in floats:
    const size_t qt = size_t(qd) * ldq_ * sizeof(Q) / 4;             // Q_i^T
    const size_t kr = size_t(block_n) * d * (kBf16 ? 2 : sizeof(SA)) / 4;  // K_j's rows
    const size_t st = size_t(block_n) * ldq_ * sizeof(A) / 4;       // S^T, then P^T
    const size_t o = size_t(ldq_) * dp_ * sizeof(A) / 4;            // O_i
    const size_t vr = size_t(block_n) * dp_ * (kBf16 ? 2 : sizeof(A)) / 4;  // V_j's rows
    const size_t pp = size_t(pairs) * ldq_, vp = size_t(pairs) * dp_;  // P and V_j as pairs (Bf16Dot)
    const size_t stats = size_t(ldq_) * (2 * sizeof(A) + sizeof(double)) / 4;  // m, corr; l (double)
    float* base = buf_.get(qt + kr + st + o + vr + pp + vp + stats + dp_);
    qt_ = reinterpret_cast<Q*>(base);
    k_ = base + qt;
    st_ = reinterpret_cast<A*>(base + qt + kr);
    o_ = st_ + size_t(block_n) * ldq_;
    v_ = o_ + size_t(ldq_) * dp_;
    float* next = base + qt + kr + st + o + vr;
    pp_ = reinterpret_cast<uint32_t*>(next), vp_ = pp_ + pp;
    l_ = reinterpret_cast<double*>(next + pp + vp);
    m_ = reinterpret_cast<A*>(l_ + ldq_), corr_ = m_ + ldq_;
    row_ = next + pp + vp + stats;
    std::fill(qt_, qt_ + size_t(qd) * ldq_, Q(0));  // the padding columns of Q^T stay 0
    std::fill(o_, o_ + size_t(ldq_) * dp_, A(0));
    std::fill(m_, m_ + ldq_, -std::numeric_limits<A>::infinity());
    std::fill(l_, l_ + ldq_, 0.0);
  }

  int padded_dim() const { return dp_; }

  // Query row r, key row c, value row c of the current step: d elements of the inputs' dtype at src.
  void set_query(int r, const St* src) {
    if constexpr (kBf16) {
      for (int t = 0; t < d_ / 2; ++t) std::memcpy(&qt_[size_t(t) * ldq_ + r], src + 2 * t, 4);
    } else {
      load_row<T>(*kern_, src, d_, d_, row_);
      for (int e = 0; e < d_; ++e) qt_[size_t(e) * ldq_ + r] = row_[e];
    }
  }
  void set_key(int c, const St* src) {
    if constexpr (kBf16) {
      std::memcpy(static_cast<uint16_t*>(k_) + size_t(c) * d_, src, sizeof(St) * d_);
    } else {
      load_row<T>(*kern_, src, d_, d_, row_);
      std::copy(row_, row_ + d_, static_cast<SA*>(k_) + size_t(c) * d_);
    }
  }
  void set_value(int c, const St* src) {
    if constexpr (kBf16) {
      std::memcpy(reinterpret_cast<uint16_t*>(v_) + size_t(c) * d_, src, sizeof(St) * d_);
    } else if constexpr (std::is_same_v<A, float>) {
      load_row<T>(*kern_, src, d_, dp_, v_ + size_t(c) * dp_);
    } else {
      load_row<T>(*kern_, src, d_, dp_, row_);
      std::copy(row_, row_ + dp_, v_ + size_t(c) * dp_);
    }
  }

  // One step over the `keys` keys the caller set, keys k_begin.. of queries q_begin... A window given means the
  // tile is partly masked: its invisible scores become -inf (P = 0) before the softmax.
  void step(int keys, int64_t q_begin, int64_t k_begin, const Window* window) {
    const Kernels& kn = *kern_;
    // S^T = sign(scale) K_j Q_i^T (keys x queries)
    if constexpr (kBf16) {
      GemmOf<uint32_t, float> s;
      s.m = keys, s.n = ldq_, s.k = d_ / 2;
      s.a = static_cast<const uint32_t*>(k_), s.a_rs = d_ / 2, s.a_ks = 1;
      s.b = qt_, s.ldb = ldq_;
      s.c = st_, s.ldc = ldq_;
      s.epilogue = Epilogue::kStore, s.alpha = sign_;
      bf16_->gemm(s);
    } else {
      GemmOf<SA, A> s;
      s.m = keys, s.n = ldq_, s.k = d_;
      s.a = static_cast<const SA*>(k_), s.a_rs = d_, s.a_ks = 1;
      s.b = qt_, s.ldb = ldq_;
      s.c = st_, s.ldc = ldq_;
      s.epilogue = Epilogue::kStore, s.alpha = sign_;
      if constexpr (std::is_same_v<SA, float>) kn.gemm(s);
      else if constexpr (std::is_same_v<A, float>) kn.scores_f64(s);
      else kn.gemm_f64(s);
    }
    if (window) {
      for (int c = 0; c < keys; ++c) {
        int64_t lo, hi;
        window->rows_seeing(k_begin + c, q_begin, q_begin + rows_, &lo, &hi);
        A* row = st_ + size_t(c) * ldq_;
        if (hi <= lo) lo = hi = q_begin;
        std::fill(row, row + (lo - q_begin), -std::numeric_limits<A>::infinity());
        std::fill(row + (hi - q_begin), row + rows_, -std::numeric_limits<A>::infinity());
      }
    }
    if constexpr (std::is_same_v<A, float>) kn.online_softmax(st_, ldq_, keys, ldq_, c_, m_, l_, corr_);
    else kn.online_softmax_f64(st_, ldq_, keys, ldq_, c_, m_, l_, corr_);
    // O_i = corr * O_i + P V_j, P read from P^T
    if constexpr (kBf16) {
      const int pairs = (keys + 1) / 2;
      const uint16_t* vr = reinterpret_cast<const uint16_t*>(v_);
      for (int t = 0; t < pairs; ++t) {
        bf16_->pair_block_rows(st_, ldq_, t, keys, pp_ + size_t(t) * ldq_);
        bf16_->pair_block_rows(vr, d_, t, keys, dp_, vp_ + size_t(t) * dp_);
      }
      GemmOf<uint32_t, float> pv;
      pv.m = rows_, pv.n = dp_, pv.k = pairs;
      pv.a = pp_, pv.a_rs = 1, pv.a_ks = ldq_;
      pv.b = vp_, pv.ldb = dp_;
      pv.c = o_, pv.ldc = dp_;
      pv.epilogue = Epilogue::kRescaleAdd, pv.row_scale = corr_;
      bf16_->gemm(pv);
    } else {
      GemmOf<A> pv;
      pv.m = rows_, pv.n = dp_, pv.k = keys;
      pv.chunk = std::is_same_v<A, float> ? kPvChunk : 0;
      pv.a = st_, pv.a_rs = 1, pv.a_ks = ldq_;
      pv.b = v_, pv.ldb = dp_;
      pv.c = o_, pv.ldc = dp_;
      pv.epilogue = Epilogue::kRescaleAdd, pv.row_scale = corr_;
      if constexpr (std::is_same_v<A, float>) kn.gemm(pv);
      else kn.gemm_f64(pv);
    }
  }

  // After the last step: row r saw a key; its output O_r / l_r element e (0 for a row that saw none); its
  // natural-log LSE (-inf for a row that saw none).
  bool seen(int r) const { return l_[r] > 0; }
  double out(int r, int e) const { return seen(r) ? double(o_[size_t(r) * dp_ + e]) / l_[r] : 0.0; }
  double lse(int r) const {
    return seen(r) ? double(m_[r]) * abs_scale_ + std::log(l_[r]) : -std::numeric_limits<double>::infinity();
  }

 private:
  const Kernels* kern_ = nullptr;
  const Bf16Kernels* bf16_ = nullptr;
  Scratch buf_;
  int rows_ = 0, d_ = 0, ldq_ = 0, dp_ = 0;
  float sign_ = 1.0f;
  double abs_scale_ = 1.0;
  Log2Scale c_{};
  Q* qt_ = nullptr;
  void* k_ = nullptr;  // SA [block_n][d], or bf16 for Bf16Dot
  A *st_ = nullptr, *o_ = nullptr, *m_ = nullptr, *corr_ = nullptr;
  double* l_ = nullptr;
  A* v_ = nullptr;     // A [block_n][dp], or bf16 [block_n][d] for Bf16Dot
  uint32_t *pp_ = nullptr, *vp_ = nullptr;
  float* row_ = nullptr;  // one widened input row
};

// ---- KeyBlockGrads: the backward's key block -------------------------------------------------------------------
//
// One key block K_j, V_j through FlashAttention's backward (flash_cpu.cpp's bwd_item): per query tile Q_i, dO_i (one
// query head's rows of a query block), with c = |scale| log2(e),
//   S  = sign(scale) Q_i K_j^T              (16-bit inputs: the forward's S bit for bit, the same product)
//   P  = 2^(S c - LSE_i log2(e))            0 where masked and past the block's keys
//   dV_j += P^T dO_i
//   dP = dO_i V_j^T,  dS = P o (dP - D_i)
//   dK_j += dS^T Q_i                        (times scale when written)
//   dQ tile = dS K_j                         (times scale at the very end: flash_cpu.cpp)
// The five products run on the tile kernels above; dK_j and dV_j stay here, fp32, for the item's whole life.
// SA: float (fp32 products with fp32 sums for every input type) or Bf16Dot (bf16 inputs on AVX512-BF16: every
// product on vdpbf16ps, P and dS rounded to bf16 for theirs, as the GPU kernels and the baseline do). For fp32
// inputs S is not the forward's bit for bit (the forward sums it in double, ScoreType), so P = 2^(S c - LSE) carries
// S's fp32 rounding against the forward's LSE; the gradients' bound absorbs it with room (fp32 cases of seeds 1..75:
// worst 0.21 of the bound, p99 0.08; with the forward's double S 0.21, p99 0.07), for 23% less backward time.

template <DType T, class SA>
class KeyBlockGrads {
  using St = typename Elem<T>::storage;
  static constexpr bool kBf16 = std::is_same_v<SA, Bf16Dot>;
  static_assert(!kBf16 || T == DType::BF16, "bf16 products take bf16 inputs");
  static_assert(kBf16 || std::is_same_v<SA, float>, "fp32 products or bf16 ones");

 public:
  // A key block of `keys` keys (at most block_n), head_dim d, query tiles of at most block_m rows.
  void begin(const Kernels& k, int d, int block_m, int block_n, int keys, float scale) {
    kern_ = &k;
    if constexpr (kBf16) bf16_ = bf16_kernels();
    d_ = d, keys_ = keys;
    sign_ = scale < 0 ? -1.0f : 1.0f;
    c_ = log2_scale(std::fabs(static_cast<double>(scale)));
    dp_ = static_cast<int>(round_up(d, kVec));
    ldn_ = static_cast<int>(round_up(block_n, kVec));
    rows_cap_ = block_m, half_n_ = (block_n + 1) / 2;
    const size_t bm = size_t(block_m), bn = size_t(block_n), half_m = (bm + 1) / 2, half_n = size_t(half_n_);
    // In floats; every array starts on a 64-byte boundary (dp and ldn are multiples of 16, d of 8, the blocks 64 or
    // 128). K_j^T and V_j^T; K_j's rows (B of dQ); Q_i's and dO_i's rows (A of S and dP; B of dK and dV).
    size_t kt, vt, kr, qr;
    if constexpr (kBf16) {
      kt = vt = size_t(d / 2) * ldn_;               // bf16 pairs along d
      kr = half_n * dp_ + bn * d / 2;               // K_j paired along keys; K_j's rows as they are
      qr = bm * d / 2 + half_m * dp_;               // rows as they are; paired along queries
    } else {
      kt = vt = size_t(d) * ldn_;                   // fp32, zero past the block's keys
      kr = bn * dp_;                                // fp32 rows, zero past d
      qr = bm * dp_;
    }
    const size_t pairs = kBf16 ? half_m * ldn_ + bm * ldn_ / 2 : 0;  // P, dS paired along queries; dS in bf16
    float* base = buf_.get(kt + vt + kr + 2 * qr + 2 * bm * ldn_ + 2 * bn * dp_ + 3 * bm + 2 * pairs);
    kt_ = base, vt_ = kt_ + kt, kr_ = vt_ + vt, q_ = kr_ + kr, do_ = q_ + qr;
    s_ = do_ + qr, ds_ = s_ + bm * ldn_, dk_ = ds_ + bm * ldn_, dv_ = dk_ + bn * dp_;
    lse_hi_ = dv_ + bn * dp_, lse_lo_ = lse_hi_ + bm, D_ = lse_lo_ + bm;
    pp_ = reinterpret_cast<uint32_t*>(D_ + bm), pds_ = pp_ + pairs;
    std::fill(kt_, kt_ + kt + vt, 0.0f);  // zero past the block's keys (all-zero bits are 0 in every type here)
    std::fill(dk_, dk_ + 2 * bn * dp_, 0.0f);
  }

  int padded_dim() const { return dp_; }

  // Key row c of K_j and V_j (d elements of the inputs' dtype each); keys_done() once all are set.
  void set_key(int c, const St* k, const St* v) {
    if constexpr (kBf16) {
      uint32_t* kt = reinterpret_cast<uint32_t*>(kt_);
      uint32_t* vt = reinterpret_cast<uint32_t*>(vt_);
      for (int t = 0; t < d_ / 2; ++t) {
        std::memcpy(&kt[size_t(t) * ldn_ + c], k + 2 * t, 4);
        std::memcpy(&vt[size_t(t) * ldn_ + c], v + 2 * t, 4);
      }
      std::memcpy(key_rows() + size_t(c) * d_, k, sizeof(St) * d_);
    } else {
      float* row = kr_ + size_t(c) * dp_;  // K_j's row, zero past d
      load_row<T>(*kern_, k, d_, dp_, row);
      for (int e = 0; e < d_; ++e) kt_[size_t(e) * ldn_ + c] = row[e];
      float* vrow = ds_;  // free until the first tile
      load_row<T>(*kern_, v, d_, dp_, vrow);
      for (int e = 0; e < d_; ++e) vt_[size_t(e) * ldn_ + c] = vrow[e];
    }
  }
  void keys_done() {
    if constexpr (kBf16) {
      const uint16_t* rows = key_rows();
      for (int t = 0; t < (keys_ + 1) / 2; ++t)
        bf16_->pair_block_rows(rows, d_, t, keys_, dp_, reinterpret_cast<uint32_t*>(kr_) + size_t(t) * dp_);
    }
  }

  // Query row r of the next tile: Q_i's and dO_i's rows, the forward's LSE and D = rowsum(dO o O).
  void set_query(int r, const St* q, const St* dO, float lse, float D) {
    if constexpr (kBf16) {
      std::memcpy(reinterpret_cast<uint16_t*>(q_) + size_t(r) * d_, q, sizeof(St) * d_);
      std::memcpy(reinterpret_cast<uint16_t*>(do_) + size_t(r) * d_, dO, sizeof(St) * d_);
    } else {
      load_row<T>(*kern_, q, d_, dp_, q_ + size_t(r) * dp_);
      load_row<T>(*kern_, dO, d_, dp_, do_ + size_t(r) * dp_);
    }
    // LSE log2(e) as hi + lo, so S c - LSE log2(e) loses nothing to the conversion; a row that saw no key: P = 0.
    if (lse == -std::numeric_limits<float>::infinity()) {
      lse_hi_[r] = std::numeric_limits<float>::infinity(), lse_lo_[r] = 0.0f;
    } else {
      const double lse2 = double(lse) * 1.4426950408889634;
      lse_hi_[r] = static_cast<float>(lse2);
      lse_lo_[r] = static_cast<float>(lse2 - double(lse_hi_[r]));
    }
    D_[r] = D;
  }

  // The tile's products, for its `rows` queries from q_begin against the block's keys from k_begin; a window
  // given means the tile is partly masked. Writes the dQ tile (unscaled) to dq [rows][padded_dim()].
  void tile(int rows, int64_t q_begin, int64_t k_begin, const Window* window, float* dq) {
    const Kernels& kn = *kern_;
    const int d = d_, dp = dp_, ldn = ldn_, keys = keys_;
    // S = sign(scale) Q_i K_j^T.
    if constexpr (kBf16) {
      run_bf16(rows, ldn, d / 2, reinterpret_cast<const uint32_t*>(q_), d / 2, 1, reinterpret_cast<uint32_t*>(kt_), ldn,
               s_, ldn, Epilogue::kStore, sign_);
    } else {
      Gemm g;
      g.m = rows, g.n = ldn, g.k = d;
      g.a = q_, g.a_rs = dp, g.a_ks = 1;
      g.b = kt_, g.ldb = ldn;
      g.c = s_, g.ldc = ldn;
      g.epilogue = Epilogue::kStore, g.alpha = sign_;
      kn.gemm(g);
    }
    // Masked scores and the padding keys past the block: -inf, so P = 0 there.
    const int64_t k_end = k_begin + keys;
    for (int r = 0; r < rows; ++r) {
      int64_t lo = k_begin, hi = k_end;
      if (window) window->keys_seen(q_begin + r, k_begin, k_end, &lo, &hi);
      if (hi <= lo) lo = hi = k_begin;
      float* sr = s_ + size_t(r) * ldn;
      std::fill(sr, sr + (lo - k_begin), -std::numeric_limits<float>::infinity());
      std::fill(sr + (hi - k_begin), sr + ldn, -std::numeric_limits<float>::infinity());
    }
    kn.probabilities(s_, ldn, rows, ldn, c_, lse_hi_, lse_lo_);  // P = 2^(S c - LSE log2(e))

    if constexpr (kBf16) {
      // Rows of P, dS, Q_i, dO_i paired along queries (the k of dV's and dK's products); dS in bf16 for dQ's.
      const int half = (rows + 1) / 2;
      const uint16_t* qrows = reinterpret_cast<const uint16_t*>(q_);
      const uint16_t* dorows = reinterpret_cast<const uint16_t*>(do_);
      uint32_t* q_pairs = reinterpret_cast<uint32_t*>(q_) + size_t(rows_cap()) * d / 2;
      uint32_t* do_pairs = reinterpret_cast<uint32_t*>(do_) + size_t(rows_cap()) * d / 2;
      for (int u = 0; u < half; ++u) {
        bf16_->pair_block_rows(s_, ldn, u, rows, pp_ + size_t(u) * ldn);
        bf16_->pair_block_rows(qrows, d, u, rows, dp, q_pairs + size_t(u) * dp);
        bf16_->pair_block_rows(dorows, d, u, rows, dp, do_pairs + size_t(u) * dp);
      }
      // dV_j += P^T dO_i
      run_bf16(keys, dp, half, pp_, 1, ldn, do_pairs, dp, dv_, dp, Epilogue::kAdd, 1.0f);
      // dP = dO_i V_j^T, dS = P o (dP - D)
      run_bf16(rows, ldn, d / 2, reinterpret_cast<const uint32_t*>(do_), d / 2, 1, reinterpret_cast<uint32_t*>(vt_), ldn,
               ds_, ldn, Epilogue::kStore, 1.0f);
      kn.softmax_grad(ds_, s_, ldn, rows, ldn, D_);
      uint16_t* ds16 = reinterpret_cast<uint16_t*>(pds_ + size_t(half) * ldn);
      for (int u = 0; u < half; ++u) bf16_->pair_block_rows(ds_, ldn, u, rows, pds_ + size_t(u) * ldn);
      for (int r = 0; r < rows; ++r) bf16_->round_row_f32(ds_ + size_t(r) * ldn, ldn, ds16 + size_t(r) * ldn);
      // dK_j += dS^T Q_i
      run_bf16(keys, dp, half, pds_, 1, ldn, q_pairs, dp, dk_, dp, Epilogue::kAdd, 1.0f);
      // dQ tile = dS K_j
      run_bf16(rows, dp, (keys + 1) / 2, reinterpret_cast<const uint32_t*>(ds16), ldn / 2, 1,
               reinterpret_cast<uint32_t*>(kr_), dp, dq, dp, Epilogue::kStore, 1.0f);
    } else {
      const float* qp = q_;   // Q_i's rows
      const float* dop = do_;  // dO_i's rows
      Gemm g;  // dV_j += P^T dO_i
      g.m = keys, g.n = dp, g.k = rows;
      g.a = s_, g.a_rs = 1, g.a_ks = ldn;
      g.b = dop, g.ldb = dp;
      g.c = dv_, g.ldc = dp;
      g.epilogue = Epilogue::kAdd;
      kn.gemm(g);
      g = Gemm{};  // dP = dO_i V_j^T
      g.m = rows, g.n = ldn, g.k = d;
      g.a = dop, g.a_rs = dp, g.a_ks = 1;
      g.b = vt_, g.ldb = ldn;
      g.c = ds_, g.ldc = ldn;
      kn.gemm(g);
      kn.softmax_grad(ds_, s_, ldn, rows, ldn, D_);  // dS = P o (dP - D)
      g = Gemm{};  // dK_j += dS^T Q_i
      g.m = keys, g.n = dp, g.k = rows;
      g.a = ds_, g.a_rs = 1, g.a_ks = ldn;
      g.b = qp, g.ldb = dp;
      g.c = dk_, g.ldc = dp;
      g.epilogue = Epilogue::kAdd;
      kn.gemm(g);
      g = Gemm{};  // dQ tile = dS K_j
      g.m = rows, g.n = dp, g.k = keys;
      g.a = ds_, g.a_rs = ldn, g.a_ks = 1;
      g.b = kr_, g.ldb = dp;
      g.c = dq, g.ldc = dp;
      kn.gemm(g);
    }
  }

  // After the last tile: dK_j (unscaled) and dV_j, element e of key c.
  float dk(int c, int e) const { return dk_[size_t(c) * dp_ + e]; }
  float dv(int c, int e) const { return dv_[size_t(c) * dp_ + e]; }

 private:
  int rows_cap() const { return rows_cap_; }
  uint16_t* key_rows() { return reinterpret_cast<uint16_t*>(reinterpret_cast<uint32_t*>(kr_) + size_t(half_n_) * dp_); }
  void run_bf16(int m, int n, int k, const uint32_t* a, int64_t a_rs, int64_t a_ks, const uint32_t* b, int64_t ldb,
                float* c, int64_t ldc, Epilogue e, float alpha) const {
    GemmOf<uint32_t, float> g;
    g.m = m, g.n = n, g.k = k;
    g.a = a, g.a_rs = a_rs, g.a_ks = a_ks;
    g.b = b, g.ldb = ldb;
    g.c = c, g.ldc = ldc;
    g.epilogue = e, g.alpha = alpha;
    bf16_->gemm(g);
  }

  const Kernels* kern_ = nullptr;
  const Bf16Kernels* bf16_ = nullptr;
  Scratch buf_;
  int d_ = 0, keys_ = 0, dp_ = 0, ldn_ = 0, rows_cap_ = 0, half_n_ = 0;
  float sign_ = 1.0f;
  Log2Scale c_{};
  float *kt_ = nullptr, *vt_ = nullptr, *kr_ = nullptr, *q_ = nullptr, *do_ = nullptr;
  float *s_ = nullptr, *ds_ = nullptr, *dk_ = nullptr, *dv_ = nullptr;
  float *lse_hi_ = nullptr, *lse_lo_ = nullptr, *D_ = nullptr;
  uint32_t *pp_ = nullptr, *pds_ = nullptr;
};

}  // namespace flash::cpu
