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

// The types of the step: SA, the type S = Q K^T is summed in (above); A, that of the softmax, P, V and O: fp32,
// or double for the KV-cache's fp32 path, whose outputs are rounded once (kvcache_cpu.cpp).
template <class SA, class A = float>
class QueryBlock {
  static_assert(sizeof(A) <= sizeof(SA), "a double softmax takes double scores");

 public:
  // A block of `rows` queries of head_dim d, at most block_n keys a step, softmax scale `scale`.
  void begin(const Kernels& k, int rows, int d, int block_n, float scale) {
    kern_ = &k;
    rows_ = rows, d_ = d;
    sign_ = scale < 0 ? -1.0f : 1.0f;
    abs_scale_ = std::fabs(static_cast<double>(scale));
    c_ = log2_scale(abs_scale_);
    ldq_ = static_cast<int>(round_up(rows, kVec));
    dp_ = static_cast<int>(round_up(d, kVec));
    // Q_i^T [d][ldq] and K_j [block_n][d] in SA; S^T / P^T [block_n][ldq], O_i [ldq][dp], V_j [block_n][dp] and
    // m, l, corr [ldq] in A. Every array starts on a 64-byte boundary (ldq and dp are multiples of 16, d of 8).
    const size_t qt = size_t(d) * ldq_, kr = size_t(block_n) * d;
    const size_t st = size_t(block_n) * ldq_, o = size_t(ldq_) * dp_, vr = size_t(block_n) * dp_;
    float* base = buf_.get((qt + kr) * (sizeof(SA) / sizeof(float)) + (st + o + vr + 3 * size_t(ldq_)) * (sizeof(A) / sizeof(float)));
    qt_ = reinterpret_cast<SA*>(base), k_ = qt_ + qt;
    st_ = reinterpret_cast<A*>(k_ + kr), o_ = st_ + st, v_ = o_ + o, m_ = v_ + vr, l_ = m_ + ldq_, corr_ = l_ + ldq_;
    std::fill(qt_, qt_ + qt, SA(0));  // the padding columns of Q^T stay 0
    std::fill(o_, o_ + o, A(0));
    std::fill(m_, m_ + ldq_, -std::numeric_limits<A>::infinity());
    std::fill(l_, l_ + ldq_, A(0));
  }

  int padded_dim() const { return dp_; }
  // Query row r, key row c, value row c (d fp32 values; a value row's padding to padded_dim() must be 0).
  void set_query(int r, const float* row) {
    for (int e = 0; e < d_; ++e) qt_[size_t(e) * ldq_ + r] = row[e];
  }
  void set_key(int c, const float* row) { std::copy(row, row + d_, k_ + size_t(c) * d_); }
  void set_value(int c, const float* row) { std::copy(row, row + dp_, v_ + size_t(c) * dp_); }

  // One step over the `keys` keys the caller set, keys k_begin.. of queries q_begin... A window given means the
  // tile is partly masked: its invisible scores become -inf (P = 0) before the softmax.
  void step(int keys, int64_t q_begin, int64_t k_begin, const Window* window) {
    const Kernels& kn = *kern_;
    GemmOf<SA, A> s;  // S^T = sign(scale) K_j Q_i^T (keys x queries)
    s.m = keys, s.n = ldq_, s.k = d_;
    s.a = k_, s.a_rs = d_, s.a_ks = 1;
    s.b = qt_, s.ldb = ldq_;
    s.c = st_, s.ldc = ldq_;
    s.epilogue = Epilogue::kStore, s.alpha = sign_;
    if constexpr (std::is_same_v<SA, float>) kn.gemm(s);
    else if constexpr (std::is_same_v<A, float>) kn.scores_f64(s);
    else kn.gemm_f64(s);
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
    GemmOf<A> pv;  // O_i = corr * O_i + P V_j, P read from P^T
    pv.m = rows_, pv.n = dp_, pv.k = keys;
    pv.a = st_, pv.a_rs = 1, pv.a_ks = ldq_;
    pv.b = v_, pv.ldb = dp_;
    pv.c = o_, pv.ldc = dp_;
    pv.epilogue = Epilogue::kRescaleAdd, pv.row_scale = corr_;
    if constexpr (std::is_same_v<A, float>) kn.gemm(pv);
    else kn.gemm_f64(pv);
  }

  // After the last step: row r saw a key; its output O_r / l_r element e (0 for a row that saw none); its
  // natural-log LSE (-inf for a row that saw none).
  bool seen(int r) const { return l_[r] > 0; }
  double out(int r, int e) const { return seen(r) ? double(o_[size_t(r) * dp_ + e]) / double(l_[r]) : 0.0; }
  double lse(int r) const {
    return seen(r) ? double(m_[r]) * abs_scale_ + std::log(double(l_[r])) : -std::numeric_limits<double>::infinity();
  }

 private:
  const Kernels* kern_ = nullptr;
  Scratch buf_;
  int rows_ = 0, d_ = 0, ldq_ = 0, dp_ = 0;
  float sign_ = 1.0f;
  double abs_scale_ = 1.0;
  Log2Scale c_{};
  SA *qt_ = nullptr, *k_ = nullptr;
  A *st_ = nullptr, *o_ = nullptr, *v_ = nullptr, *m_ = nullptr, *l_ = nullptr, *corr_ = nullptr;
};

}  // namespace flash::cpu
