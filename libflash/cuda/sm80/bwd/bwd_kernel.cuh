// libflash/cuda/sm80/bwd/bwd_kernel.cuh -- FlashAttention-2's backward for sm_80 and newer (mma.sync).
//
// Four kernels, one stream:
//   [bmap]      block-sparse masks only: the compact per-query-block lists become a dense byte map, so a
//               key block can ask "does query block i list me?" in O(1) (the transpose the backward needs).
//   preprocess  D = rowsum(dO o O) (fp32), LSE * log2(e) (+inf for rows that see no key or padding, so
//               the recomputed P is exactly 0 there), zero the fp32 dQ accumulator (and the semaphores).
//   main        grid (key block j, batch * kv head). K_j and V_j stay in shared memory; warp w owns 16 key
//               rows (or half their head-dim columns when split_d = 2) and keeps dK, dV for them in fp32
//               registers. For every query head of the GQA group and every query block i that sees key
//               block j (the forward's block ranges, transposed; block-sparse tiles looked up in the map):
//                 S^T  = K_j Q_i^T,  P^T = exp2(S^T * scale_log2 - LSE2_i)     (recomputed from the LSE)
//                 dP^T = V_j dO_i^T, dS^T = P^T o (dP^T - D_i)
//                 dV  += P^T dO_i,   dK += dS^T Q_i       (A operands straight from the accumulators)
//                 dQ_i += dS K_j                          (dS through shared memory; fp32 atomics)
//               Q_i, dO_i (and LSE2_i, D_i) are double-buffered with cp.async: block i+1 loads during i.
//               Deterministic mode: the adds into query block i happen in key-block order, serialised by
//               a per-(b, h, i) counter (the CTA of key block j waits until j - j_first(i) blocks added).
//   convert     dQ = acc * scale in the dtype. dK (times scale) and dV are written by the main kernel.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "../../../params.h"
#include "../../../error.h"
#include "../../runtime.h"
#include "../../ptx/sm80.cuh"
#include "bwd.h"

namespace flash::bwd {

using ptx::cp_async_16;
using ptx::cp_async_commit;
using ptx::cp_async_wait;
using ptx::Elem;
using ptx::ld_acquire;
using ptx::ldmatrix_x4;
using ptx::ldmatrix_x4_trans;
using ptx::st_release;

struct KArgs {
  float* dq_acc;
  float* lse2;
  float* dsum;
  int32_t* sem;
  uint8_t* bmap;
  int64_t sq_pad;
  int dc;
  int bm_b, bm_h, n_mqb, n_mkb;
};

// ---- Shared layout: [rows][kHeadDim] tiles in pages of 64 columns (128-byte rows), chunk ^= row % 8 ----
__device__ __forceinline__ uint32_t in_page(int row, int cc) { return uint32_t(row * 128 + ((cc ^ (row & 7)) << 4)); }
template <int kRows>
__device__ __forceinline__ uint32_t tile_off(int row, int chunk) {
  return uint32_t((chunk >> 3) * kRows * 128) + in_page(row, chunk & 7);
}

template <int kHeadDim, int kVariant, DType kDType_>
struct BwdTraits {
  static constexpr DType kDType = kDType_;
  static constexpr BwdShape s = bwd_shape(kHeadDim, kVariant);
  static_assert(s.head_dim == kHeadDim, "no bwd shape for this head dim");
  static constexpr int kD = kHeadDim;
  static constexpr int kBlockM = s.block_m, kBlockN = s.block_n, kWarps = s.warps, kSplitD = s.split_d;
  static constexpr int kQStages = s.q_stages, kDQCols = s.dq_cols;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kTag = 0;  // instantiation tag of the helper kernels (launch_bwd_with)
  static constexpr int kMinBlocks = kWarps == 4 ? 2 : 1;  // 4 warps: two CTAs per SM hide each other's syncs
  static constexpr int kDPart = kD / kSplitD;  // dK/dV columns per warp
  static_assert(kBlockN == 16 * kWarps / kSplitD, "16 key rows per warp (group)");
  static_assert(kD % 64 == 0 && kBlockM == 64 && kDPart % 16 == 0 && kD % kDQCols == 0, "tile shape");
  static constexpr int kNS = kBlockM / 8;  // n8 tiles of S^T (queries)
  static constexpr uint32_t kKBytes = kBlockN * kD * 2;
  static constexpr uint32_t kQBytes = kBlockM * kD * 2;
  static constexpr uint32_t kOffK = 0, kOffV = kKBytes, kOffQ = 2 * kKBytes;
  static constexpr uint32_t kOffDO = kOffQ + kQStages * kQBytes;
  static constexpr uint32_t kOffL = kOffDO + kQStages * kQBytes;          // lse2 [stages][kBlockM]
  static constexpr uint32_t kOffDsum = kOffL + kQStages * kBlockM * 4;    // dsum [stages][kBlockM]
  static constexpr uint32_t kOffDS = kOffDsum + kQStages * kBlockM * 4;   // dS^T [kBlockN][kBlockM]
  static constexpr uint32_t kSmem = kOffDS + kBlockN * kBlockM * 2;
  static_assert(kSmem == s.smem_bytes(), "smem formula");
};

// ---- Preprocess: D, LSE2, zero dQ accumulator ---------------------------------------------------------
// kTag: each main kernel's launch instantiates its own copies (bwd_main 0, bwd_main_sm90 90), so a copy
// compiled for sm_90a only never stands in for the one an sm_80 device needs.
template <DType kDType, int kTag>
__global__ void __launch_bounds__(256) bwd_preprocess(const __grid_constant__ BwdParams p, const KArgs w) {
  using T = typename Elem<kDType>::type;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t row = int64_t(blockIdx.x) * 8 + warp;
  const int bh = blockIdx.y, b = bh / p.heads_q, h = bh % p.heads_q;
  if (row >= w.sq_pad) return;
  float lse2 = INFINITY, dsum = 0.f;
  if (row < p.seqlen_q) {
    const T* o = static_cast<const T*>(p.o) + b * p.o_batch_stride + row * p.o_row_stride + h * p.o_head_stride;
    const T* d_o = static_cast<const T*>(p.d_o) + b * p.do_batch_stride + row * p.do_row_stride + h * p.do_head_stride;
    float acc = 0.f;
    for (int c = lane; c * 8 < p.head_dim; c += 32) {
      const uint4 ov = *reinterpret_cast<const uint4*>(o + c * 8);
      const uint4 dv = *reinterpret_cast<const uint4*>(d_o + c * 8);
      const T* oe = reinterpret_cast<const T*>(&ov);
      const T* de = reinterpret_cast<const T*>(&dv);
#pragma unroll
      for (int e = 0; e < 8; ++e) acc += float(oe[e]) * float(de[e]);
    }
#pragma unroll
    for (int m = 16; m >= 1; m /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, m);
    const float lse = p.lse[b * p.lse_batch_stride + h * p.lse_head_stride + row * p.lse_row_stride];
    if (lse != -INFINITY) {
      lse2 = lse * 1.4426950408889634f;
      dsum = acc;
    }
  }
  if (lane == 0) {
    w.lse2[bh * w.sq_pad + row] = lse2;
    w.dsum[bh * w.sq_pad + row] = dsum;
    if (w.sem != nullptr && row % 64 == 0) w.sem[bh * (w.sq_pad / 64) + row / 64] = 0;
  }
  float4* acc_row = reinterpret_cast<float4*>(w.dq_acc + (bh * w.sq_pad + row) * w.dc);
  for (int c = lane; c < w.dc / 4; c += 32) acc_row[c] = make_float4(0.f, 0.f, 0.f, 0.f);
}

// ---- Block-sparse lists -> byte map --------------------------------------------------------------------
template <DType kDType, int kTag>  // (a template only so that each .cu's copy is a weak symbol)
__global__ void bwd_build_bmap(const __grid_constant__ BwdParams p, const KArgs w) {
  const BlockMaskParams& m = p.block_mask;
  const int qb = blockIdx.x, bhm = blockIdx.y, b = bhm / w.bm_h, h = bhm % w.bm_h;
  int count = m.kv_num_blocks[b * m.num_batch_stride + h * m.num_head_stride + int64_t(qb) * m.num_qblock_stride];
  count = count < 0 ? 0 : (count > m.max_kv_blocks ? m.max_kv_blocks : count);
  const int32_t* list = m.kv_indices + b * m.idx_batch_stride + h * m.idx_head_stride + int64_t(qb) * m.idx_qblock_stride;
  uint8_t* row = w.bmap + (int64_t(bhm) * w.n_mqb + qb) * w.n_mkb;
  for (int t = threadIdx.x; t < count; t += blockDim.x) {
    const int kb = list[int64_t(t) * m.idx_stride];
    if (kb >= 0 && kb < w.n_mkb) row[kb] = 1;
  }
}

// ---- Convert: dQ = acc * scale ---------------------------------------------------------------------------
template <DType kDType, int kTag>
__global__ void __launch_bounds__(256) bwd_convert_dq(const __grid_constant__ BwdParams p, const KArgs w) {
  using E = Elem<kDType>;
  using T = typename E::type;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t row = int64_t(blockIdx.x) * 8 + warp;
  const int bh = blockIdx.y, b = bh / p.heads_q, h = bh % p.heads_q;
  if (row >= p.seqlen_q) return;
  const float* acc = w.dq_acc + (bh * w.sq_pad + row) * w.dc;
  T* dq = static_cast<T*>(p.dq) + b * p.dq_batch_stride + row * p.dq_row_stride + h * p.dq_head_stride;
  for (int c = lane; c * 8 < p.head_dim; c += 32) {
    const float4 x = reinterpret_cast<const float4*>(acc)[2 * c];
    const float4 y = reinterpret_cast<const float4*>(acc)[2 * c + 1];
    uint4 out;
    out.x = E::pack(x.x * p.scale, x.y * p.scale);
    out.y = E::pack(x.z * p.scale, x.w * p.scale);
    out.z = E::pack(y.x * p.scale, y.y * p.scale);
    out.w = E::pack(y.z * p.scale, y.w * p.scale);
    *reinterpret_cast<uint4*>(dq + c * 8) = out;
  }
}

// ---- One CTA's work in the main kernels (mma.sync and wgmma) -------------------------------------------
// Key block blockIdx.x of kv head (b, h_kv) = blockIdx.y: its K and V tiles (the constructor starts their
// copies), and the steps -- (query head of the GQA group, query block) pairs, s = head-in-group * n_i +
// block -- whose query rows see some key of it.
template <class K>
struct KeyBlockWork {
  using T = typename Elem<K::kDType>::type;
  static constexpr int kBlockM = K::kBlockM, kBlockN = K::kBlockN, kCPR = K::kD / 8;  // 16-byte chunks per row
  using RowsM = std::integral_constant<int, kBlockM>;
  using RowsN = std::integral_constant<int, kBlockN>;

  const BwdParams& p;
  const KArgs& w;
  uint32_t smem0;
  int tid;
  int n_block, b, h_kv, k0, k_rows, chunks_valid;
  int i_lo, n_i, ratio, n_steps;  // query blocks [i_lo, i_lo + n_i) of each of the group's ratio heads
  bool sparse, det;

  __device__ __forceinline__ KeyBlockWork(const BwdParams& p_, const KArgs& w_, uint32_t smem0_, int tid_)
      : p(p_), w(w_), smem0(smem0_), tid(tid_) {
    n_block = blockIdx.x;
    b = blockIdx.y / p.heads_kv, h_kv = blockIdx.y % p.heads_kv;
    k0 = n_block * kBlockN;
    k_rows = min(kBlockN, p.seqlen_k - k0);
    chunks_valid = p.head_dim / 8;

    const T* kp = static_cast<const T*>(p.k) + b * p.k_batch_stride + int64_t(k0) * p.k_row_stride + h_kv * p.k_head_stride;
    const T* vp = static_cast<const T*>(p.v) + b * p.v_batch_stride + int64_t(k0) * p.v_row_stride + h_kv * p.v_head_stride;
    load_tile(RowsN{}, smem0 + K::kOffK, kp, p.k_row_stride, k_rows);
    load_tile(RowsN{}, smem0 + K::kOffV, vp, p.v_row_stride, k_rows);
    cp_async_commit();

    // Query rows that see some key of this block: [q_lo, q_hi) (the forward's key range, transposed).
    const int64_t k_last = k0 + k_rows - 1;
    int64_t q_lo = p.window_right >= 0 ? k0 - p.diag_offset - p.window_right : 0;
    int64_t q_hi = p.window_left >= 0 ? k_last - p.diag_offset + p.window_left + 1 : p.seqlen_q;
    q_lo = max(q_lo, int64_t(0));
    q_hi = min(q_hi, int64_t(p.seqlen_q));
    i_lo = int(q_lo / kBlockM);
    n_i = q_lo < q_hi ? int((q_hi + kBlockM - 1) / kBlockM) - i_lo : 0;
    ratio = p.head_ratio;
    n_steps = n_i * ratio;
    sparse = p.has_block_mask;
    det = p.deterministic;
  }

  // global -> shared for a [kRows][kD] tile; rows past rows_valid and chunks past the head dim read 0.
  template <class RowsTag>
  __device__ __forceinline__ void load_tile(RowsTag, uint32_t dst, const T* src, int64_t row_stride, int rows_valid) const {
    constexpr int kRows = RowsTag::value;
    static_assert((kRows * kCPR) % K::kThreads == 0, "load pattern");
#pragma unroll
    for (int it = 0; it < kRows * kCPR / K::kThreads; ++it) {
      const int idx = tid + it * K::kThreads, row = idx / kCPR, chunk = idx % kCPR;
      const bool ok = row < rows_valid && chunk < chunks_valid;
      cp_async_16(dst + tile_off<kRows>(row, chunk), ok ? src + row * row_stride + chunk * 8 : src, ok ? 16 : 0);
    }
  }

  // Block-sparse: is (query block i, the 16 key rows starting at key) listed?
  __device__ __forceinline__ bool listed(int h, int i, int key) const {
    if (key >= p.seqlen_k) return false;
    const int qb = int(int64_t(i) * kBlockM / p.block_mask.block_m);
    const int kb = key / p.block_mask.block_n;
    const int mb = w.bm_b == 1 ? 0 : b, mh = w.bm_h == 1 ? 0 : h;
    return w.bmap[((int64_t(mb) * w.bm_h + mh) * w.n_mqb + qb) * w.n_mkb + kb] != 0;
  }
  __device__ __forceinline__ bool tile_listed(int h, int i) const {
    for (int kt = 0; kt < kBlockN / 16; ++kt)
      if (listed(h, i, k0 + kt * 16)) return true;
    return false;
  }
  // Next step >= s that has work (deterministic mode visits every step of the range: the counters).
  __device__ __forceinline__ int next_step(int s) const {
    if (sparse && !det)
      while (s < n_steps && !tile_listed(h_kv * ratio + s / n_i, i_lo + s % n_i)) ++s;
    return s;
  }

  // Step s's Q and dO tiles, LSE*log2(e) and D rows into buffer `stage` (cp.async; the caller commits).
  __device__ __forceinline__ void load_q(int s, int stage) const {
    const int h = h_kv * ratio + s / n_i, i = i_lo + s % n_i, q0 = i * kBlockM;
    const int q_rows = min(kBlockM, p.seqlen_q - q0);
    const T* qp = static_cast<const T*>(p.q) + b * p.q_batch_stride + int64_t(q0) * p.q_row_stride + h * p.q_head_stride;
    const T* dop = static_cast<const T*>(p.d_o) + b * p.do_batch_stride + int64_t(q0) * p.do_row_stride + h * p.do_head_stride;
    load_tile(RowsM{}, smem0 + K::kOffQ + stage * K::kQBytes, qp, p.q_row_stride, q_rows);
    load_tile(RowsM{}, smem0 + K::kOffDO + stage * K::kQBytes, dop, p.do_row_stride, q_rows);
    const int64_t bh = int64_t(b) * p.heads_q + h;
    if (tid < kBlockM / 4)
      cp_async_16(smem0 + K::kOffL + stage * kBlockM * 4 + tid * 16, w.lse2 + bh * w.sq_pad + q0 + tid * 4, 16);
    else if (tid < kBlockM / 2)
      cp_async_16(smem0 + K::kOffDsum + stage * kBlockM * 4 + (tid - kBlockM / 4) * 16,
                  w.dsum + bh * w.sq_pad + q0 + (tid - kBlockM / 4) * 4, 16);
  }
};

// ---- Main kernel -----------------------------------------------------------------------------------------
template <class K>
__global__ void __launch_bounds__(K::kThreads, K::kMinBlocks) bwd_main(const __grid_constant__ BwdParams p, const KArgs w) {
  using E = Elem<K::kDType>;
  using T = typename E::type;
  constexpr int kD = K::kD, kBlockM = K::kBlockM, kBlockN = K::kBlockN, kNS = K::kNS, kDPart = K::kDPart;

  extern __shared__ __align__(1024) uint8_t smem[];
  const uint32_t smem0 = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const uint32_t k_smem = smem0 + K::kOffK, v_smem = smem0 + K::kOffV, ds_smem = smem0 + K::kOffDS;

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, t = lane % 4;
  const int key_tile = warp / K::kSplitD, dpart = warp % K::kSplitD;
  const int kr0 = key_tile * 16;  // this warp's first key row in the block

  // This CTA's key block, its K and V copies (started here), and the steps that see it.
  const KeyBlockWork<K> work(p, w, smem0, tid);
  const int n_block = work.n_block, b = work.b, h_kv = work.h_kv, k0 = work.k0;
  const int i_lo = work.i_lo, n_i = work.n_i, ratio = work.ratio, n_steps = work.n_steps;
  const bool sparse = work.sparse, det = work.det;
  const float scale_log2 = p.scale_log2;
  const int64_t sq_pad = w.sq_pad;
  auto listed = [&](int h, int i, int key) { return work.listed(h, i, key); };
  auto next_step = [&](int s) { return work.next_step(s); };
  auto load_q = [&](int s, int stage) { work.load_q(s, stage); };

  // Per-lane ldmatrix offsets inside a page (XORed with the step's chunk).
  const uint32_t a_lane = in_page(lane & 15, lane >> 4);                          // A: rows 0-15, chunk +0/+1
  const uint32_t b_lane = in_page((lane & 7) + ((lane >> 4) << 3), (lane >> 3) & 1);  // B: rows 0-15, chunk +0/+1
  const uint32_t t_lane = in_page((lane & 7) + (((lane >> 3) & 1) << 3), lane >> 4);  // B^T: k rows 0-15, chunk +0/+1

  float acc_dk[kDPart / 8][4], acc_dv[kDPart / 8][4];
#pragma unroll
  for (int dt = 0; dt < kDPart / 8; ++dt)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc_dk[dt][e] = acc_dv[dt][e] = 0.f;

  int step = next_step(0);
  if (step < n_steps) load_q(step, 0);
  cp_async_commit();

  for (int it = 0; step < n_steps; ++it) {
    const int stage = K::kQStages == 2 ? (it & 1) : 0;
    const int h = h_kv * ratio + step / n_i, i = i_lo + step % n_i, q0 = i * kBlockM;
    const int64_t bh = int64_t(b) * p.heads_q + h;
    cp_async_wait<0>();
    __syncthreads();  // Q_i, dO_i landed; every warp is done with the previous step (dS, the other stage)
    const int step_next = next_step(step + 1);
    if constexpr (K::kQStages == 2) {
      if (step_next < n_steps) load_q(step_next, stage ^ 1);
      cp_async_commit();
    }
    const uint32_t q_smem = smem0 + K::kOffQ + stage * K::kQBytes;
    const uint32_t do_smem = smem0 + K::kOffDO + stage * K::kQBytes;
    const float* lse2_s = reinterpret_cast<const float*>(smem + K::kOffL + stage * kBlockM * 4);
    const float* dsum_s = reinterpret_cast<const float*>(smem + K::kOffDsum + stage * kBlockM * 4);

    // S^T = K_w Q_i^T, dP^T = V_w dO_i^T (16 keys x kBlockM queries per warp).
    float s[kNS][4], dp[kNS][4];
#pragma unroll
    for (int nt = 0; nt < kNS; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[nt][e] = dp[nt][e] = 0.f;
#pragma unroll
    for (int ks = 0; ks < kD / 16; ++ks) {
      const int chunk = ks * 2, page = chunk >> 3, cc = chunk & 7;
      uint32_t ak[4], av[4];
      ldmatrix_x4(ak, k_smem + page * kBlockN * 128 + kr0 * 128 + (a_lane ^ (cc << 4)));
      ldmatrix_x4(av, v_smem + page * kBlockN * 128 + kr0 * 128 + (a_lane ^ (cc << 4)));
#pragma unroll
      for (int np = 0; np < kBlockM / 16; ++np) {
        uint32_t bq[4], bo[4];
        ldmatrix_x4(bq, q_smem + page * kBlockM * 128 + np * 16 * 128 + (b_lane ^ (cc << 4)));
        ldmatrix_x4(bo, do_smem + page * kBlockM * 128 + np * 16 * 128 + (b_lane ^ (cc << 4)));
        E::mma(s[2 * np], ak, bq[0], bq[1]);
        E::mma(s[2 * np + 1], ak, bq[2], bq[3]);
        E::mma(dp[2 * np], av, bo[0], bo[1]);
        E::mma(dp[2 * np + 1], av, bo[2], bo[3]);
      }
    }

    // P^T (recomputed from the LSE), dS^T = P^T o (dP^T - D). Masked elements get P = 0.
    const int64_t key_first = k0 + kr0;
    bool warp_visible = true;
    if (sparse) warp_visible = listed(h, i, int(key_first));
    const bool need_mask = !warp_visible || k0 + kBlockN > p.seqlen_k ||
                           (p.window_left >= 0 && k0 < int64_t(q0 + kBlockM - 1) + p.diag_offset - p.window_left) ||
                           (p.window_right >= 0 && int64_t(k0 + kBlockN - 1) > q0 + p.diag_offset + p.window_right);
    uint32_t pk[kNS][2], dsk[kNS][2];
#pragma unroll
    for (int nt = 0; nt < kNS; ++nt) {
      const float2 l2 = *reinterpret_cast<const float2*>(lse2_s + nt * 8 + 2 * t);
      const float2 dd = *reinterpret_cast<const float2*>(dsum_s + nt * 8 + 2 * t);
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float pv[2], dv[2];
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          pv[e] = exp2f(s[nt][2 * r + e] * scale_log2 - (e ? l2.y : l2.x));
          if (need_mask) {
            const int64_t key = key_first + g + 8 * r, q = q0 + nt * 8 + 2 * t + e, diag = q + p.diag_offset;
            const bool vis = warp_visible && key < p.seqlen_k && (p.window_left < 0 || key >= diag - p.window_left) &&
                             (p.window_right < 0 || key <= diag + p.window_right);
            if (!vis) pv[e] = 0.f;
          }
          dv[e] = pv[e] * (dp[nt][2 * r + e] - (e ? dd.y : dd.x));
        }
        pk[nt][r] = E::pack(pv[0], pv[1]);
        dsk[nt][r] = E::pack(dv[0], dv[1]);
      }
    }
    // dS^T to shared memory ([key][query], 128-byte rows) for dQ = dS K.
    if (dpart == 0) {
#pragma unroll
      for (int nt = 0; nt < kNS; ++nt)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int row = kr0 + g + 8 * r;
          asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(ds_smem + in_page(row, nt) + 4 * t), "r"(dsk[nt][r]));
        }
    }

    // dV += P^T dO_i, dK += dS^T Q_i (this warp's kDPart columns).
#pragma unroll
    for (int kc = 0; kc < kBlockM / 16; ++kc) {
      const uint32_t ap[4] = {pk[2 * kc][0], pk[2 * kc][1], pk[2 * kc + 1][0], pk[2 * kc + 1][1]};
      const uint32_t as[4] = {dsk[2 * kc][0], dsk[2 * kc][1], dsk[2 * kc + 1][0], dsk[2 * kc + 1][1]};
#pragma unroll
      for (int dp2 = 0; dp2 < kDPart / 16; ++dp2) {
        const int chunk = dpart * (kDPart / 8) + dp2 * 2, page = chunk >> 3, cc = chunk & 7;
        uint32_t bo[4], bq[4];
        ldmatrix_x4_trans(bo, do_smem + page * kBlockM * 128 + kc * 16 * 128 + (t_lane ^ (cc << 4)));
        ldmatrix_x4_trans(bq, q_smem + page * kBlockM * 128 + kc * 16 * 128 + (t_lane ^ (cc << 4)));
        E::mma(acc_dv[2 * dp2], ap, bo[0], bo[1]);
        E::mma(acc_dv[2 * dp2 + 1], ap, bo[2], bo[3]);
        E::mma(acc_dk[2 * dp2], as, bq[0], bq[1]);
        E::mma(acc_dk[2 * dp2 + 1], as, bq[2], bq[3]);
      }
    }

    // Deterministic: wait until every earlier key block of this query block has added its dQ part.
    int32_t* sem = nullptr;
    int rank = 0;
    if (det) {
      sem = w.sem + bh * (sq_pad / 64) + i;
      const int64_t k_first = q0 + p.diag_offset - (p.window_left >= 0 ? p.window_left : 0);
      const int j_first = p.window_left >= 0 ? int(max(k_first, int64_t(0)) / kBlockN) : 0;
      rank = n_block - j_first;
      if (tid == 0)
        while (ld_acquire(sem) != rank) __nanosleep(32);
    }
    __syncthreads();  // dS^T complete in shared memory

    // dQ_i += dS K_j: work items of 16 query rows x kDQCols columns, spread over the warps.
    constexpr int kMQ = kBlockM / 16, kItems = kMQ * (kD / K::kDQCols);
    const uint32_t ds_lane = in_page((lane & 7) + ((lane >> 4) << 3), (lane >> 3) & 1);
    float* dq_rows = w.dq_acc + (bh * sq_pad + q0) * w.dc;
#pragma unroll
    for (int item = warp; item < kItems; item += K::kWarps) {
      const int mq = item % kMQ, cq = item / kMQ;
      float acc[K::kDQCols / 8][4];
#pragma unroll
      for (int dt = 0; dt < K::kDQCols / 8; ++dt)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[dt][e] = 0.f;
#pragma unroll
      for (int kk = 0; kk < kBlockN / 16; ++kk) {
        uint32_t a[4];
        ldmatrix_x4_trans(a, ds_smem + kk * 16 * 128 + (ds_lane ^ ((mq * 2) << 4)));
#pragma unroll
        for (int dp2 = 0; dp2 < K::kDQCols / 16; ++dp2) {
          const int chunk = cq * (K::kDQCols / 8) + dp2 * 2, page = chunk >> 3, cc = chunk & 7;
          uint32_t bk[4];
          ldmatrix_x4_trans(bk, k_smem + page * kBlockN * 128 + kk * 16 * 128 + (t_lane ^ (cc << 4)));
          E::mma(acc[2 * dp2], a, bk[0], bk[1]);
          E::mma(acc[2 * dp2 + 1], a, bk[2], bk[3]);
        }
      }
#pragma unroll
      for (int dt = 0; dt < K::kDQCols / 8; ++dt)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          float* dst = dq_rows + (mq * 16 + g + 8 * r) * w.dc + cq * K::kDQCols + dt * 8 + 2 * t;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
          atomicAdd(reinterpret_cast<float2*>(dst), make_float2(acc[dt][2 * r], acc[dt][2 * r + 1]));  // one v2 red
#else
          atomicAdd(dst, acc[dt][2 * r]);
          atomicAdd(dst + 1, acc[dt][2 * r + 1]);
#endif
        }
    }
    if (det) {
      __threadfence();
      __syncthreads();
      if (tid == 0) st_release(sem, rank + 1);
    }

    if constexpr (K::kQStages == 1) {
      __syncthreads();  // every warp is done with Q_i, dO_i, dS before the next load overwrites them
      if (step_next < n_steps) load_q(step_next, 0);
      cp_async_commit();
    }
    step = step_next;
  }

  // Epilogue: dK * scale and dV, this warp's rows and columns, straight from the accumulators.
  const float scale = p.scale;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int key = k0 + kr0 + g + 8 * r;
    if (key >= p.seqlen_k) continue;
    T* dk = static_cast<T*>(p.dk) + b * p.dk_batch_stride + int64_t(key) * p.dk_row_stride + h_kv * p.dk_head_stride;
    T* dv = static_cast<T*>(p.dv) + b * p.dv_batch_stride + int64_t(key) * p.dv_row_stride + h_kv * p.dv_head_stride;
#pragma unroll
    for (int dt = 0; dt < kDPart / 8; ++dt) {
      const int col = dpart * kDPart + dt * 8 + 2 * t;
      if (col < p.head_dim) {
        *reinterpret_cast<uint32_t*>(dk + col) = E::pack(acc_dk[dt][2 * r] * scale, acc_dk[dt][2 * r + 1] * scale);
        *reinterpret_cast<uint32_t*>(dv + col) = E::pack(acc_dv[dt][2 * r], acc_dv[dt][2 * r + 1]);
      }
    }
  }
}

// ---- Host launch -----------------------------------------------------------------------------------------
// Every main kernel (bwd_main here, bwd_main_sm90 in bwd_kernel_sm90.cuh) runs between the same
// preprocess and convert kernels over the same workspace; K supplies kDType, kBlockN, kThreads.
template <class K, class Kernel>
int32_t launch_bwd_with(const BwdParams& p, Kernel* kernel, uint32_t smem_bytes) {
  constexpr DType kDType = K::kDType;
  const WsLayout l = ws_layout(p);
  if (p.workspace_size < l.total || (l.total > 0 && p.workspace == nullptr))
    return fail(FLASH_ERROR_INTERNAL, "sm80 bwd: workspace of ", p.workspace_size, " bytes, need ", l.total);
  uint8_t* ws = static_cast<uint8_t*>(p.workspace);
  KArgs w;
  w.dq_acc = reinterpret_cast<float*>(ws + l.dq_acc);
  w.lse2 = reinterpret_cast<float*>(ws + l.lse2);
  w.dsum = reinterpret_cast<float*>(ws + l.dsum);
  w.sem = p.deterministic ? reinterpret_cast<int32_t*>(ws + l.sem) : nullptr;
  w.bmap = p.has_block_mask ? ws + l.bmap : nullptr;
  w.sq_pad = l.sq_pad;
  w.dc = l.dc;
  w.bm_b = l.bm_b, w.bm_h = l.bm_h, w.n_mqb = l.n_mqb, w.n_mkb = l.n_mkb;
  cudaStream_t stream = static_cast<cudaStream_t>(p.stream);
  const int bh = p.batch * p.heads_q;

  if (p.has_block_mask && l.n_mqb > 0 && l.n_mkb > 0) {
    const size_t bytes = size_t(l.bm_b) * l.bm_h * l.n_mqb * l.n_mkb;
    if (const cudaError_t e = cudaMemsetAsync(w.bmap, 0, bytes, stream); e != cudaSuccess)
      return cuda::status_from(e, "cudaMemsetAsync(sm80 bwd block map)");
    bwd_build_bmap<kDType, K::kTag><<<dim3(l.n_mqb, l.bm_b * l.bm_h), 128, 0, stream>>>(p, w);
    if (const int32_t s = cuda::check_launch("sm80 bwd block map"); s != FLASH_OK) return s;
  }
  bwd_preprocess<kDType, K::kTag><<<dim3(unsigned(l.sq_pad / 8), bh), 256, 0, stream>>>(p, w);
  if (const int32_t s = cuda::check_launch("sm80 bwd preprocess"); s != FLASH_OK) return s;

  if (p.seqlen_k > 0) {
    if (const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes);
        e != cudaSuccess)
      return cuda::status_from(e, "cudaFuncSetAttribute(sm80 bwd, MaxDynamicSharedMemorySize)");
    const dim3 grid((p.seqlen_k + K::kBlockN - 1) / K::kBlockN, p.batch * p.heads_kv);
    kernel<<<grid, K::kThreads, smem_bytes, stream>>>(p, w);
    if (const int32_t s = cuda::check_launch("sm80 bwd main kernel"); s != FLASH_OK) return s;
  }
  if (p.seqlen_q > 0) {
    bwd_convert_dq<kDType, K::kTag><<<dim3(unsigned((p.seqlen_q + 7) / 8), bh), 256, 0, stream>>>(p, w);
    if (const int32_t s = cuda::check_launch("sm80 bwd convert dq"); s != FLASH_OK) return s;
  }
  return FLASH_OK;
}

template <int kHeadDim, int kVariant, DType kDType>
int32_t launch_bwd(const BwdParams& p) {
  using K = BwdTraits<kHeadDim, kVariant, kDType>;
  return launch_bwd_with<K>(p, bwd_main<K>, K::kSmem);
}

}  // namespace flash::bwd

// One line per .cu file: FLASH_SM80_BWD_INSTANTIATE(128, 0, BF16)
#define FLASH_SM80_BWD_INSTANTIATE(D, VARIANT, DTYPE) \
  template int32_t flash::bwd::launch_bwd<D, VARIANT, flash::DType::DTYPE>(const flash::BwdParams&);
