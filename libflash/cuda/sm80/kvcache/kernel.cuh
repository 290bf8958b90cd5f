// libflash/cuda/sm80/kvcache/kernel.cuh -- split-KV attention over a KV cache (decode and chunked prefill).
//
// One CTA owns one (sequence b, KV head hk, split s, block of packed query rows). GQA packing: the
// seqlen_new x head_ratio query rows that share KV head hk are one tile of "packed rows", row r = token
// r / head_ratio of query head hk * head_ratio + r % head_ratio, so each K/V tile is read once for all the
// heads that use it (FlashAttention-2's seqlen_q/ngroups swap, FA3's PackGQA). Its keys are the split's
// chunk [k_begin, k_end) of the sequence's L keys, walked in kBlockN-key tiles:
//
//   S = Q K_j^T;  m' = max(m, rowmax S);  P = exp2((S - m') scale_log2);  l = exp2((m - m') scale_log2) l + rowsum P
//   O = exp2((m - m') scale_log2) O + P V_j                                  (Algorithm 1, lines 9-11)
//
// then, per row, O / l and LSE = m scale + log l -- the final output with one split, else fp32 partials for the
// combine kernel (combine.cu). With 16 packed rows (Layout::kDecode) the four warps split every tile's keys and
// merge their (m, l, O) through shared memory at the end; with 64 (kChunk) each warp owns 16 rows.
//
// Loads: cp.async 16-byte chunks in a kStages ring (one barrier per tile). A key row comes from the cache --
// row t % page_size of page block_table[b, t / page_size], or position t of cache row cache_batch_idx[b] --
// or, for the keys appended by this call (t >= cache_seqlens[b]), straight from k_new/v_new: the CTAs of the
// split that holds them also write them into the cache, and no CTA reads those slots, so no ordering between
// CTAs is needed. Device index arrays are clamped on use (cache_seqlens into [0, capacity - appended], pages
// and cache rows into the cache), so no value they hold can send a load or a store outside the tensors.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "../../../error.h"
#include "../../ptx/hopper.cuh"
#include "../../ptx/sm80.cuh"
#include "../../runtime.h"
#include "plan.h"

namespace flash::sm80::kvcache {

using ptx::cp_async_16;
using ptx::cp_async_commit;
using ptx::cp_async_wait;
using ptx::Elem;
using ptx::ldmatrix_x4;
using ptx::ldmatrix_x4_trans;

template <int kHeadDim_, Layout kLayout_, DType kDType_>
struct Traits {
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr Layout kLayout = kLayout_;
  static constexpr DType kDType = kDType_;
  static constexpr Shape kShape = shape_of(kLayout, kHeadDim);
  static constexpr int kBlockM = kShape.block_m, kBlockN = kShape.block_n, kStages = kShape.stages;
  static constexpr int kWarpsN = kShape.warps_n;           // warps sharing a tile's keys
  static constexpr int kKeysPerWarp = kBlockN / kWarpsN;  // of each tile
  static constexpr int kNTiles = kKeysPerWarp / 8;        // n8 tiles of S per warp
  static constexpr int kDTiles = kHeadDim / 8;            // n8 tiles of O
  static constexpr int kKSteps = kHeadDim / 16;           // k16 steps of Q K^T
  static_assert(kThreads == 128 && kBlockM == 16 * (4 / kWarpsN) && kKeysPerWarp % 16 == 0, "tile shape");
  static_assert(kStages >= 2, "the ring needs two stages");
  // Shared tiles [rows][kHeadDim] in pages of [rows][64 columns]: 128-byte rows, 16-byte chunk cc of row
  // r at cc ^ (r % 8), so ldmatrix's eight row addresses and the cp.async writes hit eight bank groups.
  static constexpr int kRowBytes = 128, kPageChunks = 8, kPages = kHeadDim / 64;
  static constexpr int kQBytes = kBlockM * kHeadDim * 2;
  static constexpr int kTileBytes = kBlockN * kHeadDim * 2;  // one K or one V tile
  static constexpr int kSmemBytes = kShape.smem_bytes(kHeadDim);
  static_assert(kSmemBytes == kQBytes + 2 * kStages * kTileBytes, "smem formula");
  // The epilogue stages each warp's fp32 O (rows padded by 4 floats), m and l over the Q tile and the ring.
  static constexpr int kOStride = kHeadDim + 4;
  static_assert((kWarpsN * kBlockM * kOStride + 2 * kWarpsN * kBlockM) * 4 <= kSmemBytes, "epilogue staging fits");

  static __device__ __forceinline__ uint32_t in_page(int row, int cc) {
    return uint32_t(row * kRowBytes + ((cc ^ (row & 7)) << 4));
  }
};

template <class K>
__global__ void __launch_bounds__(kThreads) attention_kernel(const __grid_constant__ KernelParams p) {
  using E = Elem<K::kDType>;
  using T = typename E::type;
  constexpr int kBlockM = K::kBlockM, kBlockN = K::kBlockN, kNTiles = K::kNTiles, kDTiles = K::kDTiles;
  constexpr int kRowBytes = K::kRowBytes, kPageChunks = K::kPageChunks, kPages = K::kPages;
  const float kNegInf = -INFINITY;

  extern __shared__ __align__(128) uint8_t smem[];
  const uint32_t q_smem = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const uint32_t ring = q_smem + K::kQBytes;  // stage s: K at ring + 2 s kTileBytes, V right after

  // With splits, the combine kernel is launched as this kernel's PDL secondary (combine.cu): it may start now, and waits
  // for this whole grid to finish before it reads the partials (sm_90; no-op without a dependent).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  ptx::launch_dependents();
#endif
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, t = lane % 4;  // mma fragment coordinates: rows g and g + 8, columns 2t and 2t + 1
  const int wm = K::kWarpsN == 1 ? warp : 0;  // this warp's 16 rows of the block
  const int wn = K::kWarpsN == 1 ? 0 : warp;  // this warp's share of each tile's keys
  const int split = int(blockIdx.x) % p.num_splits, m_block = int(blockIdx.x) / p.num_splits;
  const int hk = blockIdx.y, b = blockIdx.z;

  // ---- The sequence's keys, its split, the rows of this block ----------------------------------------
  const int appended = p.k_new != nullptr ? p.seqlen_new : 0;
  const int n_cached = min(max(p.cache_seqlens[b], 0), p.capacity - appended);  // clamped: see the top
  const int L = n_cached + appended;
  const int64_t chunk = ((int64_t(L) + p.num_splits - 1) / p.num_splits + kBlockN - 1) / kBlockN * kBlockN;
  const int k_begin = int(min(int64_t(L), split * chunk)), k_end = int(min(int64_t(L), k_begin + chunk));
  const int64_t cache_row = p.cache_batch_idx != nullptr ? min(max(p.cache_batch_idx[b], 0), p.cache_rows - 1) : b;
  const int32_t* pages = p.block_table != nullptr ? p.block_table + b * p.block_table_stride : nullptr;
  const int64_t diag_offset = int64_t(L) - p.seqlen_new;  // query token i sits at key position i + diag_offset

  const T* k_new = static_cast<const T*>(p.k_new) + b * p.kn_batch_stride + hk * p.kn_head_stride;
  const T* v_new = static_cast<const T*>(p.v_new) + b * p.vn_batch_stride + hk * p.vn_head_stride;
  T* const k_cache = static_cast<T*>(p.k_cache);
  T* const v_cache = static_cast<T*>(p.v_cache);
  const int chunks_valid = p.head_dim / 8;  // 16-byte chunks of a row; past them zero-filled, never stored
  // Paged cache: the page of key position pos (clamped into the cache), and the row inside it (a shift and a
  // mask for the usual power-of-two page sizes).
  auto page_of = [&](int pos) -> int {
    const int j = p.page_shift >= 0 ? pos >> p.page_shift : pos / p.page_size;
    return min(max(pages[j], 0), p.cache_rows - 1);
  };
  auto row_in_page = [&](int pos) { return p.page_shift >= 0 ? pos & (p.page_size - 1) : pos % p.page_size; };
  // Element offsets of key position pos (< L) in the K and V caches; `page` is page_of(pos) when paged.
  auto cache_offsets = [&](int pos, int page, int64_t* k_off, int64_t* v_off) {
    int64_t row = cache_row, r = pos;
    if (pages != nullptr) row = page, r = row_in_page(pos);
    *k_off = row * p.kc_batch_stride + r * p.kc_row_stride + hk * p.kc_head_stride;
    *v_off = row * p.vc_batch_stride + r * p.vc_row_stride + hk * p.vc_head_stride;
  };

  // ---- Append: this split's share of the new keys into the cache (one CTA per split: m_block 0) ----------
  if (appended > 0 && m_block == 0) {
    const int lo = max(k_begin, n_cached), n = k_end - lo;
    for (int idx = tid; idx < n * chunks_valid; idx += kThreads) {
      const int pos = lo + idx / chunks_valid, c = idx % chunks_valid;
      int64_t k_off, v_off;
      cache_offsets(pos, pages != nullptr ? page_of(pos) : 0, &k_off, &v_off);
      const int i = pos - n_cached;
      *reinterpret_cast<uint4*>(k_cache + k_off + c * 8) = *reinterpret_cast<const uint4*>(k_new + i * p.kn_row_stride + c * 8);
      *reinterpret_cast<uint4*>(v_cache + v_off + c * 8) = *reinterpret_cast<const uint4*>(v_new + i * p.vn_row_stride + c * 8);
    }
  }

  const int r_begin = m_block * kBlockM, r_end = min(r_begin + kBlockM, p.packed_rows);
  const int tok_first = r_begin / p.head_ratio, tok_last = (r_end - 1) / p.head_ratio;
  // Keys some row of the block sees: the split's, narrowed by the window (bottom-right aligned).
  int64_t lo = k_begin, hi = k_end;
  if (p.window_left >= 0) lo = max(lo, tok_first + diag_offset - p.window_left);
  if (p.window_right >= 0) hi = min(hi, tok_last + diag_offset + p.window_right + 1);
  const int tile_first = lo < hi ? int(lo - k_begin) / kBlockN : 0;
  const int tile_end = lo < hi ? int(hi - 1 - k_begin) / kBlockN + 1 : 0;  // one past the last

  // ---- Loads: thread tid copies chunk tid % 8 of rows tid / 8 + 16 pass, in every 64-column page ----------
  constexpr int kStepRows = kThreads / kPageChunks;  // 16
  const int load_row0 = tid / kPageChunks, load_cc = tid % kPageChunks;
  const uint32_t load_lane = K::in_page(load_row0, load_cc);
  {  // Q: packed row r = token r / ratio of head hk * ratio + r % ratio
    const T* q = static_cast<const T*>(p.q) + b * p.q_batch_stride;
#pragma unroll
    for (int pass = 0; pass < kBlockM / kStepRows; ++pass) {
      const int r = r_begin + load_row0 + pass * kStepRows;
      const bool row_ok = r < r_end;
      const T* src = q + (row_ok ? (r / p.head_ratio) * p.q_row_stride + (hk * p.head_ratio + r % p.head_ratio) * p.q_head_stride : 0);
#pragma unroll
      for (int pg = 0; pg < kPages; ++pg) {
        const int c = pg * kPageChunks + load_cc;
        const bool ok = row_ok && c < chunks_valid;
        cp_async_16(q_smem + pg * kBlockM * kRowBytes + pass * kStepRows * kRowBytes + load_lane, ok ? src + c * 8 : q, ok ? 16 : 0);
      }
    }
  }
  // K_j, V_j of the tile starting at key0 into ring stage `stage`; keys past k_end read as zero.
  auto load_tile = [&](int stage, int key0) {
    const uint32_t k_dst = ring + uint32_t(stage) * 2 * K::kTileBytes, v_dst = k_dst + K::kTileBytes;
#pragma unroll
    for (int pass = 0; pass < kBlockN / kStepRows; ++pass) {
      const int pos = key0 + load_row0 + pass * kStepRows;
      const T* k_src = k_cache;  // any valid address: not read when the chunk is zero-filled
      const T* v_src = v_cache;
      const bool row_ok = pos < k_end;
      if (row_ok) {
        if (pos < n_cached) {
          int64_t k_off, v_off;
          cache_offsets(pos, pages != nullptr ? page_of(pos) : 0, &k_off, &v_off);
          k_src += k_off;
          v_src += v_off;
        } else {
          k_src = k_new + (pos - n_cached) * p.kn_row_stride;
          v_src = v_new + (pos - n_cached) * p.vn_row_stride;
        }
      }
      const uint32_t dst = pass * kStepRows * kRowBytes + load_lane;
#pragma unroll
      for (int pg = 0; pg < kPages; ++pg) {
        const int c = pg * kPageChunks + load_cc;
        const bool ok = row_ok && c < chunks_valid;
        cp_async_16(k_dst + pg * kBlockN * kRowBytes + dst, ok ? k_src + c * 8 : k_cache, ok ? 16 : 0);
        cp_async_16(v_dst + pg * kBlockN * kRowBytes + dst, ok ? v_src + c * 8 : v_cache, ok ? 16 : 0);
      }
    }
  };

  // The ring's prologue: Q joins tile 0's group; a group is committed per stage even when empty, so the
  // wait count below is the same every step.
#pragma unroll
  for (int s = 0; s < K::kStages - 1; ++s) {
    if (tile_first + s < tile_end) load_tile(s, k_begin + (tile_first + s) * kBlockN);
    cp_async_commit();
  }

  // A negative scale is folded into Q's sign, so -inf stays the masked value and the running max a max.
  const uint32_t q_sign = p.scale < 0.f ? 0x80008000u : 0u;
  const float scale_log2 = fabsf(p.scale_log2);
  const uint32_t q_lane = K::in_page(lane & 15, lane >> 4);                                // A: rows 0-15
  const uint32_t k_lane = K::in_page((lane & 7) + ((lane >> 4) << 3), (lane >> 3) & 1);   // B: keys 0-15
  const uint32_t v_lane = K::in_page((lane & 7) + (((lane >> 3) & 1) << 3), lane >> 4);   // B^T: keys 0-15
  const int warp_row0 = wm * 16, warp_key0 = wn * K::kKeysPerWarp;

  // Per row (g and g + 8 of this warp's 16): the token's key window [row_lo, row_hi) (bottom-right aligned).
  int64_t row_lo[2], row_hi[2];
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    const int64_t diag = (r_begin + warp_row0 + g + 8 * rr) / p.head_ratio + diag_offset;
    row_lo[rr] = p.window_left >= 0 ? diag - p.window_left : INT64_MIN;
    row_hi[rr] = p.window_right >= 0 ? min(diag + p.window_right + 1, int64_t(k_end)) : int64_t(k_end);
  }

  float acc_o[kDTiles][4];
  float row_max[2] = {kNegInf, kNegInf}, row_sum[2] = {0.f, 0.f};  // row_sum: this lane's part
#pragma unroll
  for (int dt = 0; dt < kDTiles; ++dt)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc_o[dt][e] = 0.f;

  for (int tile = tile_first; tile < tile_end; ++tile) {
    const int step = tile - tile_first, stage = step % K::kStages;
    const int key0 = k_begin + tile * kBlockN;
    cp_async_wait<K::kStages - 2>();  // this tile landed (for this thread's copies) ...
    __syncthreads();                  // ... and everyone's; everyone is done with the stage refilled next
    if (tile + K::kStages - 1 < tile_end) load_tile((step + K::kStages - 1) % K::kStages, key0 + (K::kStages - 1) * kBlockN);
    cp_async_commit();
    const uint32_t k_smem = ring + uint32_t(stage) * 2 * K::kTileBytes, v_smem = k_smem + K::kTileBytes;

    // S = Q K_j^T on this warp's rows and keys.
    float s[kNTiles][4];
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[nt][e] = 0.f;
#pragma unroll
    for (int ks = 0; ks < K::kKSteps; ++ks) {
      const int pg = ks / 4, cc = (ks * 2) % kPageChunks;
      uint32_t a[4];
      ldmatrix_x4(a, q_smem + pg * kBlockM * kRowBytes + warp_row0 * kRowBytes + (q_lane ^ (cc << 4)));
#pragma unroll
      for (int r = 0; r < 4; ++r) a[r] ^= q_sign;
#pragma unroll
      for (int np = 0; np < kNTiles / 2; ++np) {
        uint32_t bk[4];
        ldmatrix_x4(bk, k_smem + pg * kBlockN * kRowBytes + (warp_key0 + np * 16) * kRowBytes + (k_lane ^ (cc << 4)));
        E::mma(s[2 * np], a, bk[0], bk[1]);
        E::mma(s[2 * np + 1], a, bk[2], bk[3]);
      }
    }

    // Element mask, only on tiles that cross the split's end or a window edge.
    const bool edge = key0 + kBlockN > k_end ||
                      (p.window_left >= 0 && key0 < tok_last + diag_offset - p.window_left) ||
                      (p.window_right >= 0 && key0 + kBlockN - 1 > tok_first + diag_offset + p.window_right);
    if (edge) {
      const int64_t col0 = int64_t(key0) + warp_key0 + 2 * t;
#pragma unroll
      for (int rr = 0; rr < 2; ++rr)
#pragma unroll
        for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int64_t col = col0 + nt * 8 + e;
            if (col < row_lo[rr] || col >= row_hi[rr]) s[nt][2 * rr + e] = kNegInf;
          }
    }

    // Online softmax in base 2, the scale folded into one FFMA; a row lives in the 4 lanes of a quad.
    uint32_t p_frag[kNTiles][2];  // P in the input dtype, the accumulator layout of S
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      float tile_max = kNegInf;
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt) tile_max = fmaxf(tile_max, fmaxf(s[nt][2 * rr], s[nt][2 * rr + 1]));
      tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
      tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
      const float max_new = fmaxf(row_max[rr], tile_max);
      // A row with nothing visible yet keeps max -inf: subtract 0 then, so exp2(-inf - -inf) never makes NaN.
      const float max_scaled = max_new == kNegInf ? 0.f : max_new * scale_log2;
      float sum = 0.f;
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt) {
        const float p0 = exp2f(s[nt][2 * rr] * scale_log2 - max_scaled);
        const float p1 = exp2f(s[nt][2 * rr + 1] * scale_log2 - max_scaled);
        sum += p0 + p1;
        p_frag[nt][rr] = E::pack(p0, p1);
      }
      const float correction = exp2f(row_max[rr] * scale_log2 - max_scaled);  // 0 while the old max is -inf
      row_sum[rr] = row_sum[rr] * correction + sum;
#pragma unroll
      for (int dt = 0; dt < kDTiles; ++dt) {
        acc_o[dt][2 * rr] *= correction;
        acc_o[dt][2 * rr + 1] *= correction;
      }
      row_max[rr] = max_new;
    }

    // O += P V_j: the S accumulators of two adjacent n8 tiles are the A fragment of one k16 step.
#pragma unroll
    for (int kc = 0; kc < K::kKeysPerWarp / 16; ++kc) {
      const uint32_t a[4] = {p_frag[2 * kc][0], p_frag[2 * kc][1], p_frag[2 * kc + 1][0], p_frag[2 * kc + 1][1]};
#pragma unroll
      for (int dp = 0; dp < kDTiles / 2; ++dp) {
        const int pg = dp / 4, cc = (dp * 2) % kPageChunks;
        uint32_t bv[4];
        ldmatrix_x4_trans(bv, v_smem + pg * kBlockN * kRowBytes + (warp_key0 + kc * 16) * kRowBytes + (v_lane ^ (cc << 4)));
        E::mma(acc_o[2 * dp], a, bv[0], bv[1]);
        E::mma(acc_o[2 * dp + 1], a, bv[2], bv[3]);
      }
    }
  }
  cp_async_wait<0>();  // the empty groups of the ring's tail (and Q's, when there was no tile)
  __syncthreads();     // every warp is done with Q and the ring: the epilogue stages through them

  // ---- Epilogue: each warp's (m, l, O) into the ring, merged per row across the kWarpsN warps --------------
  float* o_stage = reinterpret_cast<float*>(smem);  // [kWarpsN][kBlockM][kOStride]
  float* m_stage = o_stage + K::kWarpsN * kBlockM * K::kOStride;  // [kWarpsN][kBlockM]
  float* l_stage = m_stage + K::kWarpsN * kBlockM;
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    const int row = warp_row0 + g + 8 * rr;
    float sum = row_sum[rr];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    if (t == 0) {
      m_stage[wn * kBlockM + row] = row_max[rr];
      l_stage[wn * kBlockM + row] = sum;
    }
    float* dst = o_stage + (wn * kBlockM + row) * K::kOStride + 2 * t;
#pragma unroll
    for (int dt = 0; dt < kDTiles; ++dt)
      *reinterpret_cast<float2*>(dst + dt * 8) = make_float2(acc_o[dt][2 * rr], acc_o[dt][2 * rr + 1]);
  }
  __syncthreads();

  // Row `row` merged: its max over the warps (in S units), each warp's weight, the sum l.
  auto merged = [&](int row, float* weight, float* m_out) {
    float m = kNegInf;
#pragma unroll
    for (int w = 0; w < K::kWarpsN; ++w) m = fmaxf(m, m_stage[w * kBlockM + row]);
    const float m_scaled = m == kNegInf ? 0.f : m * scale_log2;
    float l = 0.f;
#pragma unroll
    for (int w = 0; w < K::kWarpsN; ++w) {
      weight[w] = exp2f(m_stage[w * kBlockM + row] * scale_log2 - m_scaled);
      l += weight[w] * l_stage[w * kBlockM + row];
    }
    *m_out = m;
    return l;  // >= 1 for a row that saw a key, 0 for one that saw none
  };

  const bool partial = p.num_splits > 1;
  const int d = p.head_dim, rows = r_end - r_begin;
  for (int idx = tid; idx < rows * d; idx += kThreads) {
    const int row = idx / d, col = idx % d;
    float weight[K::kWarpsN], m;
    const float l = merged(row, weight, &m);
    float o = 0.f;
#pragma unroll
    for (int w = 0; w < K::kWarpsN; ++w) o += weight[w] * o_stage[(w * kBlockM + row) * K::kOStride + col];
    o = l > 0.f ? o / l : 0.f;
    const int r = r_begin + row, i = r / p.head_ratio, h = hk * p.head_ratio + r % p.head_ratio;
    if (partial)
      p.o_part[((int64_t(split) * p.batch + b) * p.heads_q + h) * p.seqlen_new * d + int64_t(i) * d + col] = o;
    else
      static_cast<T*>(p.o)[b * p.o_batch_stride + i * p.o_row_stride + h * p.o_head_stride + col] = T(o);
  }
  if (tid < rows && (partial || p.lse != nullptr)) {
    float weight[K::kWarpsN], m;
    const float l = merged(tid, weight, &m);
    const float lse = l > 0.f ? m * fabsf(p.scale) + logf(l) : kNegInf;
    const int r = r_begin + tid, i = r / p.head_ratio, h = hk * p.head_ratio + r % p.head_ratio;
    if (partial)
      p.lse_part[((int64_t(split) * p.batch + b) * p.heads_q + h) * p.seqlen_new + i] = lse;
    else
      p.lse[b * p.lse_batch_stride + h * p.lse_head_stride + i * p.lse_row_stride] = lse;
  }
}

template <int kHeadDim, Layout kLayout, DType kDType>
int32_t launch_attention(const KernelParams& k, const Plan& plan, void* stream) {
  using K = Traits<kHeadDim, kLayout, kDType>;
  static_assert(K::kSmemBytes > 0, "instantiation");
  auto* kernel = attention_kernel<K>;
  if (const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, K::kSmemBytes);
      e != cudaSuccess)
    return cuda::status_from(e, "cudaFuncSetAttribute(kvcache attention, MaxDynamicSharedMemorySize)");
  const dim3 grid(unsigned(plan.m_blocks * plan.splits), unsigned(k.heads_kv), unsigned(k.batch));
  kernel<<<grid, kThreads, K::kSmemBytes, static_cast<cudaStream_t>(stream)>>>(k);
  return cuda::check_launch("kvcache attention kernel");
}

}  // namespace flash::sm80::kvcache

// One line per generated .cu file: FLASH_KVCACHE_INSTANTIATE(128, kDecode, BF16)
#define FLASH_KVCACHE_INSTANTIATE(D, LAYOUT, DTYPE)                                                            \
  template int32_t flash::sm80::kvcache::launch_attention<D, flash::sm80::kvcache::Layout::LAYOUT,             \
                                                          flash::DType::DTYPE>(                                \
      const flash::sm80::kvcache::KernelParams&, const flash::sm80::kvcache::Plan&, void*);
