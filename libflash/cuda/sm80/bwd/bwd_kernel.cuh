// libflash/cuda/sm80/bwd/bwd_kernel.cuh -- FlashAttention-2's backward main kernel for sm_80 and newer (mma.sync),
// between the preprocess and convert kernels of bwd_common.cuh.
//
// Grid (key block j, batch * kv head). K_j and V_j stay in shared memory; warp w owns 16 key rows (or half
// their head-dim columns when split_d = 2) and keeps dK, dV for them in fp32 registers. For every query head
// of the GQA group and every query block i that sees key block j (the forward's block ranges, transposed;
// block-sparse tiles looked up in the map):
//   S^T  = K_j Q_i^T,  P^T = exp2(S^T * scale_log2 - LSE2_i)     (recomputed from the LSE)
//   dP^T = V_j dO_i^T, dS^T = P^T o (dP^T - D_i)
//   dV  += P^T dO_i,   dK += dS^T Q_i       (A operands straight from the accumulators)
//   dQ_i += dS K_j                          (dS through shared memory; fp32 atomics)
// Q_i, dO_i (and LSE2_i, D_i) are double-buffered with cp.async: block i+1 loads during i. Deterministic
// mode: the adds into query block i happen in descending key-block order, serialised by a per-(b, h, i) counter
// (KeyBlockWork::det_rank: the CTA of key block j waits until j_last(i) - j blocks added).
#pragma once
#include "bwd_common.cuh"

namespace flash::bwd {

// ---- Compile-time shape of one instantiation (kBwdShapes) ------------------------------------------
template <int kHeadDim, DType kDType_>
struct BwdTraits {
  static constexpr DType kDType = kDType_;
  static constexpr BwdShape s = bwd_shape(kHeadDim);
  static_assert(s.head_dim == kHeadDim, "no bwd shape for this head dim");
  static constexpr int kD = kHeadDim;
  static constexpr int kBlockM = s.block_m, kBlockN = s.block_n, kWarps = s.warps, kSplitD = s.split_d;
  static constexpr int kQStages = s.q_stages, kDQCols = s.dq_cols;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kTag = 0;  // instantiation tag of the helper kernels (launch_bwd_with)
  static constexpr int kDQFragRows = 0;  // dQ accumulator rows in plain order (launch_bwd_with: the convert kernel)
  static constexpr bool kMayBeDet = true;  // (KeyBlockWork: deterministic calls run this kernel)
  static constexpr int kMinBlocks = 1;
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
  static constexpr uint32_t kOffSeq = kOffDS + kBlockN * kBlockM * 2;  // a varlen sequence's bounds (KeyBlockWork)
  static constexpr uint32_t kSmem = kOffSeq + 32;
  static_assert(kSmem == s.smem_bytes(), "smem formula");
};

// ---- Main kernel -----------------------------------------------------------------------------------------
template <class K, bool kMayBeVarlen>
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
  const KeyBlockWork<K, kMayBeVarlen> work(p, w, smem0, tid);
  // Varlen: a key block past its sequence's keys has no steps and writes nothing. Leaving at once or running through
  // are the same; the return is taken at d256 only, where ptxas spills less with it (sm_90 44 -> 8 bytes; at d128 on
  // sm_80 it spills more, 0 -> 12).
  if (kMayBeVarlen && K::kD == 256 && !work.has_keys()) return;
  const int n_block = work.n_block, b = work.b, h_kv = work.h_kv, k0 = work.k0;
  // The sequence's keys and diagonal, read at each use (KeyBlockWork: not held in registers through the loop).
  auto seqlen_k = [&]() { return work.seqlen_k(); };
  auto diag_offset = [&]() { return work.diag_offset(); };
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
    const int64_t bh = int64_t(b) * p.heads_q + h;  // (the deterministic counters: per sequence and head)
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
    const int seq_k = seqlen_k();             // (this step's copies)
    const int64_t seq_diag = diag_offset();
    const bool need_mask = !warp_visible || k0 + kBlockN > seq_k ||
                           (p.window_left >= 0 && k0 < int64_t(q0 + kBlockM - 1) + seq_diag - p.window_left) ||
                           (p.window_right >= 0 && int64_t(k0 + kBlockN - 1) > q0 + seq_diag + p.window_right);
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
            const int64_t key = key_first + g + 8 * r, q = q0 + nt * 8 + 2 * t + e, diag = q + seq_diag;
            const bool vis = warp_visible && key < seq_k && (p.window_left < 0 || key >= diag - p.window_left) &&
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
      rank = work.det_rank(q0);
      if (tid == 0)
        while (ld_acquire(sem) != rank) __nanosleep(32);
    }
    __syncthreads();  // dS^T complete in shared memory

    // dQ_i += dS K_j: work items of 16 query rows x kDQCols columns, spread over the warps.
    constexpr int kMQ = kBlockM / 16, kItems = kMQ * (kD / K::kDQCols);
    const uint32_t ds_lane = in_page((lane & 7) + ((lane >> 4) << 3), (lane >> 3) & 1);
    float* dq_rows = w.dq_acc + (work.ws_row_of(h) + q0) * w.dc;
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
    if (key >= seqlen_k()) continue;
    const int64_t kr = int64_t(work.k_start()) + key;  // (dense: key; the batch stride adds b)
    T* dk = static_cast<T*>(p.dk) + b * p.dk_batch_stride + kr * p.dk_row_stride + h_kv * p.dk_head_stride;
    T* dv = static_cast<T*>(p.dv) + b * p.dv_batch_stride + kr * p.dv_row_stride + h_kv * p.dv_head_stride;
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

// ---- Host launch, one instantiation per generated .cu file ----------------------------------------------
template <int kHeadDim, DType kDType>
int32_t launch_bwd(const BwdParams& p, const BwdPlan& plan) {
  using K = BwdTraits<kHeadDim, kDType>;
  // Dense calls run the kernel compiled without the varlen paths (KeyBlockWork says why).
  return p.varlen ? launch_bwd_with<K>(p, plan, bwd_main<K, true>, K::kSmem)
                  : launch_bwd_with<K>(p, plan, bwd_main<K, false>, K::kSmem);
}

}  // namespace flash::bwd

// One line per generated .cu file: FLASH_SM80_BWD_INSTANTIATE(128, BF16)
#define FLASH_SM80_BWD_INSTANTIATE(D, DTYPE) \
  template int32_t flash::bwd::launch_bwd<D, flash::DType::DTYPE>(const flash::BwdParams&, const flash::bwd::BwdPlan&);
