// libflash/cpu/kernels_avx512bf16.cpp -- the bf16 inputs' products on AVX512-BF16 (vdpbf16ps: 16 lanes, each
// acc + a0 b0 + a1 b1 with the bf16 products exact in fp32): twice the fp32 FMA's multiply-adds per instruction,
// and the inputs used as they are, without widening. Compiled with AVX512-BF16 (CMakeLists.txt) and used only
// where kernels.cpp finds it. Intrinsics here, where kernels_impl.h is portable: no compiler lowers generic vector
// code to vdpbf16ps.
//
// Operands are bf16 pairs along k held in 32-bit words: A(r, t) = a[r * a_rs + t * a_ks] holds A(r, 2t) in its low
// half and A(r, 2t + 1) in its high half, B(t, c) = b[t * ldb + c] holds B(2t, c) and B(2t + 1, c); the product's
// k counts pairs. A row of bf16 values in memory is such an A row as it stands (a_rs = d / 2, a_ks = 1).
#include <immintrin.h>

#include <cstring>

#include "kernels.h"

namespace flash::cpu::avx512bf16 {
namespace {

constexpr int MR = 6, NV = 4;  // 24 accumulators, 4 B vectors, 1 broadcast: 29 of the 32 zmm registers

template <int R, int V, Epilogue E>
void micro(const GemmOf<uint32_t, float>& g, int r0, int c0) {
  __m512 acc[R][V];
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < V; ++j) acc[i][j] = _mm512_setzero_ps();
  const uint32_t* a = g.a + r0 * g.a_rs;
  const uint32_t* b = g.b + c0;
  for (int t = 0; t < g.k; ++t) {
    __m512i bv[V];
#pragma GCC unroll 4
    for (int j = 0; j < V; ++j) bv[j] = _mm512_loadu_si512(b + t * g.ldb + j * kVec);
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) {
      const __m512i av = _mm512_set1_epi32(static_cast<int>(a[i * g.a_rs + t * g.a_ks]));
#pragma GCC unroll 4
      for (int j = 0; j < V; ++j) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], (__m512bh)av, (__m512bh)bv[j]);
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i) {
    float* c = g.c + (r0 + i) * g.ldc + c0;
#pragma GCC unroll 4
    for (int j = 0; j < V; ++j) {
      float* cj = c + j * kVec;
      if constexpr (E == Epilogue::kStore) {
        _mm512_storeu_ps(cj, _mm512_mul_ps(acc[i][j], _mm512_set1_ps(g.alpha)));
      } else if constexpr (E == Epilogue::kAdd) {
        _mm512_storeu_ps(cj, _mm512_add_ps(_mm512_loadu_ps(cj), acc[i][j]));
      } else {
        _mm512_storeu_ps(cj, _mm512_fmadd_ps(_mm512_loadu_ps(cj), _mm512_set1_ps(g.row_scale[r0 + i]), acc[i][j]));
      }
    }
  }
}

template <int R, Epilogue E>
void row_block(const GemmOf<uint32_t, float>& g, int r0, int c0, int nv) {
  if (nv == NV) {
    micro<R, NV, E>(g, r0, c0);
  } else {
    for (int j = 0; j < nv; ++j) micro<R, 1, E>(g, r0, c0 + j * kVec);
  }
}

template <int R, Epilogue E>
void edge_rows(const GemmOf<uint32_t, float>& g, int r0, int c0, int nv, int rows) {
  if constexpr (R > 0) {
    if (rows == R) row_block<R, E>(g, r0, c0, nv);
    else edge_rows<R - 1, E>(g, r0, c0, nv, rows);
  }
}

template <Epilogue E>
void gemm_with(const GemmOf<uint32_t, float>& g) {
  for (int c0 = 0; c0 < g.n; c0 += NV * kVec) {
    const int nv = (g.n - c0) / kVec < NV ? (g.n - c0) / kVec : NV;
    int r0 = 0;
    for (; r0 + MR <= g.m; r0 += MR) row_block<MR, E>(g, r0, c0, nv);
    if (r0 < g.m) edge_rows<MR - 1, E>(g, r0, c0, nv, g.m - r0);
  }
}

void gemm(const GemmOf<uint32_t, float>& g) {
  switch (g.epilogue) {
    case Epilogue::kStore: return gemm_with<Epilogue::kStore>(g);
    case Epilogue::kAdd: return gemm_with<Epilogue::kAdd>(g);
    case Epilogue::kRescaleAdd: return gemm_with<Epilogue::kRescaleAdd>(g);
  }
}

// Two rows of 16-bit values as one row of pairs: out[c] = r0[c] | r1[c] << 16 (r1 null: zeros).
inline __m512i pair16(__m256i lo, __m256i hi) {
  return _mm512_or_si512(_mm512_cvtepu16_epi32(lo), _mm512_slli_epi32(_mm512_cvtepu16_epi32(hi), 16));
}

void pair_rows_bf16(const uint16_t* r0, const uint16_t* r1, int n, int n_pad, uint32_t* out) {
  int c = 0;
  for (; c + kVec <= n; c += kVec) {
    const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(r0 + c));
    const __m256i hi = r1 ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(r1 + c)) : _mm256_setzero_si256();
    _mm512_storeu_si512(out + c, pair16(lo, hi));
  }
  for (; c < n; ++c) out[c] = r0[c] | (r1 ? uint32_t{r1[c]} << 16 : 0u);
  for (; c < n_pad; ++c) out[c] = 0;
}

// Two rows of fp32 values rounded to bf16 (to nearest even) as one row of pairs; n a multiple of kVec.
void pair_rows_f32(const float* r0, const float* r1, int n, uint32_t* out) {
  for (int c = 0; c < n; c += kVec) {
    const __m256i lo = (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(r0 + c));
    const __m256i hi = r1 ? (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(r1 + c)) : _mm256_setzero_si256();
    _mm512_storeu_si512(out + c, pair16(lo, hi));
  }
}

// fp32 values rounded to bf16 (to nearest even); n a multiple of kVec.
void round_row_f32(const float* src, int n, uint16_t* dst) {
  for (int c = 0; c < n; c += kVec)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + c), (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(src + c)));
}

}  // namespace

const Bf16Kernels& table() {
  static const Bf16Kernels k = {gemm, pair_rows_bf16, pair_rows_f32, round_row_f32};
  return k;
}

}  // namespace flash::cpu::avx512bf16
