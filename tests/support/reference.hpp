// tests/support/reference.hpp -- the fp64 reference and the "naive same-dtype" baseline.
//
// Header-only, depends on flash.h for the tensor descriptor only: the test suite uses it (fa-bench's --check
// has its own, cli/src/reference.cpp). It shares no code with the library's backends: the mask rule, the
// dtype conversions and the softmax are written again here, directly from their definitions.
//
//   reference_attention:   O and LSE in double from the (already rounded) inputs, S and P materialised.
//   naive_same_dtype:      standard attention as a framework runs it in the input dtype: S rounded to the
//                          dtype, softmax in fp32 rounded to the dtype, O = P V accumulated in fp32 and
//                          rounded. Its error against the reference is the yardstick a fused kernel's
//                          error is bounded by (a small multiple of it).
//
// Speed (the GPU tests spend most of their time here), without changing a bit of any result:
//   - per (batch, head) slice, Q and the kv head's K and V are converted to double once, into contiguous rows;
//   - each query row's visible keys are found once: the range [lo, hi] the causal/window bounds leave, and
//     within it the block mask's key blocks (Mask::row; Mask::visible is the definition it must agree with);
//   - the dot products of a row are formed kTile keys at a time, interleaved (dot_tile): each dot is still summed
//     over e in order, exactly as written for one, but the kTile sums are independent dependency chains the CPU
//     overlaps;
//   - a sum of rows, O_i = sum_j P_ij V_j, is formed by add_rows: every O_ie receives the same terms in the same
//     order as in the one-term-at-a-time loop, four terms at a time while it sits in a register.
// No sum is ever reassociated (and nothing here may be built with -ffast-math). Mode 1's fp32 accumulators are
// floats (Acc<true>): a double holding a float value does the same arithmetic, but GCC 12.2 at -O3 vectorized
// `acc = double(float(acc + x))` over a tile of keys and dropped the last rounding of some lanes.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "flash.h"
#include "libflash/cpu/parallel.h"

namespace flash_ref {

// ---- dtype conversions (round to nearest even), written independently of the library ---------------
inline float from_bits(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
inline uint32_t to_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }

inline double bf16_value(uint16_t h) { return from_bits(uint32_t(h) << 16); }
inline uint16_t bf16_round(double x) {
  const uint32_t u = to_bits(static_cast<float>(x));
  if (std::isnan(static_cast<float>(x))) return 0x7fc0;
  const uint32_t lsb = (u >> 16) & 1u;
  return static_cast<uint16_t>((u + 0x7fffu + lsb) >> 16);
}
// 2^k, built from its bits (k a normal double exponent, -1022 .. 1023): x * pow2(k) is ldexp(x, k), exactly, while
// the product is a normal double, without ldexp's call (the naive baseline rounds through fp16 at every step).
inline double pow2(int k) {
  const uint64_t u = static_cast<uint64_t>(k + 1023) << 52;
  double d;
  std::memcpy(&d, &u, 8);
  return d;
}
inline double fp16_value(uint16_t h) {
  const int sign = h >> 15, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  double v;
  if (exp == 0) v = static_cast<double>(mant) * pow2(-24);
  else if (exp == 31) v = mant ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  else v = (1.0 + mant / 1024.0) * pow2(exp - 15);
  return sign ? -v : v;
}
inline uint16_t fp16_round(double x) {
  // Search-free: scale into the integer grid of the binade, round half to even.
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  double a = std::fabs(x);
  if (std::isnan(x)) return 0x7e00;
  if (a >= 65520.0) return sign | 0x7c00;
  if (a < pow2(-14)) {  // subnormal grid of 2^-24
    const double m = std::nearbyint(a * pow2(24));
    return sign | static_cast<uint16_t>(m);
  }
  int e;
  std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1)
  const int exp = e - 1;  // a in [2^exp, 2^(exp+1))
  double m = std::nearbyint(a * pow2(10 - exp));  // in [1024, 2048]
  int biased = exp + 15;
  if (m >= 2048.0) { m /= 2; ++biased; }
  if (biased >= 31) return sign | 0x7c00;
  return sign | static_cast<uint16_t>((biased << 10) | (static_cast<int>(m) - 1024));
}

// Value of x after a round trip through dtype (fp32: through float).
inline double round_to(int32_t dtype, double x) {
  switch (dtype) {
    case FLASH_DTYPE_FP16: return fp16_value(fp16_round(x));
    case FLASH_DTYPE_BF16: return bf16_value(bf16_round(x));
    default: return static_cast<float>(x);
  }
}

// Reads element `offset` (in elements) of a host buffer of dtype.
inline double load(const void* data, int32_t dtype, int64_t offset) {
  switch (dtype) {
    case FLASH_DTYPE_FP16: return fp16_value(static_cast<const uint16_t*>(data)[offset]);
    case FLASH_DTYPE_BF16: return bf16_value(static_cast<const uint16_t*>(data)[offset]);
    default: return static_cast<const float*>(data)[offset];
  }
}

// ---- the mask, from its definition in flash.h ---------------------------------------------------------
struct Mask {
  int causal = 0;
  int alignment = FLASH_ALIGN_BOTTOM_RIGHT;
  int window_left = -1, window_right = -1;
  // Optional host block mask, dense: listed[((b * H + h) * n_qb + qb) * n_kb + kb], broadcast over b/h
  // when mask_batch / mask_heads is 1.
  int block_m = 0, block_n = 0, n_qb = 0, n_kb = 0, mask_batch = 1, mask_heads = 1;
  std::vector<uint8_t> listed;

  bool visible(int64_t b, int64_t h, int64_t i, int64_t j, int64_t sq, int64_t sk) const {
    const int64_t diag = i + (alignment == FLASH_ALIGN_BOTTOM_RIGHT ? sk - sq : 0);
    if (causal && j > diag) return false;
    if (window_left >= 0 && j < diag - window_left) return false;
    if (window_right >= 0 && j > diag + window_right) return false;
    if (!listed.empty()) {
      const int64_t bb = mask_batch == 1 ? 0 : b, hh = mask_heads == 1 ? 0 : h;
      if (!listed[((bb * mask_heads + hh) * n_qb + i / block_m) * n_kb + j / block_n]) return false;
    }
    return true;
  }

  // Row i's visible keys, found once for the row (what visible() says for every j, computed from its bounds).
  struct Row {
    int64_t lo, hi;          // the causal and window bounds, clipped to [0, sk): every visible j is in [lo, hi]
    const uint8_t* blocks;   // the block mask's row of key blocks for i's query block (nullptr: no block mask)
    int64_t block_n;
    bool sees(int64_t j) const { return j >= lo && j <= hi && (blocks == nullptr || blocks[j / block_n] != 0); }
  };
  Row row(int64_t b, int64_t h, int64_t i, int64_t sq, int64_t sk) const {
    const int64_t diag = i + (alignment == FLASH_ALIGN_BOTTOM_RIGHT ? sk - sq : 0);
    Row r{0, sk - 1, nullptr, block_n};
    if (causal) r.hi = std::min(r.hi, diag);
    if (window_left >= 0) r.lo = std::max(r.lo, diag - window_left);
    if (window_right >= 0) r.hi = std::min(r.hi, diag + window_right);
    if (!listed.empty()) {
      const int64_t bb = mask_batch == 1 ? 0 : b, hh = mask_heads == 1 ? 0 : h;
      r.blocks = &listed[((bb * mask_heads + hh) * n_qb + i / block_m) * n_kb];
    }
    return r;
  }
};

struct Problem {
  int64_t batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim;
  double scale;  // resolved (never 0)
  Mask mask;
};

// Output of a reference computation: o[((b*sq + i)*hq + h)*d + e], lse[(b*hq + h)*sq + i].
struct Result {
  std::vector<double> o, lse;
};

// Index helper for a flash_tensor on the host.
inline int64_t offset4(const flash_tensor& t, int64_t a, int64_t b, int64_t c, int64_t d) {
  return a * t.strides[0] + b * t.strides[1] + c * t.strides[2] + d * t.strides[3];
}

// body(x) for every x in [0, n), over the host's threads: libflash's CPU work splitter (libflash/cpu/parallel.h, a
// scheduling utility, none of the arithmetic under test; LIBFLASH_NUM_THREADS caps its threads). The references'
// (batch, head) slices are independent -- each writes its own rows, with its own scratch -- so the result does not
// depend on the split; the GPU tests spend most of their time here.
template <class F>
inline void parallel_for(int64_t n, const F& body) {
  flash::cpu::parallel_for(n, [&](int64_t x, int) { body(x); });
}

// The accumulator of a sum: double in the reference (mode 0), float in the naive baseline (mode 1: fp32).
template <bool naive>
using Acc = std::conditional_t<naive, float, double>;

// Keys whose dot products are formed together (interleaved: see the top of this file).
constexpr int64_t kTile = 8;

// dot[l] = sum_e a[e] rows[l][e] for the kTile rows at `rows` (row stride d), each summed over e in order: the
// reference sums the products in double; the naive baseline, as a framework's GEMM, rounds each product to float
// and sums in float.
template <bool naive>
inline void dot_tile(const double* a, const double* rows, int64_t d, double* dot) {
  Acc<naive> acc[kTile] = {};
  for (int64_t e = 0; e < d; ++e)
    for (int64_t l = 0; l < kTile; ++l) acc[l] += static_cast<Acc<naive>>(a[e] * rows[l * d + e]);
  for (int64_t l = 0; l < kTile; ++l) dot[l] = acc[l];
}

// The terms of a sum of rows, in the order they are added: coefficient c[t] times row x[t].
struct Terms {
  std::vector<double> c;
  std::vector<const double*> x;
  void clear() { c.clear(), x.clear(); }
  void add(double coef, const double* row) { c.push_back(coef), x.push_back(row); }
};

// acc[e] = A(acc[e] + c[t] * x[t][e]) for t = 0, 1, ... in order, for every e < d: the sum formed in double and
// rounded to the accumulator's type A after every term. The terms go four at a time to each acc[e] (held in a
// register meanwhile): every acc[e] still receives the same terms in the same order.
template <class A>
inline void add_rows(A* acc, int64_t d, const Terms& terms) {
  const int64_t n = static_cast<int64_t>(terms.c.size());
  const double* c = terms.c.data();
  int64_t t = 0;
  for (; t + 4 <= n; t += 4) {
    const double *x0 = terms.x[t], *x1 = terms.x[t + 1], *x2 = terms.x[t + 2], *x3 = terms.x[t + 3];
    for (int64_t e = 0; e < d; ++e) {
      A a = acc[e];
      a = static_cast<A>(a + c[t] * x0[e]);
      a = static_cast<A>(a + c[t + 1] * x1[e]);
      a = static_cast<A>(a + c[t + 2] * x2[e]);
      a = static_cast<A>(a + c[t + 3] * x3[e]);
      acc[e] = a;
    }
  }
  for (; t < n; ++t)
    for (int64_t e = 0; e < d; ++e) acc[e] = static_cast<A>(acc[e] + c[t] * terms.x[t][e]);
}

// Rows [0, n) of head h of batch b of t ([b, s, h, d]) as a dense [n + pad][d] array of doubles, the pad rows 0
// (they let a tile of kTile keys run past the last key; what is computed there is never used).
inline std::vector<double> rows_of(const flash_tensor& t, int64_t b, int64_t h, int64_t n, int64_t d, int64_t pad) {
  std::vector<double> r((n + pad) * d, 0.0);
  for (int64_t j = 0; j < n; ++j)
    for (int64_t e = 0; e < d; ++e) r[j * d + e] = load(t.data, t.dtype, offset4(t, b, j, h, e));
  return r;
}

// One (batch, head) slice of attention(): rows i of head h into r. naive: mode 1.
template <bool naive>
inline void attention_slice(const Problem& pr, const flash_tensor& q, const flash_tensor& k, const flash_tensor& v,
                            int64_t b, int64_t h, Result& r) {
  const int64_t SQ = pr.seqlen_q, SK = pr.seqlen_k, H = pr.heads_q, D = pr.head_dim;
  const int64_t hk = h / (pr.heads_q / pr.heads_kv);
  const int32_t dt = q.dtype;
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<double> Q = rows_of(q, b, h, SQ, D, 0), K = rows_of(k, b, hk, SK, D, kTile - 1),
                            V = rows_of(v, b, hk, SK, D, 0);
  std::vector<double> s(SK);
  std::vector<Acc<naive>> acc(D);
  Terms pv;
  for (int64_t i = 0; i < SQ; ++i) {
    const Mask::Row m = pr.mask.row(b, h, i, SQ, SK);
    // S over the row's visible keys, -inf for the block mask's holes in [lo, hi]; keys outside [lo, hi] are never read.
    double mx = -inf;
    for (int64_t j0 = m.lo; j0 <= m.hi; j0 += kTile) {
      const int64_t n = std::min(kTile, m.hi + 1 - j0);  // keys j0 .. j0 + n - 1 of the tile are in the row's range
      bool any = false;
      for (int64_t l = 0; l < n; ++l) any = any || m.sees(j0 + l);
      if (!any) {
        for (int64_t l = 0; l < n; ++l) s[j0 + l] = -inf;
        continue;
      }
      double dot[kTile];
      dot_tile<naive>(&Q[i * D], &K[j0 * D], D, dot);
      for (int64_t l = 0; l < n; ++l) {
        const int64_t j = j0 + l;
        if (!m.sees(j)) { s[j] = -inf; continue; }
        s[j] = naive ? round_to(dt, static_cast<float>(dot[l] * pr.scale)) : dot[l] * pr.scale;
        mx = std::max(mx, s[j]);
      }
    }
    if (mx == -inf) continue;  // no visible key: O = 0, LSE = -inf
    // Softmax: in double for the reference; in fp32 arithmetic for the naive baseline, as frameworks
    // run it (fp32 exp, fp32 running sum, fp32 division), whatever the input dtype. (A key outside [lo, hi]
    // would add an exact 0 to the sum: it is left out.)
    double sum = 0.0;
    float sumf = 0.0f;
    for (int64_t j = m.lo; j <= m.hi; ++j) {
      if (naive) {
        s[j] = s[j] == -inf ? 0.0f : std::exp(static_cast<float>(s[j]) - static_cast<float>(mx));
        sumf += static_cast<float>(s[j]);
      } else {
        s[j] = s[j] == -inf ? 0.0 : std::exp(s[j] - mx);
        sum += s[j];
      }
    }
    r.lse[(b * H + h) * SQ + i] =
        naive ? static_cast<double>(static_cast<float>(mx) + std::log(sumf)) : mx + std::log(sum);
    // O = P V: the keys with P_ij != 0, in order.
    pv.clear();
    for (int64_t j = m.lo; j <= m.hi; ++j)
      if (s[j] != 0.0) pv.add(naive ? round_to(dt, static_cast<float>(s[j]) / sumf) : s[j] / sum, &V[j * D]);
    std::fill(acc.begin(), acc.end(), Acc<naive>(0));
    add_rows(acc.data(), D, pv);
    for (int64_t e = 0; e < D; ++e)
      r.o[((b * SQ + i) * H + h) * D + e] = naive ? round_to(dt, static_cast<float>(acc[e])) : acc[e];
  }
}

// mode 0: exact (double everywhere). mode 1: naive in the input dtype (see the top of this file).
inline Result attention(const Problem& pr, const flash_tensor& q, const flash_tensor& k, const flash_tensor& v,
                        int mode, const std::vector<int64_t>* heads_subset = nullptr) {
  const int64_t B = pr.batch, SQ = pr.seqlen_q, H = pr.heads_q, D = pr.head_dim;
  const double inf = std::numeric_limits<double>::infinity();
  Result r;
  r.o.assign(B * SQ * H * D, 0.0);
  r.lse.assign(B * H * SQ, -inf);
  std::vector<int64_t> heads;
  if (heads_subset) heads = *heads_subset;
  else for (int64_t h = 0; h < H; ++h) heads.push_back(h);
  const int64_t nh = static_cast<int64_t>(heads.size());
  parallel_for(B * nh, [&](int64_t x) {
    const int64_t b = x / nh, h = heads[x % nh];
    if (mode == 1) attention_slice<true>(pr, q, k, v, b, h, r);
    else attention_slice<false>(pr, q, k, v, b, h, r);
  });
  return r;
}

}  // namespace flash_ref
