// libflash/cpu/query_block.h -- one block of query rows through FlashAttention's forward step (Algorithm 1 in
// FlashAttention-2's loop order), the part the forward (flash_cpu.cpp) and the KV-cache forward (kvcache_cpu.cpp)
// share. Per key block K_j, V_j (the caller sets their rows: set_key, set_value), with
// c = |scale| log2(e) (exp(scale x) = 2^(c x) for scale > 0; a negative scale's sign goes into S):
//   S^T = sign(scale) K_j Q_i^T                       (exact scaling: S's only roundings are the dot's own)
//   m'  = max(m, colmax S^T);  P^T = 2^((S^T - m') c);  corr = 2^((m - m') c);  l = corr * l + colsum P^T
//   O_i = corr * O_i + P V_j
// and at the end O_i / l, LSE = |scale| m + ln l. S is kept transposed (keys x queries) so that the softmax's
// row max and row sum over keys run down columns, 16 queries to a vector (kernels.h).
// The softmax and P V are fp32 (P V summed in chunks, kernels_impl.h, and each O element the sum of its key
// blocks' P V, each formed on its own, not one running sum over every key); (S - m') c is formed without rounding
// the product; the normalisation and the LSE are double (O is rounded once, to the output type). S itself is
// summed in double for fp32 inputs (ScoreType, below) and rounded once to fp32. (The KV-cache's fp32 path runs
// the same step in double throughout: QueryBlock's second type.)
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "convert.h"
#include "kernels.h"

namespace flash::cpu {

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

// The type S = Q K^T is summed in. fp32 inputs: double, each product exact and the sum all but exact, then
// one rounding to fp32. S's error is what O's follows (P = 2^((S - m) c)); summed in fp32, even in chunks of 16
// (1.1e-6 rms for d = 128 against the naive baseline's 2.3e-6), it left 2 random cases in 3000 past twice the
// baseline's error (max 1.12 of the bound; in double 0.64, none past). The cost: that product at half the
// vector width. 16-bit inputs: fp32 (the baseline's S is rounded to the 16-bit type, 2^-8 or 2^-11).
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
        const bool two = 2 * t + 1 < keys;
        bf16_->pair_rows_f32(st_ + size_t(2 * t) * ldq_, two ? st_ + size_t(2 * t + 1) * ldq_ : nullptr, ldq_,
                             pp_ + size_t(t) * ldq_);
        bf16_->pair_rows_bf16(vr + size_t(2 * t) * d_, two ? vr + size_t(2 * t + 1) * d_ : nullptr, d_, dp_,
                              vp_ + size_t(t) * dp_);
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

}  // namespace flash::cpu
