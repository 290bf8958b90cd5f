// libflash/cuda/sm90/bwd/bwd_kernel.cuh -- the backward's main kernel with wgmma (sm_90a: H100, H200) for head
// dims 64 and 128. Same algorithm, grid, workspace, masks and deterministic ordering as the mma.sync bwd_main
// (../../sm80/bwd/bwd_kernel.cuh), between the same preprocess / convert / block-map kernels
// (../../sm80/bwd/bwd_common.cuh); only the matrix products change: mma.sync fed by ldmatrix becomes wgmma
// reading its operands straight from shared memory.
//
// Why: bwd_main is bound by shared-memory reads (each warp owns 16 key rows, so every warp ldmatrix-reads
// all of Q_i and dO_i twice per step: ~0.58 ldmatrix.x4 per m16n8k16, ~5900 of the ~11000 cycles a d128
// step takes on the H100; docs/kernels.md). A warpgroup's wgmma reads each smem operand once for 64 rows,
// so the same step needs ~2000 cycles of smem reads and is bound by the tensor cores.
//
// CTA: 2 warpgroups (8 warps), key block of 128 rows, warpgroup w owns keys 64w..64w+63, warp w' of the
// CTA its 16 rows 16w'.. (exactly bwd_main's ownership, so masks and the dK/dV epilogue are unchanged:
// a wgmma accumulator's per-warp layout is mma.sync's m16n8 layout repeated along N). Per query block i:
//   S^T  = K_w Q_i^T, dP^T = V_w dO_i^T        SS wgmma m64n64k16, both K-major (A: K, V; B: Q, dO)
//   P^T, dS^T in registers (recomputed from the LSE, masked), dS^T also to smem ([key][query])
//   dV  += P^T dO_i, dK += dS^T Q_i             RS wgmma m64n{d}k16, A from the accumulators, B N-major
//   dQ_i += dS K_j                              SS wgmma m64n64k16, A = dS M-major, B = K N-major;
//                                              warpgroup w takes 64 x 64 piece w (d64: rows 64w..)
// dP^T and dV run as wgmma groups of their own, so the tensor cores work on them while P^T and dS^T are
// computed. With a pipe (bwd_sm90.h), step i's dQ is computed and added during step i+1 from a second dS^T
// buffer, so one CTA barrier per step remains and the dQ adds overlap the tensor cores' next work; at d64 they
// go out as bulk reduce-adds from shared memory (dq_bulk). One warpgroup per CTA (two CTAs per SM) was 0.62x at
// d128 (docs/kernels.md).
// Shared tiles keep bwd_main's layout: 64-column pages of 128-byte rows, 16-byte chunk ^= row % 8, which
// is the wgmma 128-byte swizzle (8-row atoms of 1024 bytes; the base is aligned to 1024 here).
#pragma once
#include "../../ptx/hopper.cuh"
#include "../../ptx/wgmma.cuh"
#include "../../sm80/bwd/bwd_common.cuh"
#include "bwd_sm90.h"

namespace flash::bwd {

// One row of kWgmmaBwdShapes (bwd_sm90.h): kBlockM query rows per step (64; 128 at d64, where dQ splits its
// rows over the warpgroups instead of its columns), kPipe where step i's dQ is computed (0: in step i).
template <int kHeadDim, int kPipe_, DType kDType_>
struct BwdTraits90 {
  static constexpr DType kDType = kDType_;
  static constexpr int kD = kHeadDim;
  static constexpr int kPipe = kPipe_;
  static constexpr WgmmaBwdShape s = wgmma_bwd_shape(kHeadDim, kPipe_);
  static_assert(s.head_dim == kHeadDim, "no kWgmmaBwdShapes row for this head dim and pipe");
  static constexpr int kWGs = 2;  // warpgroups per CTA, 64 keys each
  static constexpr int kBlockM = s.block_m, kBlockN = 64 * kWGs, kWarps = 4 * kWGs, kThreads = 128 * kWGs;
  static constexpr int kQStages = 2;
  static constexpr int kDSBufs = kPipe ? 2 : 1;
  static_assert(kBlockM == 64 || (kBlockM == 128 && kD == 64), "tile");
  // dQ tile kBlockM x kD in 64 x 64 pieces, piece w (+ kWGs, ...) to warpgroup w.
  static constexpr int kDQTiles = (kBlockM / 64) * (kD / 64), kDQTilesPerWG = (kDQTiles + kWGs - 1) / kWGs;
  static constexpr bool kMayBeDet = kPipe == 0;  // (the plan runs deterministic calls in-step; KeyBlockWork)
  static constexpr int kTag = 90;  // own copies of the helper kernels (bwd_common.cuh: launch_bwd_with)
  static_assert(kD == 64 || kD == 128, "sm90 backward: head dims 64 and 128");
  static constexpr uint32_t kKBytes = kBlockN * kD * 2;
  static constexpr uint32_t kQBytes = kBlockM * kD * 2;
  static constexpr uint32_t kOffK = 0, kOffV = kKBytes, kOffQ = 2 * kKBytes;
  static constexpr uint32_t kOffDO = kOffQ + kQStages * kQBytes;
  static constexpr uint32_t kDSBytes = kBlockN * kBlockM * 2;
  static constexpr uint32_t kOffDS = kOffDO + kQStages * kQBytes;        // dS^T [bufs][kBlockN][kBlockM], 1024-aligned
  static constexpr uint32_t kOffL = kOffDS + kDSBufs * kDSBytes;         // lse2 [stages][kBlockM]
  static constexpr uint32_t kOffDsum = kOffL + kQStages * kBlockM * 4;   // dsum [stages][kBlockM]
  static constexpr uint32_t kOffSeq = kOffDsum + kQStages * kBlockM * 4;  // a varlen sequence's bounds (KeyBlockWork)
  // d64's pipelined form: the dQ tile (kBlockM x kD fp32, 64 x 64 pieces in the accumulators' order) for its bulk
  // reduce-adds (WgmmaBwdShape::dq_bulk).
  static constexpr bool kDQBulk = s.dq_bulk();
  static constexpr int kDQFragRows = kDQBulk ? kBlockM : 0;  // the workspace's dQ layout (bwd_convert_dq_frag)
  static constexpr uint32_t kOffDQ = kOffSeq + 32;
  static constexpr uint32_t kSmem = kOffDQ + (kDQBulk ? kBlockM * kD * 4 : 0);
  static constexpr uint32_t kSmemAlloc = kSmem + 1024;  // room to align the base to 1024 bytes
  static_assert(kOffQ % 1024 == 0 && kOffDO % 1024 == 0 && kOffDS % 1024 == 0 && kQBytes % 1024 == 0, "atoms");
  static_assert(kSmemAlloc == s.smem_bytes(), "the plan's shared memory");
};

// dst[0, 2) += (a, b) in fp32: one vector reduction, `red` (no return value). atomicAdd(float2*) compiles to a
// returning `atom.global.add.v2.f32`, which the SM keeps in flight until L2 answers.
__device__ __forceinline__ void add_v2(float* dst, float a, float b) {
  asm volatile("red.relaxed.gpu.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(dst), "f"(a), "f"(b) : "memory");
}

// dQ = dS K_j for this warpgroup's 64 x 64 pieces: piece c is rows 64 (c / (kD / 64)) and columns 64 (c % (kD / 64))
// of the dQ tile; warpgroup w computes pieces w, w + kWGs, ... (dS^T at ds: [key][query], 128-byte rows).
// One wgmma group (fence, mmas, commit).
template <class K>
__device__ __forceinline__ void dq_mma(float (&acc)[K::kDQTilesPerWG][32], uint32_t ds, uint32_t k_smem, int wgi) {
  constexpr int kNP = K::kD / 64;
  wg::fence();
#pragma unroll
  for (int j = 0; j < K::kDQTilesPerWG; ++j) {
    const int c = wgi + j * K::kWGs;
    if (K::kDQTiles % K::kWGs == 0 || c < K::kDQTiles) {  // (constant when every warpgroup has pieces)
      const uint64_t dds0 = wg::desc(ds + (c / kNP) * K::kBlockN * 128, K::kBlockN * 128);
      const uint64_t dkt0 = wg::desc(k_smem + (c % kNP) * K::kBlockN * 128, K::kBlockN * 128);
#pragma unroll
      for (int kk = 0; kk < K::kBlockN / 16; ++kk)
        wg::SS<64, 1, 1, K::kDType>::mma(acc[j], dds0 + kk * (2048 >> 4), dkt0 + kk * (2048 >> 4), kk > 0);
    }
  }
  wg::commit();
}

// The pieces' adds into the fp32 dQ accumulator of (the workspace rows from ws_row, query block at q0): red.global.add.v2.f32 pairs.
template <class K>
__device__ __forceinline__ void dq_add(float (&acc)[K::kDQTilesPerWG][32], float* dq_acc, int64_t ws_row, int q0, int wgi,
                                       int wq0, int g, int t) {
  constexpr int kNP = K::kD / 64, kD = K::kD;
#pragma unroll
  for (int j = 0; j < K::kDQTilesPerWG; ++j) {
    const int c = wgi + j * K::kWGs;
    if (K::kDQTiles % K::kWGs != 0 && c >= K::kDQTiles) continue;
    wg::fence_regs(acc[j]);
    // (w.dc == kD here: the row stride is a constant, so the adds share one address register.)
    float* dq_rows = dq_acc + (ws_row + q0 + (c / kNP) * 64 + wq0) * kD + (c % kNP) * 64 + g * kD + 2 * t;
#pragma unroll
    for (int dt = 0; dt < 8; ++dt)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float* dst = dq_rows + 8 * r * kD + dt * 8;
        add_v2(dst, acc[j][dt * 4 + 2 * r], acc[j][dt * 4 + 2 * r + 1]);
      }
  }
}

// d64's pipelined form's dQ out (kDQBulk): the warpgroup's pieces into the shared dQ tile in the accumulators' own
// order (float4 dt * 128 + warp * 32 + lane of a piece: 512 contiguous bytes a store instruction, no bank conflict),
// then one `cp.reduce.async.bulk ... add.f32` of 16 KB a piece by the warpgroup's first thread into the workspace
// tile, which holds the same order (bwd_convert_dq_frag undoes it). One bulk request replaces 16 red.global a thread,
// the step's largest stall (ncu, H200: lg/mio throttle, and the registers they read held until the queue drained):
// d64 bwd 1.10-1.13x; d128 0.96x (its tile is 64 rows: half the FLOPs a byte of dQ), so d128 keeps red.global.
// The caller has made sure that the tile's previous bulk reads are done (dq_tile_free).
template <class K>
__device__ __forceinline__ void dq_bulk(float (&acc)[K::kDQTilesPerWG][32], uint32_t dq_smem, float* dq_tile, int wgi,
                                        int warp, int lane) {
#pragma unroll
  for (int j = 0; j < K::kDQTilesPerWG; ++j) {
    const int c = wgi + j * K::kWGs;
    if (K::kDQTiles % K::kWGs != 0 && c >= K::kDQTiles) continue;
    wg::fence_regs(acc[j]);
    const uint32_t dst = dq_smem + uint32_t(c) * 16384u + uint32_t((warp % 4) * 32 + lane) * 16u;
#pragma unroll
    for (int dt = 0; dt < 8; ++dt)
      asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"r"(dst + dt * 2048), "f"(acc[j][dt * 4]),
                   "f"(acc[j][dt * 4 + 1]), "f"(acc[j][dt * 4 + 2]), "f"(acc[j][dt * 4 + 3])
                   : "memory");
  }
  wg::fence_proxy_async();  // the stores, before the bulk copy reads them
  ptx::named_sync(1 + wgi, 128);
  if (warp % 4 == 0 && lane == 0) {
#pragma unroll
    for (int j = 0; j < K::kDQTilesPerWG; ++j) {
      const int c = wgi + j * K::kWGs;
      if (K::kDQTiles % K::kWGs != 0 && c >= K::kDQTiles) continue;
      ptx::bulk_reduce_add_f32(dq_tile + c * 4096, dq_smem + uint32_t(c) * 16384u, 16384u);
    }
    wg::bulk_commit();
  }
}

template <class K>
__global__ void __launch_bounds__(K::kThreads, 1) bwd_main_sm90(const __grid_constant__ BwdParams p, const KArgs w) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using E = Elem<K::kDType>;
  using T = typename E::type;
  constexpr int kD = K::kD, kBlockM = K::kBlockM, kBlockN = K::kBlockN;
  constexpr int kNS = kBlockM / 8;  // n8 column tiles of S^T per warp

  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw0 = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  const uint32_t smem0 = (raw0 + 1023u) & ~1023u;
  uint8_t* smem = smem_raw + (smem0 - raw0);
  const uint32_t k_smem = smem0 + K::kOffK, v_smem = smem0 + K::kOffV, ds_smem = smem0 + K::kOffDS;

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, t = lane % 4;
  const int wgi = warp / 4;      // warpgroup
  const int kr0 = warp * 16;     // this warp's first key row in the block
  const int wq0 = (warp % 4) * 16;  // this warp's first query row in the warpgroup's dQ tile

  // This CTA's key block, its K and V copies (started here), and the steps that see it.
  const KeyBlockWork<K> work(p, w, smem0, tid);
  // (varlen: a key block past its sequence's keys has no steps and writes nothing; an early return here made ptxas spill)
  const int n_block = work.n_block, b = work.b, h_kv = work.h_kv, k0 = work.k0;
  // The sequence's keys and diagonal, read at each use (KeyBlockWork: not held in registers through the loop).
  auto seqlen_k = [&]() { return work.seqlen_k(); };
  auto diag_offset = [&]() { return work.diag_offset(); };
  const int i_lo = work.i_lo, n_i = work.n_i, ratio = work.ratio, n_steps = work.n_steps;
  const bool sparse = work.sparse, det = K::kPipe ? false : work.det;
  const float scale_log2 = p.scale_log2;
  const int64_t sq_pad = w.sq_pad;
  auto listed = [&](int h, int i, int key) { return work.listed(h, i, key); };
  auto next_step = [&](int s) { return work.next_step(s); };
  auto load_q = [&](int s, int stage) { work.load_q(s, stage); };

  // dK, dV of this warpgroup's 64 keys x kD (per warp: m16n8 tiles along kD, [tile][4] flattened).
  float acc_dk[kD / 2], acc_dv[kD / 2];
#pragma unroll
  for (int e = 0; e < kD / 2; ++e) acc_dk[e] = acc_dv[e] = 0.f;

  int step = next_step(0);
  if (step < n_steps) load_q(step, 0);
  cp_async_commit();

  // kPipe: the previous step's dQ, still to be computed and added (its query block and dS^T buffer).
  bool have_prev = false;
  int prev_h = 0;
  int prev_q0 = 0;
  uint32_t prev_ds = ds_smem + (K::kPipe ? K::kDSBytes : 0u);  // (step 0's dQ reads a buffer step 0 leaves alone)
  // kDQBulk: the last bulk reduce-add has read the dQ tile (its issuer waits; the barrier after tells the rest).
  auto dq_tile_free = [&]() {
    if (K::kDQBulk && tid % 128 == 0) wg::bulk_wait_read();
  };
  auto dq_out = [&](float (&acc)[K::kDQTilesPerWG][32], int h_of, int q0_of) {
    if constexpr (K::kDQBulk)
      dq_bulk<K>(acc, smem0 + K::kOffDQ, w.dq_acc + (work.ws_row_of(h_of) + q0_of) * kD, wgi, warp, lane);
    else
      dq_add<K>(acc, w.dq_acc, work.ws_row_of(h_of), q0_of, wgi, wq0, g, t);
  };

  for (int it = 0; step < n_steps; ++it) {
    const int stage = it & 1;
    const int h = h_kv * ratio + step / n_i, i = i_lo + step % n_i, q0 = i * kBlockM;
    const int64_t bh = int64_t(b) * p.heads_q + h;  // (the deterministic counters: per sequence and head)
    // Whether this step's tile needs the element mask (warp_visible: block-sparse). Decided at the step's top at d64,
    // after S^T at d128: where ptxas spills least (ptxas -v, sm_90a: d64 pipelined 16 bytes early, 48 late; d128
    // pipelined 0 late, 16 early).
    constexpr bool kEarlyMask = kD == 64;
    const int64_t key_first = k0 + kr0;
    auto mask_bits = [&]() -> uint32_t {  // bit 0: warp_visible, bit 1: need_mask
      const bool visible = !sparse || listed(h, i, int(key_first));
      const int seq_k = seqlen_k();
      const int64_t seq_diag = diag_offset();
      const bool need = !visible || k0 + kBlockN > seq_k ||
                        (p.window_left >= 0 && k0 < int64_t(q0 + kBlockM - 1) + seq_diag - p.window_left) ||
                        (p.window_right >= 0 && int64_t(k0 + kBlockN - 1) > q0 + seq_diag + p.window_right);
      return uint32_t(visible) | (uint32_t(need) << 1);
    };
    const uint32_t early_bits = kEarlyMask ? mask_bits() : 0u;
    cp_async_wait<0>();
    wg::fence_proxy_async();  // this thread's cp.async writes, before the tensor cores read them
    dq_tile_free();
    __syncthreads();          // Q_i, dO_i landed; every warp is done with the previous step (dS, the other stage)
    const int step_next = next_step(step + 1);
    if (step_next < n_steps) load_q(step_next, stage ^ 1);
    cp_async_commit();
    const uint32_t q_smem = smem0 + K::kOffQ + stage * K::kQBytes;
    const uint32_t do_smem = smem0 + K::kOffDO + stage * K::kQBytes;
    const float* lse2_s = reinterpret_cast<const float*>(smem + K::kOffL + stage * kBlockM * 4);
    const float* dsum_s = reinterpret_cast<const float*>(smem + K::kOffDsum + stage * kBlockM * 4);
    const uint32_t ds_cur = ds_smem + (K::kPipe ? uint32_t(it & 1) * K::kDSBytes : 0u);

    // kPipe: the previous step's dQ (its dS^T is complete since the barrier above). Issued even when
    // there is none (step 0; result unused): a conditional wgmma group costs ptxas ~300 B of spill.
    float acc_pq[K::kPipe ? K::kDQTilesPerWG : 1][32];
    if constexpr (K::kPipe == 1) {
      dq_mma<K>(acc_pq, prev_ds, k_smem, wgi);
    }

    // S^T = K_w Q_i^T, dP^T = V_w dO_i^T: 64 keys x kBlockM queries per warpgroup.
    // (Descriptors advance by adding offset >> 4 to one base each: 16 hoisted 64-bit descriptors cost
    // 32 registers.)
    float s[kNS * 4], dp[kNS * 4];  // S^T, dP^T: kNS n8 tiles of [4] per warp
    const uint64_t dk0 = wg::desc(k_smem + wgi * 64 * 128, 16), dv0 = wg::desc(v_smem + wgi * 64 * 128, 16);
    const uint64_t dq0 = wg::desc(q_smem, 16), ddo0 = wg::desc(do_smem, 16);
    wg::fence();
#pragma unroll
    for (int ks = 0; ks < kD / 16; ++ks) {
      const uint32_t koff = ((ks / 4) * kBlockN * 128 + (ks % 4) * 32) >> 4;
      const uint32_t qoff = ((ks / 4) * kBlockM * 128 + (ks % 4) * 32) >> 4;
      wg::SS<kBlockM, 0, 0, K::kDType>::mma(s, dk0 + koff, dq0 + qoff, ks > 0);
    }
    wg::commit();
    // dP^T in a group of its own: it runs while P^T is computed.
#pragma unroll
    for (int ks = 0; ks < kD / 16; ++ks) {
      const uint32_t koff = ((ks / 4) * kBlockN * 128 + (ks % 4) * 32) >> 4;
      const uint32_t qoff = ((ks / 4) * kBlockM * 128 + (ks % 4) * 32) >> 4;
      wg::SS<kBlockM, 0, 0, K::kDType>::mma(dp, dv0 + koff, ddo0 + qoff, ks > 0);
    }
    wg::commit();
    if constexpr (K::kPipe == 1) {
      wg::wait<2>();  // the previous step's dQ (the oldest group) is done
      if (have_prev) dq_out(acc_pq, prev_h, prev_q0);
    }
    wg::wait<1>();
    wg::fence_regs(s);

    // P^T (recomputed from the LSE). Masked elements get P = 0.
    const uint32_t bits = kEarlyMask ? early_bits : mask_bits();
    const bool warp_visible = (bits & 1u) != 0, need_mask = (bits & 2u) != 0;
    // The mask is applied in a pass of its own (only for the blocks that need it): inside the exp2 loop it
    // was a branch around ~20 instructions per element (BSSY/BRA/BSYNC on the unmasked path too), which took
    // about a third of a d64 step (H100, ncu source counters; docs/kernels.md).
    float pf[kNS * 4];
    uint32_t pk[kNS][2], dsk[kNS][2];
#pragma unroll
    for (int nt = 0; nt < kNS; ++nt) {
      const float2 l2 = *reinterpret_cast<const float2*>(lse2_s + nt * 8 + 2 * t);
#pragma unroll
      for (int r = 0; r < 2; ++r)
#pragma unroll
        for (int e = 0; e < 2; ++e) pf[nt * 4 + 2 * r + e] = exp2f(s[nt * 4 + 2 * r + e] * scale_log2 - (e ? l2.y : l2.x));
    }
    if (need_mask) {
      const int mask_k = seqlen_k();  // (read again: not live across the exponentials)
      const int64_t mask_diag = diag_offset();
#pragma unroll
      for (int nt = 0; nt < kNS; ++nt)
#pragma unroll
        for (int r = 0; r < 2; ++r)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int64_t key = key_first + g + 8 * r, q = q0 + nt * 8 + 2 * t + e, diag = q + mask_diag;
            const bool vis = warp_visible && key < mask_k && (p.window_left < 0 || key >= diag - p.window_left) &&
                             (p.window_right < 0 || key <= diag + p.window_right);
            if (!vis) pf[nt * 4 + 2 * r + e] = 0.f;
          }
    }
#pragma unroll
    for (int nt = 0; nt < kNS; ++nt)
#pragma unroll
      for (int r = 0; r < 2; ++r) pk[nt][r] = E::pack(pf[nt * 4 + 2 * r], pf[nt * 4 + 2 * r + 1]);
    const uint64_t dto0 = wg::desc(do_smem, kBlockM * 128), dtq0 = wg::desc(q_smem, kBlockM * 128);
    // dV += P^T dO_i now (A from registers, B = dO_i N-major): it runs while dS^T is computed.
    wg::fence_regs(pk);
    wg::fence();
#pragma unroll
    for (int kc = 0; kc < kBlockM / 16; ++kc) {
      const uint32_t ap[4] = {pk[2 * kc][0], pk[2 * kc][1], pk[2 * kc + 1][0], pk[2 * kc + 1][1]};
      wg::RS<kD, 1, K::kDType>::mma(acc_dv, ap, dto0 + kc * (2048 >> 4), 1);
    }
    wg::commit();
    wg::wait<1>();  // dP^T (the older group) is done
    wg::fence_regs(dp);

    // dS^T = P^T o (dP^T - D).
#pragma unroll
    for (int nt = 0; nt < kNS; ++nt) {
      const float2 dd = *reinterpret_cast<const float2*>(dsum_s + nt * 8 + 2 * t);
#pragma unroll
      for (int r = 0; r < 2; ++r)
        dsk[nt][r] = E::pack(pf[nt * 4 + 2 * r] * (dp[nt * 4 + 2 * r] - dd.x),
                             pf[nt * 4 + 2 * r + 1] * (dp[nt * 4 + 2 * r + 1] - dd.y));
    }
    // dS^T to shared memory ([key][query], 128-byte rows) for dQ = dS K.
#pragma unroll
    for (int nt = 0; nt < kNS; ++nt)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int row = kr0 + g + 8 * r;
        asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(ds_cur + tile_off<kBlockN>(row, nt) + 4 * t), "r"(dsk[nt][r]));
      }
    wg::fence_proxy_async();  // dS^T is read by wgmma after the barrier below

    if constexpr (K::kPipe == 2) dq_mma<K>(acc_pq, prev_ds, k_smem, wgi);

    // dK += dS^T Q_i: A from registers, B = Q_i N-major.
    wg::fence_regs(pk);
    wg::fence_regs(dsk);
    wg::fence();
#pragma unroll
    for (int kc = 0; kc < kBlockM / 16; ++kc) {
      const uint32_t as[4] = {dsk[2 * kc][0], dsk[2 * kc][1], dsk[2 * kc + 1][0], dsk[2 * kc + 1][1]};
      wg::RS<kD, 1, K::kDType>::mma(acc_dk, as, dtq0 + kc * (2048 >> 4), 1);
    }
    wg::commit();

    if constexpr (K::kPipe) {
      if constexpr (K::kPipe == 2) {
        wg::wait<1>();  // dV and the previous step's dQ are done; dK runs on
        if (have_prev) dq_out(acc_pq, prev_h, prev_q0);
      }
      // dV, dK done before the next step's barrier (after it, the next load overwrites this Q/dO stage);
      // this step's dQ runs in the next step (or after the loop).
      wg::wait<0>();
      wg::fence_regs(acc_dv);
      wg::fence_regs(acc_dk);
      wg::fence_regs(pk);
      wg::fence_regs(dsk);
      have_prev = true;
      prev_h = h, prev_q0 = q0, prev_ds = ds_cur;
      step = step_next;
      continue;
    } else {
      // Deterministic: wait until every earlier key block of this query block has added its dQ part.
      int32_t* sem = nullptr;
      int rank = 0;
      if (det) {
        sem = w.sem + bh * (sq_pad / 64) + i * (kBlockM / 64);
        rank = work.det_rank(q0);
        if (tid == 0)
          while (ld_acquire(sem) != rank) __nanosleep(32);
      }
      __syncthreads();  // dS^T complete in shared memory

      // dQ_i += dS K_j over this CTA's keys, in dq_mma's 64 x 64 pieces.
      float acc[K::kDQTilesPerWG][32];
      dq_mma<K>(acc, ds_smem, k_smem, wgi);
      wg::wait<0>();
      dq_add<K>(acc, w.dq_acc, work.ws_row_of(h), q0, wgi, wq0, g, t);
      wg::fence_regs(acc_dv);  // dV, dK (and their A operands P^T, dS^T) are final only after the wait
      wg::fence_regs(acc_dk);
      wg::fence_regs(pk);
      wg::fence_regs(dsk);
      if (det) {
        __threadfence();
        __syncthreads();
        if (tid == 0) st_release(sem, rank + 1);
      }
      step = step_next;
    }
  }

  if constexpr (K::kPipe) {  // the last step's dQ
    if (have_prev) {
      float acc_pq[K::kDQTilesPerWG][32];
      dq_tile_free();
      __syncthreads();  // its dS^T complete in shared memory
      dq_mma<K>(acc_pq, prev_ds, k_smem, wgi);
      wg::wait<0>();
      dq_out(acc_pq, prev_h, prev_q0);
    }
    if (tid % 128 == 0) wg::bulk_wait();  // (the reduce-adds done before the CTA's shared memory goes)
  }

  // Epilogue: dK * scale and dV, this warp's rows, straight from the accumulators.
  const float scale = p.scale;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int key = k0 + kr0 + g + 8 * r;
    if (key >= seqlen_k()) continue;
    const int64_t kr = int64_t(work.k_start()) + key;  // (dense: key; the batch stride adds b)
    T* dk = static_cast<T*>(p.dk) + b * p.dk_batch_stride + kr * p.dk_row_stride + h_kv * p.dk_head_stride;
    T* dv = static_cast<T*>(p.dv) + b * p.dv_batch_stride + kr * p.dv_row_stride + h_kv * p.dv_head_stride;
#pragma unroll
    for (int dt = 0; dt < kD / 8; ++dt) {
      const int col = dt * 8 + 2 * t;
      if (col < p.head_dim) {
        *reinterpret_cast<uint32_t*>(dk + col) =
            E::pack(acc_dk[dt * 4 + 2 * r] * scale, acc_dk[dt * 4 + 2 * r + 1] * scale);
        *reinterpret_cast<uint32_t*>(dv + col) = E::pack(acc_dv[dt * 4 + 2 * r], acc_dv[dt * 4 + 2 * r + 1]);
      }
    }
  }
#endif
}

// ---- Host launch, one instantiation per generated .cu file ----------------------------------------------
template <int kHeadDim, int kPipe, DType kDType>
int32_t launch_bwd_sm90(const BwdParams& p, const BwdPlan& plan) {
  using K = BwdTraits90<kHeadDim, kPipe, kDType>;
  return launch_bwd_with<K>(p, plan, bwd_main_sm90<K>, K::kSmemAlloc);
}

}  // namespace flash::bwd

// One line per generated .cu file: FLASH_SM90_BWD_INSTANTIATE(128, 2, BF16)
#define FLASH_SM90_BWD_INSTANTIATE(D, PIPE, DTYPE) \
  template int32_t flash::bwd::launch_bwd_sm90<D, PIPE, flash::DType::DTYPE>(const flash::BwdParams&, \
                                                                            const flash::bwd::BwdPlan&);
