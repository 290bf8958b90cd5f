// libflash/cuda/sm80/bwd/bwd_common.cuh -- what the backward family's two main kernels share (mma.sync here
// in bwd_kernel.cuh, wgmma in ../../sm90/bwd/bwd_kernel.cuh): the kernels around them, one CTA's work, the
// shared-memory tile layout, and the launch of the whole sequence.
//
// Four kernels, one stream:
//   [bmap]      block-sparse masks only: the compact per-query-block lists become a dense byte map, so a
//               key block can ask "does query block i list me?" in O(1) (the transpose the backward needs).
//   preprocess  D = rowsum(dO o O) (fp32), LSE * log2(e) (+inf for rows that see no key or padding, so
//               the recomputed P is exactly 0 there), zero the fp32 dQ accumulator (and the semaphores).
//   main        grid (key block j, batch * kv head): dK, dV of the block's keys, dQ added into the fp32
//               accumulator (bwd_kernel.cuh says how; KeyBlockWork below is which query blocks it visits).
//   convert     dQ = acc * scale in the dtype. dK (times scale) and dV are written by the main kernel.
//   [zero]      varlen with seqused_k only: dK = dV = 0 in each slot's rows past seqused_k (keys no query sees).
//
// Packed variable-length batches (p.varlen) run in the same kernels: each CTA places its sequence with seq_bounds()
// (libflash/varlen.h: offsets clamped into the tensors), the grids cover max_seqlen_q / max_seqlen_k, and CTAs past a
// sequence's end exit. The workspace rows of (sequence b, head h) start at ws_row(b, h): dense, (b * hq + h) * sq_pad;
// varlen, h * ws_head + floor128(q_start) + 128 b -- each sequence's rows padded to 128 apart, so no query block of one
// sequence (at most 128 rows past its end) reaches the next one's rows, whatever the offsets (bwd.h, WsLayout).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "../../../error.h"
#include "../../../params.h"
#include "../../../varlen.h"
#include "../../ptx/sm80.cuh"
#include "../../runtime.h"
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
  int64_t sq_pad;   // rows of workspace per (sequence, head) that a kernel may touch: max_seqlen_q padded to 128
  int64_t ws_head;  // workspace rows between heads (dense: sq_pad; varlen: WsLayout::ws_head)
  int dc;
  int bm_b, bm_h, n_mqb, n_mkb;
};

// The workspace row (of dq_acc, lse2, dsum; dq_acc has dc floats a row) of query row 0 of (sequence b, head h).
__device__ __forceinline__ int64_t ws_row(const BwdParams& p, const KArgs& w, int b, int h, const SeqBounds& seq) {
  if (!p.varlen) return (int64_t(b) * p.heads_q + h) * w.sq_pad;
  return int64_t(h) * w.ws_head + int64_t(seq.q_start) / 128 * 128 + int64_t(b) * 128;
}

// ---- Shared layout: [rows][kHeadDim] tiles in pages of 64 columns (128-byte rows), chunk ^= row % 8 ----
__device__ __forceinline__ uint32_t in_page(int row, int cc) { return uint32_t(row * 128 + ((cc ^ (row & 7)) << 4)); }
template <int kRows>
__device__ __forceinline__ uint32_t tile_off(int row, int chunk) {
  return uint32_t((chunk >> 3) * kRows * 128) + in_page(row, chunk & 7);
}

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
  if (lane == 0 && w.sem != nullptr && row % 64 == 0) w.sem[bh * (w.sq_pad / 64) + row / 64] = 0;
  // The sequence's rows padded to 128 (the main kernels' query blocks read lse2 and dsum, and add into dq_acc, up to
  // there); dense: exactly sq_pad. Rows of other sequences are theirs.
  const SeqBounds seq = seq_bounds(p, b);
  if (row >= (int64_t(seq.seqlen_q) + 127) / 128 * 128) return;
  const int64_t ws = ws_row(p, w, b, h, seq) + row;
  float lse2 = INFINITY, dsum = 0.f;
  if (row < seq.seqlen_q) {
    const int64_t r = seq.q_start + row;  // (dense: row; the batch stride adds b)
    const T* o = static_cast<const T*>(p.o) + b * p.o_batch_stride + r * p.o_row_stride + h * p.o_head_stride;
    const T* d_o = static_cast<const T*>(p.d_o) + b * p.do_batch_stride + r * p.do_row_stride + h * p.do_head_stride;
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
    const float lse = p.lse[b * p.lse_batch_stride + h * p.lse_head_stride + r * p.lse_row_stride];
    if (lse != -INFINITY) {
      lse2 = lse * 1.4426950408889634f;
      dsum = acc;
    }
  }
  if (lane == 0) {
    w.lse2[ws] = lse2;
    w.dsum[ws] = dsum;
  }
  float4* acc_row = reinterpret_cast<float4*>(w.dq_acc + ws * w.dc);
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
  const SeqBounds seq = seq_bounds(p, b);
  if (row >= seq.seqlen_q) return;  // varlen: past this sequence's rows
  const float* acc = w.dq_acc + (ws_row(p, w, b, h, seq) + row) * w.dc;
  T* dq = static_cast<T*>(p.dq) + b * p.dq_batch_stride + (seq.q_start + row) * p.dq_row_stride + h * p.dq_head_stride;
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

// The same for a workspace in the sm90 d64 pipelined kernel's order (bwd_kernel.cuh: dq_bulk): tiles of kFragM rows
// from each sequence's row 0, a tile's kFragM x dc floats as 64 x 64 pieces (piece c: rows 64 (c / (dc / 64)), columns
// 64 (c % (dc / 64))), float4 dt * 128 + wq * 32 + lane of a piece holding rows 16 wq + lane / 4 (+ 8), columns
// 8 dt + 2 (lane % 4) (+ 1). One CTA a tile: each thread reads whole float4s (coalesced) and writes two pairs.
template <DType kDType, int kTag, int kFragM>
__global__ void __launch_bounds__(256) bwd_convert_dq_frag(const __grid_constant__ BwdParams p, const KArgs w) {
  using E = Elem<kDType>;
  using T = typename E::type;
  const int bh = blockIdx.y, b = bh / p.heads_q, h = bh % p.heads_q;
  const int64_t row0 = int64_t(blockIdx.x) * kFragM;
  const SeqBounds seq = seq_bounds(p, b);
  if (row0 >= seq.seqlen_q) return;  // (varlen: past this sequence's rows)
  const int np = int(w.dc / 64), rows = int(min(int64_t(kFragM), seq.seqlen_q - row0));
  const float4* acc = reinterpret_cast<const float4*>(w.dq_acc + (ws_row(p, w, b, h, seq) + row0) * w.dc);
  T* dq = static_cast<T*>(p.dq) + b * p.dq_batch_stride + (seq.q_start + row0) * p.dq_row_stride + h * p.dq_head_stride;
  for (int f = threadIdx.x; f < kFragM * int(w.dc) / 4; f += blockDim.x) {
    const int c = f / 1024, fi = f % 1024, dt = fi / 128, wq = (fi / 32) % 4, lane = fi % 32;
    const int r = (c / np) * 64 + wq * 16 + lane / 4, col = (c % np) * 64 + dt * 8 + 2 * (lane % 4);
    if (col >= p.head_dim) continue;
    const float4 x = acc[f];
    if (r < rows) *reinterpret_cast<uint32_t*>(dq + r * p.dq_row_stride + col) = E::pack(x.x * p.scale, x.y * p.scale);
    if (r + 8 < rows)
      *reinterpret_cast<uint32_t*>(dq + (r + 8) * p.dq_row_stride + col) = E::pack(x.z * p.scale, x.w * p.scale);
  }
}

// ---- Varlen with seqused_k: dK = dV = 0 in each slot's unused rows ------------------------------------------
// Keys [k_start + seqlen_k, k_start + k_slot) of sequence blockIdx.y (seq_bounds: inside the tensors), every kv head,
// 16-byte chunks where the strides allow (head_dim is a multiple of 8; dk/dv rows may be only 4-byte aligned, so
// pairs of elements). Grid (a few CTAs per sequence, batch); the main kernel writes only keys < seqlen_k.
template <DType kDType, int kTag>
__global__ void __launch_bounds__(256) bwd_zero_unused_keys(const __grid_constant__ BwdParams p) {
  const int b = blockIdx.y;
  const SeqBounds seq = seq_bounds(p, b);
  const int64_t rows = int64_t(seq.k_slot) - seq.seqlen_k, pairs = p.head_dim / 2;
  const int64_t n = rows * p.heads_kv * pairs;
  for (int64_t x = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; x < n; x += int64_t(gridDim.x) * blockDim.x) {
    const int64_t e = x % pairs, hk = (x / pairs) % p.heads_kv, r = seq.k_start + seq.seqlen_k + x / pairs / p.heads_kv;
    uint16_t* dk = static_cast<uint16_t*>(p.dk) + r * p.dk_row_stride + hk * p.dk_head_stride + 2 * e;
    uint16_t* dv = static_cast<uint16_t*>(p.dv) + r * p.dv_row_stride + hk * p.dv_head_stride + 2 * e;
    *reinterpret_cast<uint32_t*>(dk) = 0u;
    *reinterpret_cast<uint32_t*>(dv) = 0u;
  }
}

// ---- One CTA's work in the main kernels (mma.sync and wgmma) -------------------------------------------
// Key block blockIdx.x of kv head (b, h_kv) = blockIdx.y: its K and V tiles (the constructor starts their
// copies), and the steps -- (query head of the GQA group, query block) pairs, s = head-in-group * n_i +
// block -- whose query rows see some key of it. Varlen: the block of sequence b (its keys from seq.k_start, its
// queries from its q_start); a block past the sequence's keys has k_rows <= 0, no copies and no steps, and its CTA
// exits (the kernels test has_keys()). The sequence's bounds are read where used: a dense call's from the parameter
// bank, a varlen call's from a copy in shared memory (K::kOffSeq, 32 bytes) that the constructor writes -- held in
// registers through the main loop they cost the wgmma kernel 70-120 bytes of spills.
//
// kMayBeVarlen = false compiles the dense kernel alone (the bounds are p's, no runtime test): bwd_main launches the
// dense instantiation for dense calls, because the varlen tests in the d256 loop cost its dense calls 2.5% on the H200
// (fa-bench fwd_bwd d256, b1 h8 s16k, 45.7 vs 44.6 ms). The wgmma kernel keeps one instantiation for both (no cost
// measured at d64/d128).
template <class K, bool kMayBeVarlen = true>
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

  // The copy in shared memory: seqlen_q, seqlen_k, q_start, k_start, diag_offset (8 bytes), ws_row(b, 0) (8 bytes).
  static constexpr uint32_t kSeqQ = 0, kSeqK = 4, kSeqQStart = 8, kSeqKStart = 12, kSeqDiag = 16, kSeqWs = 24;
  __device__ __forceinline__ int32_t seq32(uint32_t off) const {
    uint32_t v;
    asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(v) : "r"(smem0 + K::kOffSeq + off));
    return int32_t(v);
  }
  __device__ __forceinline__ int64_t seq64(uint32_t off) const {
    uint64_t v;
    asm volatile("ld.shared.b64 %0, [%1];\n" : "=l"(v) : "r"(smem0 + K::kOffSeq + off));
    return int64_t(v);
  }

  __device__ __forceinline__ KeyBlockWork(const BwdParams& p_, const KArgs& w_, uint32_t smem0_, int tid_)
      : p(p_), w(w_), smem0(smem0_), tid(tid_) {
    // Deterministic mode dispatches the last key block first (det_rank: the order of the dQ adds); K::kMayBeDet = false
    // (the sm90 pipelined kernels, never run deterministic) keeps the plain index, free of registers.
    n_block = K::kMayBeDet && p.deterministic ? int(gridDim.x) - 1 - int(blockIdx.x) : int(blockIdx.x);
    b = blockIdx.y / p.heads_kv, h_kv = blockIdx.y % p.heads_kv;
    const SeqBounds seq = kMayBeVarlen ? seq_bounds(p, b) : dense_bounds(p);
    if (varlen()) {  // the copy the main loop reads (uniform branch: every thread reaches the barrier)
      if (tid == 0) {
        const int64_t ws0 = ws_row(p, w, b, 0, seq);
        asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(smem0 + K::kOffSeq), "r"(seq.seqlen_q),
                     "r"(seq.seqlen_k), "r"(seq.q_start), "r"(seq.k_start) : "memory");
        asm volatile("st.shared.v2.b64 [%0], {%1, %2};\n" ::"r"(smem0 + K::kOffSeq + kSeqDiag), "l"(seq.diag_offset),
                     "l"(ws0) : "memory");
      }
      __syncthreads();
    }
    k0 = n_block * kBlockN;
    k_rows = min(kBlockN, seq.seqlen_k - k0);
    chunks_valid = p.head_dim / 8;
    ratio = p.head_ratio;
    sparse = p.has_block_mask;
    det = p.deterministic;
    if (kMayBeVarlen && k_rows <= 0) {  // varlen: past this sequence's keys (the grid covers the longest): nothing to load or visit
      i_lo = n_i = n_steps = 0;
      return;
    }

    const int64_t kr = int64_t(seq.k_start) + k0;
    const T* kp = static_cast<const T*>(p.k) + b * p.k_batch_stride + kr * p.k_row_stride + h_kv * p.k_head_stride;
    const T* vp = static_cast<const T*>(p.v) + b * p.v_batch_stride + kr * p.v_row_stride + h_kv * p.v_head_stride;
    load_tile(RowsN{}, smem0 + K::kOffK, kp, p.k_row_stride, k_rows);
    load_tile(RowsN{}, smem0 + K::kOffV, vp, p.v_row_stride, k_rows);
    cp_async_commit();

    // Query rows that see some key of this block: [q_lo, q_hi) (the forward's key range, transposed).
    const int64_t k_last = k0 + k_rows - 1;
    int64_t q_lo = p.window_right >= 0 ? k0 - seq.diag_offset - p.window_right : 0;
    int64_t q_hi = p.window_left >= 0 ? k_last - seq.diag_offset + p.window_left + 1 : seq.seqlen_q;
    q_lo = max(q_lo, int64_t(0));
    q_hi = min(q_hi, int64_t(seq.seqlen_q));
    i_lo = int(q_lo / kBlockM);
    n_i = q_lo < q_hi ? int((q_hi + kBlockM - 1) / kBlockM) - i_lo : 0;
    n_steps = n_i * ratio;
  }

  // Deterministic mode: this key block's place in the order of the dQ adds into the query block at q0, whose
  // counter must read it before this block adds. The order is descending: the key blocks that see the query block
  // form one range (its rows see an interval of keys), and the last of them adds first. With the grid dispatching the
  // last key block first (the constructor), a block waits only for blocks that started before it, and under a causal
  // mask no block waits at all in the ideal: key block j reaches query block i at its step i - j, after every block
  // j' > j, which ranks before it there. (Ascending, key block j waited j steps at its first step: deterministic
  // causal ran 1.6-2.4x the default on the H200.)
  __device__ __forceinline__ int det_rank(int q0) const {
    const int64_t seq_k = seqlen_k();
    const int64_t q_last = min(int64_t(q0) + kBlockM, int64_t(seqlen_q())) - 1;
    const int64_t k_last = p.window_right >= 0 ? min(q_last + diag_offset() + p.window_right, seq_k - 1) : seq_k - 1;
    return int(k_last / kBlockN) - n_block;
  }

  __device__ __forceinline__ bool varlen() const { return kMayBeVarlen && p.varlen; }
  __device__ __forceinline__ bool has_keys() const { return !kMayBeVarlen || k_rows > 0; }
  // The sequence's bounds (seq_bounds): a dense call's from p, a varlen call's from the shared copy.
  __device__ __forceinline__ int seqlen_q() const { return varlen() ? seq32(kSeqQ) : p.seqlen_q; }
  __device__ __forceinline__ int seqlen_k() const { return varlen() ? seq32(kSeqK) : p.seqlen_k; }
  __device__ __forceinline__ int q_start() const { return varlen() ? seq32(kSeqQStart) : 0; }
  __device__ __forceinline__ int k_start() const { return varlen() ? seq32(kSeqKStart) : 0; }
  __device__ __forceinline__ int64_t diag_offset() const { return varlen() ? seq64(kSeqDiag) : p.diag_offset; }
  // The workspace row of query row 0 of (this sequence, query head h): ws_row(p, w, b, h, seq).
  __device__ __forceinline__ int64_t ws_row_of(int h) const {
    return varlen() ? seq64(kSeqWs) + int64_t(h) * w.ws_head : (int64_t(b) * p.heads_q + h) * w.sq_pad;
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
    const int q_rows = min(kBlockM, seqlen_q() - q0);
    const int64_t qr = int64_t(q_start()) + q0;
    const T* qp = static_cast<const T*>(p.q) + b * p.q_batch_stride + qr * p.q_row_stride + h * p.q_head_stride;
    const T* dop = static_cast<const T*>(p.d_o) + b * p.do_batch_stride + qr * p.do_row_stride + h * p.do_head_stride;
    load_tile(RowsM{}, smem0 + K::kOffQ + stage * K::kQBytes, qp, p.q_row_stride, q_rows);
    load_tile(RowsM{}, smem0 + K::kOffDO + stage * K::kQBytes, dop, p.do_row_stride, q_rows);
    const int64_t ws = ws_row_of(h) + q0;
    if (tid < kBlockM / 4)
      cp_async_16(smem0 + K::kOffL + stage * kBlockM * 4 + tid * 16, w.lse2 + ws + tid * 4, 16);
    else if (tid < kBlockM / 2)
      cp_async_16(smem0 + K::kOffDsum + stage * kBlockM * 4 + (tid - kBlockM / 4) * 16,
                  w.dsum + ws + (tid - kBlockM / 4) * 4, 16);
  }
};

// ---- Host launch -----------------------------------------------------------------------------------------
// Every main kernel (bwd_main, bwd_main_sm90) runs between the same preprocess and convert kernels over the
// same workspace, laid out by the plan (run() checked its size); K supplies kDType, kTag, kBlockN, kThreads.
template <class K, class Kernel>
int32_t launch_bwd_with(const BwdParams& p, const BwdPlan& plan, Kernel* kernel, uint32_t smem_bytes) {
  constexpr DType kDType = K::kDType;
  const WsLayout& l = plan.ws;
  uint8_t* ws = static_cast<uint8_t*>(p.workspace);
  KArgs w;
  w.dq_acc = reinterpret_cast<float*>(ws + l.dq_acc);
  w.lse2 = reinterpret_cast<float*>(ws + l.lse2);
  w.dsum = reinterpret_cast<float*>(ws + l.dsum);
  w.sem = p.deterministic ? reinterpret_cast<int32_t*>(ws + l.sem) : nullptr;
  w.bmap = p.has_block_mask ? ws + l.bmap : nullptr;
  w.sq_pad = l.sq_pad;
  w.ws_head = l.ws_head;
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
    if constexpr (K::kDQFragRows > 0)  // (the sm90 d64 pipelined kernel's dQ order)
      bwd_convert_dq_frag<kDType, K::kTag, K::kDQFragRows>
          <<<dim3(unsigned((p.seqlen_q + K::kDQFragRows - 1) / K::kDQFragRows), bh), 256, 0, stream>>>(p, w);
    else
      bwd_convert_dq<kDType, K::kTag><<<dim3(unsigned((p.seqlen_q + 7) / 8), bh), 256, 0, stream>>>(p, w);
    if (const int32_t s = cuda::check_launch("sm80 bwd convert dq"); s != FLASH_OK) return s;
  }
  if (p.varlen && p.seqused_k != nullptr) {  // slot rows past seqused_k: dk = dv = 0 (slot lengths are device data)
    bwd_zero_unused_keys<kDType, K::kTag><<<dim3(8, unsigned(p.batch)), 256, 0, stream>>>(p);
    if (const int32_t s = cuda::check_launch("sm80 bwd zero unused keys"); s != FLASH_OK) return s;
  }
  return FLASH_OK;
}

}  // namespace flash::bwd
