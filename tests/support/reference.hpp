// tests/support/reference.hpp -- the fp64 reference and the "naive same-dtype" baseline.
//
// Header-only, depends on flash.h for the tensor descriptor only: the test suite and fa-bench's --check
// use it. It shares no code with the library's backends: the mask rule, the dtype conversions and the
// softmax are written again here, directly from their definitions.
//
//   reference_attention:   O and LSE in double from the (already rounded) inputs, S and P materialised.
//   naive_same_dtype:      standard attention as a framework runs it in the input dtype: S rounded to the
//                          dtype, softmax in fp32 rounded to the dtype, O = P V accumulated in fp32 and
//                          rounded. Its error against the reference is the yardstick a fused kernel's
//                          error is bounded by (a small multiple of it).
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
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
inline double fp16_value(uint16_t h) {
  const int sign = h >> 15, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  double v;
  if (exp == 0) v = std::ldexp(static_cast<double>(mant), -24);
  else if (exp == 31) v = mant ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  else v = std::ldexp(1.0 + mant / 1024.0, exp - 15);
  return sign ? -v : v;
}
inline uint16_t fp16_round(double x) {
  // Search-free: scale into the integer grid of the binade, round half to even.
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  double a = std::fabs(x);
  if (std::isnan(x)) return 0x7e00;
  if (a >= 65520.0) return sign | 0x7c00;
  if (a < std::ldexp(1.0, -14)) {  // subnormal grid of 2^-24
    const double m = std::nearbyint(a * std::ldexp(1.0, 24));
    return sign | static_cast<uint16_t>(m);
  }
  int e;
  std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1)
  const int exp = e - 1;  // a in [2^exp, 2^(exp+1))
  double m = std::nearbyint(a * std::ldexp(1.0, 10 - exp));  // in [1024, 2048]
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
// scheduling utility, none of the arithmetic under test). The references' (batch, head) slices are independent -- each
// writes its own rows, with its own scratch -- so the result does not depend on the split; the GPU tests spend most of
// their time here (the sm90 ones: 215 s on the H100 machine with one thread, 124 s threaded).
template <class F>
inline void parallel_for(int64_t n, const F& body) {
  flash::cpu::parallel_for(n, [&](int64_t x, int) { body(x); });
}

// mode 0: exact (double everywhere). mode 1: naive in the input dtype (see the top of this file).
inline Result attention(const Problem& pr, const flash_tensor& q, const flash_tensor& k, const flash_tensor& v,
                        int mode, const std::vector<int64_t>* heads_subset = nullptr) {
  const int64_t B = pr.batch, SQ = pr.seqlen_q, SK = pr.seqlen_k, H = pr.heads_q, D = pr.head_dim;
  const int64_t ratio = pr.heads_q / pr.heads_kv;
  const int32_t dt = q.dtype;
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
      std::vector<double> s(SK), qrow(D), acc(D);
      const int64_t hk = h / ratio;
      for (int64_t i = 0; i < SQ; ++i) {
        for (int64_t e = 0; e < D; ++e) qrow[e] = load(q.data, dt, offset4(q, b, i, h, e));
        double mx = -inf;
        for (int64_t j = 0; j < SK; ++j) {
          if (!pr.mask.visible(b, h, i, j, SQ, SK)) { s[j] = -inf; continue; }
          // Frameworks' GEMMs accumulate in fp32: so does the naive baseline.
          double dot = 0.0;
          float dotf = 0.0f;
          for (int64_t e = 0; e < D; ++e) {
            const double x = qrow[e] * load(k.data, dt, offset4(k, b, j, hk, e));
            dot += x;
            dotf += static_cast<float>(x);
          }
          if (mode == 1) dot = dotf;
          s[j] = mode == 1 ? round_to(dt, static_cast<float>(dot * pr.scale)) : dot * pr.scale;
          mx = std::max(mx, s[j]);
        }
        if (mx == -inf) continue;  // no visible key: O = 0, LSE = -inf
        // Softmax: in double for the reference; in fp32 arithmetic for the naive baseline, as frameworks
        // run it (fp32 exp, fp32 running sum, fp32 division), whatever the input dtype.
        double sum = 0.0;
        float sumf = 0.0f;
        for (int64_t j = 0; j < SK; ++j) {
          if (mode == 1) {
            s[j] = s[j] == -inf ? 0.0f : std::exp(static_cast<float>(s[j]) - static_cast<float>(mx));
            sumf += static_cast<float>(s[j]);
          } else {
            s[j] = s[j] == -inf ? 0.0 : std::exp(s[j] - mx);
            sum += s[j];
          }
        }
        if (mode == 1) sum = sumf;
        r.lse[(b * H + h) * SQ + i] =
            mode == 1 ? static_cast<double>(static_cast<float>(mx) + std::log(sumf)) : mx + std::log(sum);
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t j = 0; j < SK; ++j) {
          if (s[j] == 0.0) continue;
          const double pij = mode == 1 ? round_to(dt, static_cast<float>(s[j]) / sumf) : s[j] / sum;
          for (int64_t e = 0; e < D; ++e) {
            acc[e] += pij * load(v.data, dt, offset4(v, b, j, hk, e));
            if (mode == 1) acc[e] = static_cast<float>(acc[e]);
          }
        }
        for (int64_t e = 0; e < D; ++e)
          r.o[((b * SQ + i) * H + h) * D + e] = mode == 1 ? round_to(dt, static_cast<float>(acc[e])) : acc[e];
      }
    });
  return r;
}

}  // namespace flash_ref
