// libflash/cpu/kernels.h -- the tile operations the cpu algorithm is built from, compiled once per x86 instruction
// set level and chosen at run time (kernels.cpp).
//
// Everything here works on fp32 tiles already in the thread's scratch (the callers pack and convert the inputs):
// a register-blocked matrix product with the epilogues the FlashAttention step needs, the online softmax of
// Algorithm 1 on a score tile, the backward's P and dS, and the 16-bit -> fp32 conversion of rows. The
// implementation (kernels_impl.h) is plain C++ on GCC/Clang vector types of 16 floats, which each level's
// compile lowers to its registers (one zmm, two ymm, four xmm): one source, no intrinsics, and the portable
// build (any other architecture, or an x86 without AVX2) runs the same code. Results are a function of the inputs
// and the level only: no reduction order depends on threads or on where a tile sits.
#pragma once
#include <cstdint>

#include "../params.h"

namespace flash::cpu {

constexpr int kVec = 16;  // floats per vector; tile widths that are GEMM columns are padded to a multiple of it

inline int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

enum class Epilogue : int32_t {
  kStore,       // C = alpha * (A B)
  kAdd,         // C += A B
  kRescaleAdd,  // C = row_scale[r] * C + A B   (the forward's O update: one rounding per element)
};

// C (m x n) op= A (m x k) B (k x n), A and B of type T, C of type C. Every element of A B is the same sequence
// of fused multiply-adds over kk = 0 .. k-1 whatever the tile shape (one chain, or with `chunk` > 0 chunks of that
// many terms, each summed from 0 and added to the total in order): so a product recomputed elsewhere (the
// backward's S) is bit for bit the first one, and a block's sum is formed on its own before it meets C (blocked
// summation). A double product with an fp32 C (the fp32 inputs' scores) only stores, rounding once.
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
  const char* name;  // "avx512", "avx2", "portable"

  void (*gemm)(const Gemm& g);
  void (*gemm_f64)(const GemmOf<double>& g);
  void (*scores_f64)(const GemmOf<double, float>& g);  // kStore only

  // The forward step's online softmax, on a tile S^T of `keys` rows (keys) by `cols` columns (queries; a multiple
  // of kVec) with row stride lds: unscaled scores (the scale's sign applied), masked entries -inf, c = |scale|
  // log2(e). Per column q: m' = max(m[q], max_k S[k][q]); corr[q] = 2^((m[q] - m') c);
  // S[k][q] <- P = 2^((S[k][q] - m') c); l[q] = corr[q] * l[q] + sum_k P. A column that has seen no visible key
  // keeps m = -inf, l = 0 and gets P = 0, corr = 0 (never a NaN from -inf - -inf). l is double (kernels_impl.h).
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

// bf16 products on AVX512-BF16 (kernels_avx512bf16.cpp). Operands are bf16 pairs along k in 32-bit words:
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
};

// The bf16 kernels, or null where the CPU lacks AVX512-BF16 (bf16 inputs are then widened to fp32).
const Bf16Kernels* bf16_kernels();

}  // namespace flash::cpu
