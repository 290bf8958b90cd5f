// libflash/cuda/sm90/fwd/softmax.cuh -- one consumer warpgroup's arithmetic on a block of scores, in the layout of a
// wgmma m64 accumulator: thread (warp w, lane 4 g + t) holds rows 16 w + g and 16 w + g + 8 of the warpgroup's 64, and
// columns 8 i + 2 t, 8 i + 2 t + 1 of every n8 tile i; a row lives in the 4 lanes of a quad.
//   mask_block: -inf where the block crosses the sequence end or a window edge;
//   OnlineSoftmax::update: Algorithm 1's m' = max(m, rowmax(S)), P = exp(S - m'), l = exp(m - m') l + rowsum(P), in base 2
//     with the scale folded into one FFMA;
//   pack_p: P in the input dtype, as the A operand of the next P V.
// cols: only the block's first `cols` columns are computed (the half-diagonal prologue); a constant at every call.
#pragma once
#include <cmath>
#include <cstdint>

#include "../../ptx/hopper.cuh"
#include "traits.h"

namespace flash::sm90 {

// Masks the scores of key block n for this thread's two rows, row_in_wg and row_in_wg + 8 of the warpgroup whose first
// row is row0 (a query row index).
// (diag_offset, seqlen_k: the call's, or a varlen tile's sequence's with row0 a packed row.)
template <class K>
__device__ __forceinline__ void mask_block(float (&sv)[K::kSRegs], const FwdParams& p, int64_t diag_offset, int64_t seqlen_k,
                                           int n, int row0, int t, int cols) {
  const int64_t col0 = int64_t(n) * K::kBlockN + 2 * t;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t diag = row0 + 8 * r + diag_offset;
    const int64_t lo = p.window_left >= 0 ? diag - p.window_left : 0;
    int64_t hi = p.window_right >= 0 ? diag + p.window_right + 1 : seqlen_k;
    hi = hi > seqlen_k ? seqlen_k : hi;
    const int lo_rel = int(max(min(lo - col0, int64_t(K::kBlockN)), int64_t(-1)));
    const int hi_rel = int(max(min(hi - col0, int64_t(K::kBlockN)), int64_t(-1)));
    // With no left window edge (causal-like masks, the sequence end) only the right compare can cut: half the
    // instructions per element.
    if (p.window_left < 0) {
#pragma unroll
      for (int i = 0; i < cols / 8; ++i)
#pragma unroll
        for (int e = 0; e < 2; ++e)
          if (8 * i + e >= hi_rel) sv[4 * i + 2 * r + e] = -INFINITY;
    } else {
#pragma unroll
      for (int i = 0; i < cols / 8; ++i)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int col = 8 * i + e;
          if (col < lo_rel || col >= hi_rel) sv[4 * i + 2 * r + e] = -INFINITY;
        }
    }
  }
}

template <class K>
__device__ __forceinline__ void mask_block(float (&sv)[K::kSRegs], const FwdParams& p, int n, int row0, int t, int cols) {
  mask_block<K>(sv, p, p.diag_offset, p.seqlen_k, n, row0, t, cols);
}

template <class K>
struct OnlineSoftmax {
  float row_max[2] = {-INFINITY, -INFINITY};  // m of this thread's two rows (raw scores)
  float row_sum[2] = {0.f, 0.f};              // l, this thread's columns only (the quad's are summed at the end)

  // Overwrites sv (S_j) with P_j (fp32) and writes the O correction exp2((m - m') scale_log2) to corr; returns whether any
  // row of the warp needs it (past the first blocks the running max rarely moves, and where it moved in no row the
  // correction is exactly 1: the O rescale is skipped, bit for bit the same). kSfuTurns: the exps wait for this
  // warpgroup's turn at the SFU (barrier kSfuTurn + wg); `zero` (0, opaque to the compiler) ties them to the wait, and
  // the hand-over waits for both rows' sums, i.e. for every exp of the block.
  __device__ __forceinline__ bool update(float (&sv)[K::kSRegs], bool first, float (&corr)[2], int cols, float scale_log2,
                                         int wg) {
    float max_new[2];
    bool max_moved = false;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float m = -INFINITY;
#pragma unroll
      for (int i = 0; i < cols / 8; ++i) m = fmaxf(m, fmaxf(sv[4 * i + 2 * r], sv[4 * i + 2 * r + 1]));
      m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
      m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
      max_new[r] = fmaxf(row_max[r], m);
      max_moved |= max_new[r] != row_max[r];
    }
    const bool rescale = !first && __any_sync(0xffffffffu, max_moved);
    float zero = 0.f;
    if constexpr (K::kSfuTurns) asm volatile("bar.sync %1, 256;\n\tmov.b32 %0, 0;\n" : "=f"(zero) : "r"(kSfuTurn + wg) : "memory");
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      // A row with nothing visible yet keeps max -inf: subtract 0 so exp2(-inf - -inf) is never NaN.
      float max_scaled = max_new[r] == -INFINITY ? 0.f : max_new[r] * scale_log2;
      if constexpr (K::kSfuTurns) max_scaled += zero;
      float sum = 0.f;
#pragma unroll
      for (int i = 0; i < cols / 8; ++i) {
        const float p0 = exp2f(sv[4 * i + 2 * r] * scale_log2 - max_scaled);
        const float p1 = exp2f(sv[4 * i + 2 * r + 1] * scale_log2 - max_scaled);
        sum += p0 + p1;
        sv[4 * i + 2 * r] = p0;
        sv[4 * i + 2 * r + 1] = p1;
      }
      corr[r] = rescale ? exp2f(row_max[r] * scale_log2 - max_scaled) : 1.f;
      row_sum[r] = row_sum[r] * corr[r] + sum;
      row_max[r] = max_new[r];
    }
    if constexpr (K::kSfuTurns)
      asm volatile("bar.arrive %0, 256;\n" ::"r"(kSfuTurn + (wg + 1) % K::kConsumers), "f"(row_sum[0]), "f"(row_sum[1]) : "memory");
    return rescale;
  }
};

// P in the input dtype: the accumulator of n8 tiles 2c and 2c+1 is the A fragment of k16 step c,
// {row g cols 2t | row g+8 cols 2t | row g cols 8+2t | row g+8 cols 8+2t}; the columns past `cols` are zeros.
template <class K>
__device__ __forceinline__ void pack_p(const float (&sv)[K::kSRegs], uint32_t (&pf)[K::kBlockN / 16][4], int cols) {
#pragma unroll
  for (int i = 0; i < cols / 8; ++i)
#pragma unroll
    for (int r = 0; r < 2; ++r) pf[i / 2][(i % 2) * 2 + r] = ptx::pack2<K::kDType>(sv[4 * i + 2 * r], sv[4 * i + 2 * r + 1]);
#pragma unroll
  for (int i = cols / 8; i < K::kBlockN / 8; ++i)
#pragma unroll
    for (int r = 0; r < 2; ++r) pf[i / 2][(i % 2) * 2 + r] = 0u;
}

// O *= the correction of its two rows.
template <class K>
__device__ __forceinline__ void rescale_o(float (&acc_o)[K::kORegs], const float (&c)[2]) {
#pragma unroll
  for (int i = 0; i < K::kHeadDim / 8; ++i)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      acc_o[4 * i + 2 * r] *= c[r];
      acc_o[4 * i + 2 * r + 1] *= c[r];
    }
}

}  // namespace flash::sm90
