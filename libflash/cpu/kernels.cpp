// libflash/cpu/kernels.cpp -- the tile kernels of kernels.h: one source, compiled once per instruction set level.
//
// CMakeLists.txt (flash_cpu_kernels) compiles this file as it stands -- the portable level, for the build's baseline
// (SSE2 on x86-64, NEON on AArch64, or whatever the target is), and the run-time choice of a level, kernels() -- and
// again once per faster level, through a one-line file generated into the build directory that defines
// FLASH_CPU_LEVEL_<LEVEL> and includes this one, compiled with that level's flags:
//   AVX2        -mavx2 -mfma                           the fp32 kernels on 16 ymm registers, a vector taking two
//   AVX512      AVX-512 F, VL, BW, DQ (+ AVX2, FMA)     the fp32 kernels on 32 zmm registers, a vector taking one
//   AVX512BF16  the above + AVX512-BF16                 the bf16 inputs' products on vdpbf16ps (intrinsics)
//   SVE256, SVE512  (AArch64) -march=armv8.2-a+sve -msve-vector-bits=N: the fp32 kernels on 32 z registers of N
//               bits, a vector taking one; code for one width runs only where the vector length is exactly N
// The plain compile gets FLASH_CPU_HAS_<LEVEL> for each level the build has. FLASH_CPU_LEVELS=avx2|portable leaves
// the faster ones out (to test the others on a machine that would pick them).
//
// Every symbol of a level lives in its own namespace (flash::cpu::<level>) and an anonymous one inside it: copies
// compiled with different -m flags must never be merged by the linker. For the same reason the level code calls no
// inline function of a header (a copy of one compiled with AVX-512 instructions could be the one the linker keeps).
#include <cstdint>
#include <cstring>
#include <type_traits>
#if defined(FLASH_CPU_LEVEL_AVX512BF16)
#include <immintrin.h>
#endif
#if defined(__aarch64__) && !defined(FLASH_CPU_LEVEL_SVE256) && !defined(FLASH_CPU_LEVEL_SVE512)
#include <sys/auxv.h>
#include <sys/prctl.h>
#endif

#include "kernels.h"

#if defined(FLASH_CPU_LEVEL_AVX512BF16)
// ---- AVX512-BF16: the bf16 inputs' products ----------------------------------------------------------------------
//
// vdpbf16ps: 16 lanes, each acc + a0 b0 + a1 b1 with the bf16 products exact in fp32: twice the fp32 FMA's
// multiply-adds per instruction, and the inputs used as they are, without widening. Used only where kernels() finds
// AVX512-BF16 (bf16_kernels()). Intrinsics here, where the fp32 levels below are portable: no compiler lowers generic
// vector code to vdpbf16ps.
//
// Operands are bf16 pairs along k held in 32-bit words: A(r, t) = a[r * a_rs + t * a_ks] holds A(r, 2t) in its low
// half and A(r, 2t + 1) in its high half, B(t, c) = b[t * ldb + c] holds B(2t, c) and B(2t + 1, c); the product's
// k counts pairs. A row of bf16 values in memory is such an A row as it stands (a_rs = d / 2, a_ks = 1).
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

#else  // the fp32 kernels at the level being compiled
// ---- The fp32 kernels, in portable C++ on GCC/Clang vector types -------------------------------------------------
//
// The level: its namespace, its name, its vector (FLASH_CPU_VBYTES, the width of its registers: every vector type
// below is one register, so the compiler never splits one across several, which under AVX2 and SSE2 it did through
// the stack at a twentieth of the speed) and the register blocks of the matrix product (further down):
//   FLASH_CPU_MR, FLASH_CPU_NV  the fp32 product's: MR rows of C by NV vectors, held in registers (twice: the
//                  chunk's sums and the total) while the k loop runs, with NV vectors of B and one broadcast;
//   FLASH_CPU_MR64, FLASH_CPU_NV64  the same for the double product.
#if defined(FLASH_CPU_LEVEL_AVX512)
// 32 zmm registers: an fp32 C block of 6 rows x 2 vectors (12 chunk accumulators, 12 totals, 2 B vectors,
// 1 broadcast); a double one of 6 x 4 (24 + 4 + 1; the double product is never chunked).
#define FLASH_CPU_ISA avx512
#define FLASH_CPU_ISA_NAME "avx512"
#define FLASH_CPU_VBYTES 64
#define FLASH_CPU_MR 6
#define FLASH_CPU_NV 2
#define FLASH_CPU_MR64 6
#define FLASH_CPU_NV64 4
#elif defined(FLASH_CPU_LEVEL_AVX2)
// 16 ymm registers: C blocks of 6 rows x 2 vectors, fp32 and double alike (12 sums, 2 for B, 1 broadcast; a chunked
// product's totals wait in L1 between chunks). Single thread, AVX2 copy on this Zen 5: 64x64x128 fp32 94-112 GFLOP/s
// (3 x 2, all in registers: 78), double 55 (32), chunked P V 64x128x64 105 (71); the FMA peak at 8 lanes is ~115.
#define FLASH_CPU_ISA avx2
#define FLASH_CPU_ISA_NAME "avx2"
#define FLASH_CPU_VBYTES 32
#define FLASH_CPU_MR 6
#define FLASH_CPU_NV 2
#define FLASH_CPU_MR64 6
#define FLASH_CPU_NV64 2
#elif defined(FLASH_CPU_LEVEL_SVE512) || defined(FLASH_CPU_LEVEL_SVE256)
// AArch64 SVE at a fixed width: GCC lowers the vector types, one register wide, to SVE (ptrue vl32/vl64, ld1w, fmla,
// fcmgt + sel). 32 z registers: the blocks of the NEON level below, fp32 6 x 2 and double 6 x 2, for the same reason
// (GCC 12's second set of sums for the unchunked double product).
#if defined(FLASH_CPU_LEVEL_SVE512)
#define FLASH_CPU_ISA sve512
#define FLASH_CPU_ISA_NAME "sve512"
#define FLASH_CPU_VBYTES 64
#else
#define FLASH_CPU_ISA sve256
#define FLASH_CPU_ISA_NAME "sve256"
#define FLASH_CPU_VBYTES 32
#endif
#define FLASH_CPU_MR 6
#define FLASH_CPU_NV 2
#define FLASH_CPU_MR64 6
#define FLASH_CPU_NV64 2
#elif defined(__aarch64__)
// AArch64: the baseline compile is the NEON level (every AArch64 CPU has NEON; it keeps the portable namespace,
// which holds the choice of the SVE levels). 16-byte vectors with fused multiply-adds on 32 registers: fp32 blocks
// of 6 x 2 as AVX-512's (12 chunk sums, 12 totals, 2 for B, 1 broadcast), double 6 x 2 (AVX-512's 6 x 4 spilled:
// GCC 12 keeps a second set of sums for the unchunked product too, 48 registers); with these GCC 12 touches the
// stack only to save v8-v15. Correct under qemu-aarch64; speed unmeasured on Arm hardware.
#define FLASH_CPU_PORTABLE 1
#define FLASH_CPU_ISA portable
#define FLASH_CPU_ISA_NAME "neon"
#define FLASH_CPU_VBYTES 16
#define FLASH_CPU_MR 6
#define FLASH_CPU_NV 2
#define FLASH_CPU_MR64 6
#define FLASH_CPU_NV64 2
#else
// The baseline: what runs where no faster level is found, and on architectures other than x86 and AArch64:
// 16-byte vectors (SSE2's 16 xmm registers), C blocks of 3 rows x 2 vectors (6 + 6 sums, 2 for B, 1 broadcast;
// 4 x 2 and 6 x 2 ran within noise of it: 36-41 GFLOP/s for 64x64x128 fp32 on one core, no FMA).
#define FLASH_CPU_PORTABLE 1
#define FLASH_CPU_ISA portable
#define FLASH_CPU_ISA_NAME "portable"
#define FLASH_CPU_VBYTES 16
#define FLASH_CPU_MR 3
#define FLASH_CPU_NV 2
#define FLASH_CPU_MR64 3
#define FLASH_CPU_NV64 2
#endif

namespace flash::cpu::FLASH_CPU_ISA {
namespace {

typedef float f32v __attribute__((vector_size(FLASH_CPU_VBYTES)));
typedef double f64v __attribute__((vector_size(FLASH_CPU_VBYTES)));
typedef int32_t i32v __attribute__((vector_size(FLASH_CPU_VBYTES)));
typedef int64_t i64v __attribute__((vector_size(FLASH_CPU_VBYTES)));
typedef uint32_t u32v __attribute__((vector_size(FLASH_CPU_VBYTES)));
typedef uint16_t u16v __attribute__((vector_size(FLASH_CPU_VBYTES / 2)));  // a vector's lanes of 16-bit values
typedef float f32h __attribute__((vector_size(FLASH_CPU_VBYTES / 2)));     // half a vector of floats (f64v's lanes)
constexpr int kLanes = FLASH_CPU_VBYTES / 4;                               // floats per vector
static_assert(kVec % kLanes == 0, "the tiles' padded widths are whole vectors");

// The vector of T, its lane count and the register block of C op= A B (further down) for T.
template <class T>
struct Lanes;
template <>
struct Lanes<float> {
  using v = f32v;
  static constexpr int n = kLanes, mr = FLASH_CPU_MR, nv = FLASH_CPU_NV;
};
template <>
struct Lanes<double> {
  using v = f64v;
  static constexpr int n = kLanes / 2, mr = FLASH_CPU_MR64, nv = FLASH_CPU_NV64;
};

template <class T>
inline typename Lanes<T>::v vload(const T* p) {
  typename Lanes<T>::v v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <class T>
inline void vstore(T* p, typename Lanes<T>::v v) {
  std::memcpy(p, &v, sizeof v);
}
inline f32v load(const float* p) { return vload(p); }
inline void store(float* p, f32v v) { vstore(p, v); }
template <class T>
inline typename Lanes<T>::v splat(T x) {
  return x - typename Lanes<T>::v{};  // x - 0 is x for every x (x + 0 is not, for -0)
}
template <class To, class From>
inline To bit_cast(From v) {
  static_assert(sizeof(To) == sizeof(From), "same size");
  To r;
  std::memcpy(&r, &v, sizeof r);
  return r;
}
// Lane-wise max; a NaN in `a` gives b (so a NaN score does not become the row max, but still reaches P).
template <class V>
inline V vmax(V a, V b) {
  return a > b ? a : b;
}
constexpr float kInf = __builtin_inff();

// 2^(x + lo), lane-wise, for |lo| <= 2^-20 |x| or so (a second, lower part of the argument; 0 for most calls).
// Cody-Waite in base 2, where it is exact: n = round(x) (adding 1.5 * 2^23 rounds to an integer), r = x - n in
// [-1/2, 1/2] with no rounding at all (then r + lo, one rounding far below r's own scale); then 2^r by a degree-6
// polynomial, 1 + r q(r) with q fitted minimax for relative error with fp32 coefficients (0.05 ulp of
// approximation error); then 2^n into the exponent field. Measured against exp2 in double over every fp32 x in
// [-128, 0] (lo = 0): max error 0.80 ulp (0.5 of it the final rounding; the worst at r = -1/2, where the result's
// ulp halves), mean 0.065 ulp. Results below 2^-127 (n < -127) are 0, as is 2^-inf; a NaN stays NaN; x > 128
// gives inf.
inline f32v exp2(f32v x, f32v lo) {
  const auto tiny = x < -150.0f;  // 2^x is 0 here (-inf included, whose lo may be NaN)
  x = tiny ? splat(-150.0f) : x;  // keeps n's exponent field in range; NaN compares false and stays
  lo = tiny ? f32v{} : lo;
  x = x > 128.0f ? splat(128.0f) : x;
  const f32v magic = splat(12582912.0f);  // 1.5 * 2^23
  const f32v t = x + magic;
  const f32v r = (x - (t - magic)) + lo;
  f32v q = splat(1.532596507e-04f);
  q = q * r + 1.339080278e-03f;
  q = q * r + 9.618506767e-03f;
  q = q * r + 5.550359935e-02f;
  q = q * r + 2.402264774e-01f;
  q = q * r + 6.931471825e-01f;
  const f32v p = q * r + 1.0f;
  i32v e = bit_cast<i32v>(t) - bit_cast<i32v>(magic) + 127;  // n + 127, the biased exponent of 2^n
  e = e < 0 ? i32v{} : e;                                     // 2^n below 2^-127: 0
  return p * bit_cast<f32v>(e << 23);
}

// 2^x in double (the KV-cache's fp32 path, which promises O rounded once: kvcache_cpu.cpp). The same reduction
// (n = round(x) with 1.5 * 2^52, r = x - n exact); 2^r by its Taylor polynomial to degree 12, whose truncation
// error on [-1/2, 1/2] is 2e-16 relative.
inline f64v exp2(f64v x) {
  x = x < -1100.0 ? splat(-1100.0) : x;
  x = x > 1024.0 ? splat(1024.0) : x;
  const f64v magic = splat(6755399441055744.0);  // 1.5 * 2^52
  const f64v t = x + magic;
  const f64v r = x - (t - magic);
  constexpr double c[13] = {1.0,
                            0.6931471805599453094,
                            0.2402265069591007123,
                            0.05550410866482157995,
                            0.009618129107628477161,
                            0.001333355814642844343,
                            1.540353039338160995e-4,
                            1.525273380405984028e-5,
                            1.321548679014430951e-6,
                            1.017808600923969859e-7,
                            7.054911620801123330e-9,
                            4.445538271870811497e-10,
                            2.567843599348820514e-11};
  f64v p = splat(c[12]);
#pragma GCC unroll 12
  for (int i = 11; i >= 0; --i) p = p * r + c[i];
  i64v e = bit_cast<i64v>(t) - bit_cast<i64v>(magic) + 1023;  // n + 1023
  e = e < 0 ? i64v{} : e;                                      // 2^n below 2^-1023: 0
  return p * bit_cast<f64v>(e << 52);
}

// a - b as s + e exactly (Knuth's TwoSum: no condition on the magnitudes).
inline f32v difference(f32v a, f32v b, f32v* e) {
  const f32v s = a - b;
  const f32v bb = s - a;
  *e = (a - (s - bb)) - (b + bb);
  return s;
}

// a * b - p exactly, for p = fl(a * b): one fused multiply-add where the level has them (the contraction of
// a * b - p, -ffp-contract=fast), else Dekker's product on Veltkamp's halves.
inline f32v product_error(f32v a, f32v b, f32v p) {
#if defined(__FMA__) || defined(__ARM_FEATURE_FMA)
  return a * b - p;
#else
  const auto split = [](f32v x, f32v* hi, f32v* lo) {
    const f32v t = x * 4097.0f;
    *hi = t - (t - x);
    *lo = x - *hi;
  };
  f32v ah, al, bh, bl;
  split(a, &ah, &al);
  split(b, &bh, &bl);
  return (((ah * bh - p) + ah * bl) + al * bh) + al * bl;
#endif
}

// x * c as hi + lo, for c = c_hi + c_lo (the softmax scale times log2(e), to twice fp32's precision): the
// exponent of P is then formed without a rounding of its own, and P = exp2(hi, lo).
inline f32v times_scale(f32v x, f32v c_hi, f32v c_lo, f32v* lo) {
  const f32v hi = x * c_hi;
  *lo = product_error(x, c_hi, hi) + x * c_lo;
  return hi;
}

// ---- C op= A B: the register-blocked micro-kernel and its driver -----------------------------------------------
//
// The micro-kernel holds an R x (V vectors) block of C in registers for the whole k loop: per kk, V vector loads
// of B's row, R broadcasts of A's column, R * V fused multiply-adds. The driver walks C's columns in panels of
// NV vectors (B's panel, k rows of NV vectors, stays in L1 while every row block of A passes it) and each panel's
// rows in blocks of MR; edge blocks use the same kernel with fewer rows or vectors. The same code runs the fp32
// products and the double ones (a vector then holds half as many doubles).
//
// Gemm::chunk > 0 sums in chunks: the k loop restarts its accumulators every `chunk` steps and adds each chunk's
// sum to the block's total (a second set of registers), so fewer additions land on a large partial sum (kernels.h).
// Every C element is the same sequence of operations whichever block computes it.
template <class T, class C, int R, int V, Epilogue E>
void micro(const GemmOf<T, C>& g, int r0, int c0) {
  using L = Lanes<T>;
  using vec = typename L::v;
  // The unroll pragmas keep the blocks in registers (GCC unrolls loops of constant trip count fully only at -O3).
  vec total[R][V];
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < V; ++j) total[i][j] = vec{};
  const T* a = g.a + r0 * g.a_rs;
  const T* b = g.b + c0;
  const int chunk = g.chunk > 0 ? g.chunk : g.k;
  for (int k0 = 0; k0 < g.k; k0 += chunk) {
    const int k1 = g.k - k0 < chunk ? g.k : k0 + chunk;
    vec acc[R][V];
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
      for (int j = 0; j < V; ++j) acc[i][j] = vec{};
    for (int kk = k0; kk < k1; ++kk) {
      vec bv[V];
#pragma GCC unroll 4
      for (int j = 0; j < V; ++j) bv[j] = vload(b + kk * g.ldb + j * L::n);
#pragma GCC unroll 16
      for (int i = 0; i < R; ++i) {
        const vec av = a[i * g.a_rs + kk * g.a_ks] - vec{};  // broadcast (x - 0 is x for every x, -0 included)
#pragma GCC unroll 4
        for (int j = 0; j < V; ++j) acc[i][j] += av * bv[j];
      }
    }
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
      for (int j = 0; j < V; ++j) total[i][j] = k0 == 0 ? acc[i][j] : total[i][j] + acc[i][j];
  }
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i) {
    C* c = g.c + (r0 + i) * g.ldc + c0;
#pragma GCC unroll 4
    for (int j = 0; j < V; ++j) {
      C* cj = c + j * L::n;
      if constexpr (!std::is_same_v<T, C>) {  // double scores rounded once to fp32
        static_assert(E == Epilogue::kStore, "a narrowing product only stores");
        const f32h x = __builtin_convertvector(total[i][j] * T(g.alpha), f32h);
        std::memcpy(cj, &x, sizeof x);
      } else if constexpr (E == Epilogue::kStore) {
        vstore(cj, total[i][j] * T(g.alpha));
      } else if constexpr (E == Epilogue::kAdd) {
        vstore(cj, vload(cj) + total[i][j]);
      } else {
        vstore(cj, vload(cj) * g.row_scale[r0 + i] + total[i][j]);
      }
    }
  }
}

template <class T, class C, int R, Epilogue E>
void row_block(const GemmOf<T, C>& g, int r0, int c0, int nv) {
  constexpr int NV = Lanes<T>::nv;
  if (nv == NV) {
    micro<T, C, R, NV, E>(g, r0, c0);
  } else {
    for (int j = 0; j < nv; ++j) micro<T, C, R, 1, E>(g, r0, c0 + j * Lanes<T>::n);
  }
}

// The last rows of a panel (fewer than MR): the kernel instantiated for exactly that many.
template <class T, class C, int R, Epilogue E>
void edge_rows(const GemmOf<T, C>& g, int r0, int c0, int nv, int rows) {
  if constexpr (R > 0) {
    if (rows == R) row_block<T, C, R, E>(g, r0, c0, nv);
    else edge_rows<T, C, R - 1, E>(g, r0, c0, nv, rows);
  }
}

template <class T, class C, Epilogue E>
void gemm_with(const GemmOf<T, C>& g) {
  constexpr int MR = Lanes<T>::mr, NV = Lanes<T>::nv, N = Lanes<T>::n;
  for (int c0 = 0; c0 < g.n; c0 += NV * N) {
    const int nv = (g.n - c0) / N < NV ? (g.n - c0) / N : NV;
    int r0 = 0;
    for (; r0 + MR <= g.m; r0 += MR) row_block<T, C, MR, E>(g, r0, c0, nv);
    if (r0 < g.m) edge_rows<T, C, MR - 1, E>(g, r0, c0, nv, g.m - r0);
  }
}

template <class T>
void gemm(const GemmOf<T>& g) {
  switch (g.epilogue) {
    case Epilogue::kStore: return gemm_with<T, T, Epilogue::kStore>(g);
    case Epilogue::kAdd: return gemm_with<T, T, Epilogue::kAdd>(g);
    case Epilogue::kRescaleAdd: return gemm_with<T, T, Epilogue::kRescaleAdd>(g);
  }
}

void scores_f64(const GemmOf<double, float>& g) { gemm_with<double, float, Epilogue::kStore>(g); }

// ---- Softmax pieces ------------------------------------------------------------------------------------------

// Algorithm 1 lines 9-10 on S^T: every vector is kLanes queries, so the row max and row sum of the paper run down
// the tile's columns, lane by lane, with no horizontal reduction. fp32: P = 2^((S - m') c) with S - m' and its
// product by c carried in two parts (the exponent is exact up to S's own rounding); l sums P in double -- in fp32
// its roundings (relative 2^-24 for l just above a power of two) came through O / l as up to an ulp of O beyond
// the baseline's, whose normalised P sits below 1. corr multiplies O and l alike, so its rounding cancels in O / l.
// double: the same with c as one double.
template <class T>
void online_softmax(T* s, int64_t lds, int keys, int cols, Log2Scale c, T* m, double* l, T* corr) {
  using vec = typename Lanes<T>::v;
  constexpr bool f32 = std::is_same_v<T, float>;
  const vec c_hi = splat(T(c.hi)), c_lo = splat(T(c.lo));
  const vec c64 = splat(T(double(c.hi) + double(c.lo)));
  const auto p_of = [&](vec a, vec b) {  // 2^((a - b) c)
    if constexpr (f32) {
      f32v d_lo, lo;
      const f32v d = difference(a, b, &d_lo);
      const f32v hi = times_scale(d, c_hi, c_lo, &lo);
      return exp2(hi, lo + d_lo * c_hi);
    } else {
      return exp2((a - b) * c64);
    }
  };
  for (int q = 0; q < cols; q += Lanes<T>::n) {
    vec mx = splat(T(-kInf));
    for (int k = 0; k < keys; ++k) mx = vmax(vload(s + k * lds + q), mx);
    const vec m_old = vload(m + q);
    const vec m_new = vmax(mx, m_old);
    // A column with nothing visible yet (m_new = -inf) subtracts 0 instead: P = 2^-inf = 0, corr = 0.
    const vec base = m_new == -kInf ? vec{} : m_new;
    const vec cr = p_of(m_old, base);
    vstore(corr + q, cr);
    vstore(m + q, m_new);
    // l = corr l + sum P, in double (a vector of P is two vectors of doubles; of double P, one).
    f64v sum[f32 ? 2 : 1] = {};
    for (int k = 0; k < keys; ++k) {
      T* row = s + k * lds + q;
      const vec p = p_of(vload(row), base);
      vstore(row, p);
      if constexpr (f32) {
        f32h h[2];
        std::memcpy(h, &p, sizeof p);
        sum[0] += __builtin_convertvector(h[0], f64v);
        sum[1] += __builtin_convertvector(h[1], f64v);
      } else {
        sum[0] += p;
      }
    }
    for (int h = 0; h < (f32 ? 2 : 1); ++h) {
      double* lh = l + q + Lanes<double>::n * h;
      f64v ch;
      if constexpr (f32) {
        f32h c8[2];
        std::memcpy(c8, &cr, sizeof cr);
        ch = __builtin_convertvector(c8[h], f64v);
      } else {
        ch = cr;
      }
      vstore(lh, vload(lh) * ch + sum[h]);
    }
  }
}

// P = 2^(S c - LSE log2(e)), the product and the difference carried in two parts: rounding S c - LSE to fp32 would
// cost up to half an ulp of |S c - LSE| (2^-20 relative in P for |S c - LSE| near 16, where P still matters).
void probabilities(float* s, int64_t lds, int rows, int cols, Log2Scale c, const float* lse_hi, const float* lse_lo) {
  const f32v c_hi = splat(c.hi), c_lo = splat(c.lo);
  for (int r = 0; r < rows; ++r) {
    float* row = s + r * lds;
    const f32v hi = splat(lse_hi[r]), lo = splat(lse_lo[r]);
    for (int j = 0; j < cols; j += kLanes) {
      f32v p_lo, d_lo;
      const f32v p = times_scale(load(row + j), c_hi, c_lo, &p_lo);
      const f32v x = difference(p, hi, &d_lo);
      store(row + j, exp2(x, (d_lo + p_lo) - lo));
    }
  }
}

void softmax_grad(float* dp, const float* p, int64_t ld, int rows, int cols, const float* D) {
  for (int r = 0; r < rows; ++r) {
    const f32v d = splat(D[r]);
    for (int c = 0; c < cols; c += kLanes) store(dp + r * ld + c, load(p + r * ld + c) * (load(dp + r * ld + c) - d));
  }
}

// ---- 16-bit -> fp32 ------------------------------------------------------------------------------------------

inline f32v widen16(u16v h, DType t) {
  const u32v w = __builtin_convertvector(h, u32v);
  if (t == DType::BF16) return bit_cast<f32v>(w << 16);
  // fp16: sign, then the exponent rebiased (15 -> 127) for normals; inf/NaN keep an all-ones exponent;
  // subnormals are mant * 2^-24, exact in fp32.
  const u32v sign = (w & 0x8000u) << 16;
  const u32v em = w & 0x7fffu;
  const u32v normal = (em << 13) + (112u << 23);
  const u32v special = (em << 13) | 0x7f800000u;
  const f32v sub = __builtin_convertvector(bit_cast<i32v>(em), f32v) * 5.9604644775390625e-8f;
  u32v bits = em >= 0x7c00u ? special : normal;
  bits = em < 0x0400u ? bit_cast<u32v>(sub) : bits;
  return bit_cast<f32v>(bits | sign);
}

void widen(const uint16_t* src, DType t, int n, int n_pad, float* dst) {
  int i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    u16v h;
    std::memcpy(&h, src + i, sizeof h);
    store(dst + i, widen16(h, t));
  }
  if (i < n) {
    u16v h = u16v{};
    std::memcpy(&h, src + i, sizeof(uint16_t) * (n - i));
    float tail[kLanes];
    store(tail, widen16(h, t));
    std::memcpy(dst + i, tail, sizeof(float) * (n - i));
  }
  for (i = n; i < n_pad; ++i) dst[i] = 0.0f;
}

}  // namespace

const Kernels& table() {
  static const Kernels k = {FLASH_CPU_ISA_NAME,          gemm<float>,     gemm<double>, scores_f64,
                            online_softmax<float>, online_softmax<double>, probabilities, softmax_grad, widen};
  return k;
}

}  // namespace flash::cpu::FLASH_CPU_ISA

#if defined(FLASH_CPU_PORTABLE)
// ---- The run-time choice -----------------------------------------------------------------------------------------
//
// The fastest level this CPU (and the OS's saved register state, which __builtin_cpu_supports also checks) runs,
// among the levels the build has (FLASH_CPU_HAS_<LEVEL>), picked once.
namespace flash::cpu {

#if defined(FLASH_CPU_HAS_AVX2)
namespace avx2 { const Kernels& table(); }
#endif
#if defined(FLASH_CPU_HAS_AVX512)
namespace avx512 { const Kernels& table(); }
#endif
#if defined(FLASH_CPU_HAS_AVX512BF16)
namespace avx512bf16 { const Bf16Kernels& table(); }
#endif
#if defined(FLASH_CPU_HAS_SVE256)
namespace sve256 { const Kernels& table(); }
#endif
#if defined(FLASH_CPU_HAS_SVE512)
namespace sve512 { const Kernels& table(); }
#endif

#if defined(__aarch64__)
// The SVE vector length in bytes, 0 without SVE. Asked of the kernel (HWCAP_SVE, then PR_SVE_GET_VL) rather than
// read by an SVE instruction: no SVE code runs on a CPU without it. The length is per thread and inherited; one a
// thread sets for itself after the choice (prctl PR_SVE_SET_VL) would break the SVE levels, as it would any code
// compiled for one width.
[[maybe_unused]] static int sve_bytes() {
#if defined(HWCAP_SVE) && defined(PR_SVE_GET_VL)
  if (!(getauxval(AT_HWCAP) & HWCAP_SVE)) return 0;
  const int vl = prctl(PR_SVE_GET_VL, 0, 0, 0, 0);
  return vl < 0 ? 0 : vl & PR_SVE_VL_LEN_MASK;
#else
  return 0;
#endif
}
#endif

const Kernels& kernels() {
  static const Kernels& chosen = []() -> const Kernels& {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();  // idempotent; needed should the first call come from a constructor
#endif
#if defined(FLASH_CPU_HAS_AVX512)
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
      return avx512::table();
#endif
#if defined(FLASH_CPU_HAS_AVX2)
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return avx2::table();
#endif
#if defined(FLASH_CPU_HAS_SVE512)
    if (sve_bytes() == 64) return sve512::table();
#endif
#if defined(FLASH_CPU_HAS_SVE256)
    if (sve_bytes() == 32) return sve256::table();
#endif
    return portable::table();
  }();
  return chosen;
}

const Bf16Kernels* bf16_kernels() {
  static const Bf16Kernels* chosen = []() -> const Bf16Kernels* {
#if defined(FLASH_CPU_HAS_AVX512) && defined(FLASH_CPU_HAS_AVX512BF16)
    if (&kernels() == &avx512::table() && __builtin_cpu_supports("avx512bf16")) return &avx512bf16::table();
#endif
    return nullptr;
  }();
  return chosen;
}

}  // namespace flash::cpu
#endif  // FLASH_CPU_PORTABLE
#endif  // FLASH_CPU_LEVEL_AVX512BF16
