// libflash/cuda/sm80/fwd/fwd_kernel.cuh -- the fused FlashAttention-2 forward kernel for sm_80 and newer.
//
// One CTA owns one query block Q_i (block_m rows) of one (batch, head). Its warps split the rows
// ("split-Q": warp w owns rows [w*rows_per_warp, (w+1)*rows_per_warp)) and each reads all of every K_j,
// V_j tile, so the online softmax of a row never leaves its 4-lane quad. Per key block j:
//
//   S     = Q_i K_j^T                     mma.sync m16n8k16, fp32 accumulate, Q and K by ldmatrix
//   row_max_new = max(row_max, rowmax(S))
//   P     = exp2(S * scale_log2 - row_max_new * scale_log2)
//   row_sum = exp2((row_max - row_max_new) * scale_log2) * row_sum + rowsum(P)
//   O     = exp2((row_max - row_max_new) * scale_log2) * O + P V_j    P straight from the S registers
//
// then O /= row_sum, LSE = row_max * scale + log(row_sum), both written once.
//
// Data movement: Q, K, V go global -> shared with cp.async (16-byte chunks, zero-filled past the
// sequence or head-dim end, so no stale shared memory can turn into 0 * NaN). One K and one V buffer:
// V_j is loaded while QK^T_j runs and K_{j+1} while softmax and P V_j run (FA2's schedule; with two
// CTAs per SM the other CTA's math covers what is left). Shared tiles are stored in pages of 64 (or 32)
// columns with the 16-byte chunk index XORed by the row, so ldmatrix's eight row addresses and the
// cp.async writes each hit eight different bank groups.
//
// Key blocks visited: those of the window's range, last first; with a block-sparse mask, those the
// mask's lists name for the CTA's rows, walked from shared-memory bitmaps built once per CTA
// (SparseBlocks), so unlisted blocks are never loaded and fully listed ones take the unmasked path.
//
// Packed variable-length batches (p.varlen, a run-time property of the same kernels): the grid is the dense
// one over max_seqlen_q; a CTA reads its sequence's offsets and lengths (seq_bounds, libflash/varlen.h, which
// clamps them into the tensors), exits when its query block lies past the sequence's end, and otherwise runs
// the dense body with the sequence's rows, lengths and diagonal (docs/kernels.md, "Packed variable-length
// batches on the GPU"). A dense call takes the same path with offsets 0.
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
#include "../../runtime.h"
#include "../../ptx/sm80.cuh"
#include "blocks.cuh"
#include "fwd.h"
#include "tile_table.h"

namespace flash::sm80 {

using ptx::cp_async_16;
using ptx::cp_async_commit;
using ptx::cp_async_wait;
using ptx::Elem;
using ptx::ldmatrix_x4;
using ptx::ldmatrix_x4_trans;

// ---- Compile-time shape of one instantiation ----------------------------------------------------------
template <int kHeadDim_, int kBlockM_, int kBlockN_, int kWarps_, int kStages_, DType kDType_>
struct Traits {
  static constexpr DType kDType = kDType_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockM = kBlockM_;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kWarps = kWarps_;
  static constexpr int kStages = kStages_;
  static_assert(kStages == 1 || kStages == 2, "stages");
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kRowsPerWarp = kBlockM / kWarps;
  static constexpr int kMTiles = kRowsPerWarp / 16;  // m16 tiles per warp
  static constexpr int kNTiles = kBlockN / 8;        // n8 tiles of S per m16 tile
  static constexpr int kDTiles = kHeadDim / 8;       // n8 tiles of O per m16 tile
  static constexpr int kKSteps = kHeadDim / 16;      // k16 steps of Q K^T
  static_assert(kRowsPerWarp % 16 == 0 && kBlockN % 16 == 0 && kHeadDim % 16 == 0, "tile shape");
  // Shared layout of a [rows][kHeadDim] tile: kPages pages of [rows][kPageCols]; a row of a page is
  // kRowBytes (128 or 64) and its 16-byte chunk cc is stored at cc ^ swizzle(row).
  static constexpr int kPageCols = kHeadDim % 64 == 0 ? 64 : 32;
  static constexpr int kPageChunks = kPageCols / 8;
  static constexpr int kRowBytes = kPageCols * 2;
  static constexpr int kChunksPerRow = kHeadDim / 8;
  static constexpr int kQBytes = kBlockM * kHeadDim * 2;
  static constexpr int kKVBytes = kBlockN * kHeadDim * 2;
  static constexpr int kSmemBytes = kQBytes + 2 * kStages * kKVBytes;
  static_assert(kSmemBytes == TileShape{kHeadDim, 0, kBlockM, kBlockN, kWarps, kStages}.smem_bytes(), "smem formula");

  // 128-byte rows: chunk ^= row % 8. 64-byte rows (two per 128-byte bank line): chunk ^= (row / 2) % 4,
  // so rows 2k and 2k+1 share a pattern but sit in different halves of the line.
  static __device__ __forceinline__ uint32_t in_page(int row, int cc) {
    const int sw = kPageChunks == 8 ? (row & 7) : ((row >> 1) & 3);
    return uint32_t(row * kRowBytes + ((cc ^ sw) << 4));
  }
  template <int kRows>
  static __device__ __forceinline__ uint32_t chunk_offset(int row, int chunk) {
    return uint32_t((chunk / kPageChunks) * kRows * kRowBytes) + in_page(row, chunk % kPageChunks);
  }
};

// ---- The kernel -------------------------------------------------------------------------------------
// kSparse: visit the key blocks a block-sparse mask lists instead of a range. A compile-time branch so
// the dense path carries none of the list state in registers.
template <class K, bool kSparse>
__device__ __forceinline__ void fwd_body(const FwdParams& p) {
  using E = Elem<K::kDType>;
  using T = typename E::type;
  constexpr int kBlockM = K::kBlockM, kBlockN = K::kBlockN, kMTiles = K::kMTiles, kNTiles = K::kNTiles;
  constexpr int kDTiles = K::kDTiles, kRowBytes = K::kRowBytes, kPageChunks = K::kPageChunks;
  const float kNegInf = -INFINITY;

  extern __shared__ __align__(1024) uint8_t smem[];
  const uint32_t q_smem = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const uint32_t k_smem0 = q_smem + K::kQBytes;                       // K buffers [kStages]
  const uint32_t v_smem0 = k_smem0 + K::kStages * K::kKVBytes;         // V buffers [kStages]

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, t = lane % 4;  // mma fragment coordinates: row g (and g+8), columns 2t, 2t+1
  // Launch order (CTAs start in blockIdx order; a 1-D grid also lifts the 65535 limit of gridDim.y/z):
  //  - causal (no left bound, right bound at the diagonal): query block m sees about m key blocks, so
  //    longest first over the whole grid -- every head's heaviest block before anyone's second heaviest,
  //    which shortens the last wave's tail (+2..12% at d128, seqlen >= 2k on the H100; docs/kernels.md);
  //  - otherwise every query block does about the same work: keep one (batch, head)'s blocks together
  //    so its K and V stay in L2 (the grid-wide order lost 3..9% there).
  const int num_bh = p.heads_q * p.batch;
  const int num_m_blocks = (p.seqlen_q + kBlockM - 1) / kBlockM;
  const bool longest_first = p.window_right >= 0 && p.window_left < 0;
  const int x = static_cast<int>(blockIdx.x);
  const int m_block = num_m_blocks - 1 - (longest_first ? x / num_bh : x % num_m_blocks);
  const int bh = longest_first ? x % num_bh : x / num_m_blocks;
  const int h = bh % p.heads_q, b = bh / p.heads_q, h_kv = h / p.head_ratio;  // GQA: kv head = h / head_ratio
  // The sequence's rows and lengths: a varlen call's from its (clamped) offsets, a dense call's own (varlen.h).
  const SeqBounds seq = kSparse ? SeqBounds{} : seq_bounds(p, b);
  // The sequence's key count and diagonal. A block-sparse call is never varlen (validation refuses the pair), so its
  // kernel reads the dense values from the parameter bank at each use, as it did before varlen: held in registers
  // through its loop they cost the sparse body spills at d64 (ptxas, 255 registers).
  auto seqlen_k = [&]() -> int {
    if constexpr (kSparse) return p.seqlen_k;
    else return seq.seqlen_k;
  };
  auto diag_offset = [&]() -> int64_t {
    if constexpr (kSparse) return p.diag_offset;
    else return seq.diag_offset;
  };
  const int q_begin = m_block * kBlockM;
  if (!kSparse && q_begin >= seq.seqlen_q) return;  // varlen: a query block past its sequence (the grid covers the longest)
  const int q_rows = min(kBlockM, (kSparse ? p.seqlen_q : seq.seqlen_q) - q_begin);
  const int q_row0 = seq.q_start + q_begin;  // the first row in q, o, lse (dense: q_begin; the batch stride adds b)
  const int chunks_valid = p.head_dim / 8;  // head-dim chunks past this are zero-filled, never read

  const T* q = static_cast<const T*>(p.q) + b * p.q_batch_stride + int64_t(q_row0) * p.q_row_stride + h * p.q_head_stride;
  const T* k = static_cast<const T*>(p.k) + b * p.k_batch_stride + int64_t(seq.k_start) * p.k_row_stride + h_kv * p.k_head_stride;
  const T* v = static_cast<const T*>(p.v) + b * p.v_batch_stride + int64_t(seq.k_start) * p.v_row_stride + h_kv * p.v_head_stride;
  // Outputs (computed where used, so no register holds them through the main loop).
#define FLASH_SM80_OUTPUT_POINTERS                                                                                 \
  T* o = static_cast<T*>(p.o) + b * p.o_batch_stride + int64_t(q_row0) * p.o_row_stride + h * p.o_head_stride; \
  float* lse = p.lse ? p.lse + b * p.lse_batch_stride + h * p.lse_head_stride + int64_t(q_row0) * p.lse_row_stride : nullptr;

  // global -> shared, 16 bytes per cp.async; rows past rows_valid and chunks past the head dim read 0.
  // Thread tid copies chunk cc = tid % kPageChunks of rows row0 + pass * kStepRows of every page, so
  // 8 (or 4) consecutive threads read one 128-byte (64-byte) row segment and the swizzle of its rows is
  // the same every pass: one base address per thread, the rest are immediates.
  constexpr int kStepRows = K::kThreads / kPageChunks;
  static_assert(K::kThreads % kPageChunks == 0 && kStepRows % 8 == 0, "load pattern");
  const int load_row0 = tid / kPageChunks, load_cc = tid % kPageChunks;
  const uint32_t load_lane = K::in_page(load_row0, load_cc);
  auto load_tile = [&](auto rows_tag, uint32_t dst, const T* src, int64_t row_stride, int rows_valid) {
    constexpr int kRows = decltype(rows_tag)::value;
    static_assert(kRows % kStepRows == 0, "load pattern");
    const T* src_row = src + load_row0 * row_stride + load_cc * 8;
    if (rows_valid >= kRows && chunks_valid == K::kChunksPerRow) {  // interior tile: no predicates
#pragma unroll
      for (int pass = 0; pass < kRows / kStepRows; ++pass) {
#pragma unroll
        for (int page = 0; page < K::kHeadDim / K::kPageCols; ++page)
          cp_async_16(dst + page * kRows * kRowBytes + pass * kStepRows * kRowBytes + load_lane, src_row + page * K::kPageCols, 16);
        src_row += kStepRows * row_stride;
      }
      return;
    }
#pragma unroll
    for (int pass = 0; pass < kRows / kStepRows; ++pass) {
      const bool row_ok = load_row0 + pass * kStepRows < rows_valid;
#pragma unroll
      for (int page = 0; page < K::kHeadDim / K::kPageCols; ++page) {
        const bool ok = row_ok && page * kPageChunks + load_cc < chunks_valid;
        cp_async_16(dst + page * kRows * kRowBytes + pass * kStepRows * kRowBytes + load_lane,
                    ok ? src_row + page * K::kPageCols : src, ok ? 16 : 0);
      }
      src_row += kStepRows * row_stride;
    }
  };
  using RowsM = std::integral_constant<int, kBlockM>;
  using RowsN = std::integral_constant<int, kBlockN>;

  const int warp_row0 = warp * K::kRowsPerWarp;
  const KeyRange<kBlockN> range(p, seqlen_k(), diag_offset(), q_begin, q_begin + q_rows);
  int dense_cursor = range.n_hi;
  SparseBlocks<kBlockM, kBlockN, K::kThreads> sparse_blocks;
  if constexpr (kSparse) {
    // Q's copy is issued (not yet committed: it joins K_0's group) before the list reads so the two overlap.
    load_tile(RowsM{}, q_smem, q, p.q_row_stride, q_rows);
    sparse_blocks.build(p, reinterpret_cast<uint32_t*>(smem + K::kSmemBytes), b, h, q_begin, q_begin + q_rows, range,
                        warp_row0, tid);
  }
  auto next_block = [&]() -> int {
    if constexpr (kSparse) return sparse_blocks.next();
    else return dense_cursor >= range.n_lo ? dense_cursor-- : -1;
  };
  int n_block = next_block();

  if (n_block < 0) {  // no visible key anywhere in this query block: O = 0, LSE = -inf
    if constexpr (kSparse) {  // Q's copy was issued: let it land before the CTA's shared memory is released
      cp_async_commit();
      cp_async_wait<0>();
    }
    FLASH_SM80_OUTPUT_POINTERS
    for (int idx = tid; idx < q_rows * K::kChunksPerRow; idx += K::kThreads) {
      const int row = idx / K::kChunksPerRow, chunk = idx % K::kChunksPerRow;
      if (chunk < chunks_valid) *reinterpret_cast<uint4*>(o + row * p.o_row_stride + chunk * 8) = make_uint4(0, 0, 0, 0);
    }
    if (lse)
      for (int row = tid; row < q_rows; row += K::kThreads) lse[row * p.lse_row_stride] = kNegInf;
    return;
  }

  if constexpr (!kSparse) load_tile(RowsM{}, q_smem, q, p.q_row_stride, q_rows);
  load_tile(RowsN{}, k_smem0, k + int64_t(n_block) * kBlockN * p.k_row_stride, p.k_row_stride, seqlen_k() - n_block * kBlockN);
  cp_async_commit();
  if constexpr (K::kStages == 2) {
    load_tile(RowsN{}, v_smem0, v + int64_t(n_block) * kBlockN * p.v_row_stride, p.v_row_stride, seqlen_k() - n_block * kBlockN);
    cp_async_commit();
  }

  // A negative softmax scale is folded into Q's sign so that -inf stays the masked value and the running
  // max stays a max: scale * q.k == |scale| * (-q).k.
  const uint32_t q_sign = p.scale < 0.f ? 0x80008000u : 0u;
  const float scale_log2 = fabsf(p.scale_log2);

  // Per-lane ldmatrix offsets inside a page (the XOR with the step's chunk is applied per step).
  const uint32_t q_lane = K::in_page(warp_row0 + (lane & 15), lane >> 4);          // A: rows 0-15, chunk +0/+1
  const uint32_t k_lane = K::in_page((lane & 7) + ((lane >> 4) << 3), (lane >> 3) & 1);  // B: keys 0-15, chunk +0/+1
  const uint32_t v_lane = K::in_page((lane & 7) + (((lane >> 3) & 1) << 3), lane >> 4);  // B^T: keys 0-15, chunk +0/+1

  float acc_o[kMTiles][kDTiles][4];
  float row_max[kMTiles][2], row_sum[kMTiles][2];  // rows g and g+8 of each m16 tile; row_sum is this lane's part
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int dt = 0; dt < kDTiles; ++dt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc_o[mt][dt][e] = 0.f;
    row_max[mt][0] = row_max[mt][1] = kNegInf;
    row_sum[mt][0] = row_sum[mt][1] = 0.f;
  }

  for (int step = 0;; ++step) {
    const bool first = step == 0;
    const uint32_t stage_offset = K::kStages == 2 ? uint32_t(step & 1) * K::kKVBytes : 0u;
    const uint32_t k_smem = k_smem0 + stage_offset, v_smem = v_smem0 + stage_offset;
    int n_next;
    if constexpr (K::kStages == 1) {
      cp_async_wait<0>();
      __syncthreads();  // K_j (and Q) landed for every thread's copies; every warp is done reading V_{j-1}
      load_tile(RowsN{}, v_smem, v + int64_t(n_block) * kBlockN * p.v_row_stride, p.v_row_stride, seqlen_k() - n_block * kBlockN);
      cp_async_commit();
    } else {
      cp_async_wait<1>();  // K_j landed (V_j may still be in flight)
      __syncthreads();     // ... for every thread's copies; every warp is done with step j-1's buffers
      n_next = next_block();
      if (n_next >= 0) {  // K_{j+1}, V_{j+1} into the other buffers: a whole step to arrive
        const uint32_t other = uint32_t((step + 1) & 1) * K::kKVBytes;
        load_tile(RowsN{}, k_smem0 + other, k + int64_t(n_next) * kBlockN * p.k_row_stride, p.k_row_stride, seqlen_k() - n_next * kBlockN);
        cp_async_commit();
        load_tile(RowsN{}, v_smem0 + other, v + int64_t(n_next) * kBlockN * p.v_row_stride, p.v_row_stride, seqlen_k() - n_next * kBlockN);
        cp_async_commit();
      }
    }

    // This warp's share of the tile: with a block mask whose query blocks are half the CTA's, the other
    // half's warps may have listed a tile this warp's rows did not; then this warp skips its two matrix
    // products (its softmax sees an S masked in full: P = 0, no max moves) and still takes part in the
    // loads and barriers. Skipping the softmax too cost registers: ptxas spilled 120 bytes at d64.
    uint32_t warp_bits = 3u;  // bit 0: keys [0, kBlockN/2) listed for this warp's rows, bit 1: the rest
    if constexpr (kSparse) warp_bits = sparse_blocks.warp_bits(n_block);
    const bool warp_active = warp_bits != 0u;

    // S = Q_i K_j^T
    float s[kMTiles][kNTiles][4];
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[mt][nt][e] = 0.f;
    if (warp_active) {
#pragma unroll
      for (int ks = 0; ks < K::kKSteps; ++ks) {
        const int chunk = ks * 2, page = chunk / kPageChunks, cc = chunk % kPageChunks;
        uint32_t a[kMTiles][4];
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
          ldmatrix_x4(a[mt], q_smem + page * kBlockM * kRowBytes + mt * 16 * kRowBytes + (q_lane ^ (cc << 4)));
#pragma unroll
          for (int r = 0; r < 4; ++r) a[mt][r] ^= q_sign;
        }
#pragma unroll
        for (int np = 0; np < kNTiles / 2; ++np) {
          uint32_t bk[4];
          ldmatrix_x4(bk, k_smem + page * kBlockN * kRowBytes + np * 16 * kRowBytes + (k_lane ^ (cc << 4)));
#pragma unroll
          for (int mt = 0; mt < kMTiles; ++mt) {
            E::mma(s[mt][2 * np], a[mt], bk[0], bk[1]);
            E::mma(s[mt][2 * np + 1], a[mt], bk[2], bk[3]);
          }
        }
      }
    }

    if constexpr (K::kStages == 1) {
      n_next = next_block();
      cp_async_wait<0>();
      __syncthreads();  // V_j landed; every warp is done reading K_j, so K_{j+1} may overwrite it
      if (n_next >= 0) {
        load_tile(RowsN{}, k_smem, k + int64_t(n_next) * kBlockN * p.k_row_stride, p.k_row_stride, seqlen_k() - n_next * kBlockN);
        cp_async_commit();
      }
    }

    uint32_t p_frag[kMTiles][kNTiles][2];  // P in the input dtype, the accumulator layout of S
    // Element mask, only on blocks that cross the sequence end or a window edge, or that this warp's
    // rows list only half of. Per row, the visible keys of this block are the columns [lo, hi) relative
    // to this lane's first column (a listed half narrows that interval).
    if (range.needs_mask(p, seqlen_k(), diag_offset(), n_block, q_begin, q_begin + q_rows - 1) || warp_bits != 3u) {
      const int cut_lo = (warp_bits & 1u) ? 0 : kBlockN / 2, cut_hi = (warp_bits & 2u) ? kBlockN : kBlockN / 2;
      const int64_t col0 = int64_t(n_block) * kBlockN + 2 * t;
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int64_t diag = q_begin + warp_row0 + mt * 16 + g + r * 8 + diag_offset();  // query row + offset
          int64_t lo = p.window_left >= 0 ? diag - p.window_left : 0;
          int64_t hi = p.window_right >= 0 ? diag + p.window_right + 1 : seqlen_k();
          hi = hi > seqlen_k() ? seqlen_k() : hi;
          const int lo_rel = max(int(max(min(lo - col0, int64_t(kBlockN)), int64_t(-1))), cut_lo - 2 * t);
          const int hi_rel = min(int(max(min(hi - col0, int64_t(kBlockN)), int64_t(-1))), cut_hi - 2 * t);
#pragma unroll
          for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const int c = nt * 8 + e;
              if (c < lo_rel || c >= hi_rel) s[mt][nt][2 * r + e] = kNegInf;
            }
        }
    }

    // Online softmax (Algorithm 1, lines 9-11, in base 2 with the scale folded into one FFMA).
    float max_new[kMTiles][2];
    bool max_moved = false;
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float block_max = kNegInf;
#pragma unroll
        for (int nt = 0; nt < kNTiles; ++nt) block_max = fmaxf(block_max, fmaxf(s[mt][nt][2 * r], s[mt][nt][2 * r + 1]));
        // A row lives in the 4 lanes of a quad.
        block_max = fmaxf(block_max, __shfl_xor_sync(0xffffffffu, block_max, 1));
        block_max = fmaxf(block_max, __shfl_xor_sync(0xffffffffu, block_max, 2));
        max_new[mt][r] = fmaxf(row_max[mt][r], block_max);
        max_moved |= max_new[mt][r] != row_max[mt][r];
      }
    // Past the first few blocks the running max rarely moves; when it moved in no row of the warp the
    // correction is exactly 1 and the O rescale (d/8*4 FMULs per row pair) is skipped, bit for bit the same.
    const bool rescale = !first && __any_sync(0xffffffffu, max_moved);
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        // A row with nothing visible yet keeps max -inf; subtract 0 then, so exp2(-inf - -inf) never makes NaN.
        const float max_scaled = max_new[mt][r] == kNegInf ? 0.f : max_new[mt][r] * scale_log2;
        float sum = 0.f;
#pragma unroll
        for (int nt = 0; nt < kNTiles; ++nt) {
          const float p0 = exp2f(s[mt][nt][2 * r] * scale_log2 - max_scaled);
          const float p1 = exp2f(s[mt][nt][2 * r + 1] * scale_log2 - max_scaled);
          sum += p0 + p1;  // row_sum from the fp32 P, as the reference does
          p_frag[mt][nt][r] = E::pack(p0, p1);  // packed at once: halves the registers S occupied
        }
        if (rescale) {
          // exp2(-inf) = 0 when the old max was -inf, which also zeroes the (zero) O rows.
          const float correction = exp2f(row_max[mt][r] * scale_log2 - max_scaled);
          row_sum[mt][r] = row_sum[mt][r] * correction + sum;
#pragma unroll
          for (int dt = 0; dt < kDTiles; ++dt) {
            acc_o[mt][dt][2 * r] *= correction;
            acc_o[mt][dt][2 * r + 1] *= correction;
          }
        } else {
          row_sum[mt][r] += sum;  // first block (row_sum = 0), or max unchanged (correction = 1)
        }
        row_max[mt][r] = max_new[mt][r];
      }

    if constexpr (K::kStages == 2) {
      if (n_next >= 0) cp_async_wait<2>();  // V_j landed; K_{j+1}, V_{j+1} may still be in flight
      else cp_async_wait<0>();
      __syncthreads();
    }

    if (warp_active) {
      // O += P V_j. The S accumulator of two adjacent n8 tiles is exactly the A fragment of one k16 step.
#pragma unroll
      for (int kc = 0; kc < kBlockN / 16; ++kc) {
        uint32_t a[kMTiles][4];
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
          a[mt][0] = p_frag[mt][2 * kc][0];
          a[mt][1] = p_frag[mt][2 * kc][1];
          a[mt][2] = p_frag[mt][2 * kc + 1][0];
          a[mt][3] = p_frag[mt][2 * kc + 1][1];
        }
#pragma unroll
        for (int dp = 0; dp < kDTiles / 2; ++dp) {
          const int chunk = dp * 2, page = chunk / kPageChunks, cc = chunk % kPageChunks;
          uint32_t bv[4];
          ldmatrix_x4_trans(bv, v_smem + page * kBlockN * kRowBytes + kc * 16 * kRowBytes + (v_lane ^ (cc << 4)));
#pragma unroll
          for (int mt = 0; mt < kMTiles; ++mt) {
            E::mma(acc_o[mt][2 * dp], a[mt], bv[0], bv[1]);
            E::mma(acc_o[mt][2 * dp + 1], a[mt], bv[2], bv[3]);
          }
        }
      }
    }

    if (n_next < 0) break;
    n_block = n_next;
  }

  // Epilogue: O /= row_sum; O goes through this warp's own rows of the Q tile (no other warp reads them)
  // so the global stores are 16-byte and row-contiguous.
  const float scale = fabsf(p.scale);
  FLASH_SM80_OUTPUT_POINTERS
#undef FLASH_SM80_OUTPUT_POINTERS
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float sum = row_sum[mt][r];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      // sum >= 1 for a row that saw a key (its max contributes exp2(0)); 0 for one that saw none.
      const float inv = sum > 0.f ? 1.f / sum : 0.f;
      const int row = warp_row0 + mt * 16 + g + r * 8;
#pragma unroll
      for (int dt = 0; dt < kDTiles; ++dt) {
        const uint32_t packed = E::pack(acc_o[mt][dt][2 * r] * inv, acc_o[mt][dt][2 * r + 1] * inv);
        const uint32_t addr = q_smem + K::template chunk_offset<kBlockM>(row, dt) + 4 * t;
        asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(packed));
      }
      if (lse != nullptr && t == 0 && row < q_rows)
        lse[row * p.lse_row_stride] = sum > 0.f ? row_max[mt][r] * scale + logf(sum) : kNegInf;
    }
  __syncwarp();
  constexpr int kWarpChunks = K::kRowsPerWarp * K::kChunksPerRow;
#pragma unroll
  for (int i = 0; i < (kWarpChunks + 31) / 32; ++i) {
    const int idx = lane + i * 32;
    if (kWarpChunks % 32 != 0 && idx >= kWarpChunks) break;
    const int row = warp_row0 + idx / K::kChunksPerRow, chunk = idx % K::kChunksPerRow;
    if (row < q_rows && chunk < chunks_valid) {
      uint4 val;
      const uint32_t addr = q_smem + K::template chunk_offset<kBlockM>(row, chunk);
      asm volatile("ld.shared.v4.b32 {%0,%1,%2,%3}, [%4];\n" : "=r"(val.x), "=r"(val.y), "=r"(val.z), "=r"(val.w) : "r"(addr));
      *reinterpret_cast<uint4*>(o + row * p.o_row_stride + chunk * 8) = val;
    }
  }
}

// Two kernels per instantiation, dense and block-sparse: in one kernel with a runtime branch ptxas
// allocates registers over both bodies and the dense loop spilled more (d64 0 -> 48 bytes, d128 20 -> 64).
template <class K, bool kSparse>
__global__ void __launch_bounds__(K::kThreads) fwd_kernel(const __grid_constant__ FwdParams p) {
  fwd_body<K, kSparse>(p);
}

// ---- Host launch, one instantiation per generated .cu file ------------------------------------------
// The plan (fwd.cpp) chose the tile entry and computed the shared memory and the grid.
template <class K>
int32_t launch(const FwdParams& p, const FwdPlan& plan) {
  auto* kernel = p.has_block_mask ? fwd_kernel<K, true> : fwd_kernel<K, false>;
  // Above 48 KB a kernel must opt in to dynamic shared memory (per device; cheap to repeat).
  if (const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, plan.smem_bytes);
      e != cudaSuccess)
    return cuda::status_from(e, "cudaFuncSetAttribute(sm80 fwd, MaxDynamicSharedMemorySize)");
  const dim3 grid(static_cast<unsigned>(plan.ctas));
  kernel<<<grid, K::kThreads, plan.smem_bytes, static_cast<cudaStream_t>(p.stream)>>>(p);
  return cuda::check_launch("sm80 fwd kernel");
}

template <int kHeadDim, int kVariant, DType kDType>
int32_t launch_fwd(const FwdParams& p, const FwdPlan& plan) {
  constexpr TileShape t = tile_shape(kHeadDim, kVariant);
  static_assert(t.head_dim == kHeadDim, "no tile_table entry for this head dim / variant");
  using K = Traits<kHeadDim, t.block_m, t.block_n, t.warps, t.stages, kDType>;
  return launch<K>(p, plan);
}

}  // namespace flash::sm80

// One line per generated .cu file: FLASH_SM80_FWD_INSTANTIATE(128, 0, BF16)
#define FLASH_SM80_FWD_INSTANTIATE(D, VARIANT, DTYPE) \
  template int32_t flash::sm80::launch_fwd<D, VARIANT, flash::DType::DTYPE>(const flash::FwdParams&, \
                                                                           const flash::sm80::FwdPlan&);
