// libflash/cuda/sm90/fwd/epilogue.cuh -- a consumer warpgroup's end of a tile: a split tile's pieces merged (the static
// order's last round, schedule.h TailSplit), then O / l and LSE = m scale + ln(l) written once. O leaves straight from
// the accumulators, or through a staging tile in shared memory and one thread's TMA store (Shape::store_o says where the
// staging tile lives; kDeferStore issues the store in the next tile's prologue).
#pragma once
#include "mainloop.cuh"

namespace flash::sm90 {

// The partials are written before the count (each thread's stores, a fence, the warpgroup's barrier, then thread 0's
// atomic) and read after it (the atomic, the barrier, a fence, then the loads from L2), as CUDA's threadfence reduction
// does. A slot holds thread tid's floats at float4 j in [j][tid] order, so the accesses coalesce.
template <class K>
__device__ __forceinline__ bool Consumer<K>::merge_pieces(float (&acc_o)[K::kORegs], OnlineSoftmax<K>& softmax, int code) {
  const Work w = decode_work<K::kTailSplit>(a, *sm.tail_plan, code);
  constexpr int kF4 = K::kORegs / 4 + 1;  // float4s per thread: O, then (m_0, m_1, l_0, l_1)
  auto slot_at = [&](int slot) {
    return reinterpret_cast<float4*>(a.tail_part) + (int64_t(slot) * K::kConsumers + wg) * kF4 * 128 + tid;
  };
  {
    float4* dst = slot_at(w.slot);
#pragma unroll
    for (int j = 0; j < K::kORegs / 4; ++j)
      __stcg(dst + j * 128, make_float4(acc_o[4 * j], acc_o[4 * j + 1], acc_o[4 * j + 2], acc_o[4 * j + 3]));
    __stcg(dst + (kF4 - 1) * 128, make_float4(softmax.row_max[0], softmax.row_max[1], softmax.row_sum[0], softmax.row_sum[1]));
  }
  __threadfence();
  ptx::named_sync(kWarpgroup + wg, 128);
  const int g = int(gridDim.x), x = w.x - a.tail.whole;
  const int c_first = a.tail.cta_of(int64_t(x) * a.tail.blocks, g);
  const int c_last = a.tail.cta_of(int64_t(x + 1) * a.tail.blocks - 1, g);
  if (tid == 0) {
    // A pair's secondary: the counts were zeroed ahead of the primary; waiting for the primary's end orders that before
    // this count whatever PDL lets overlap (at once when the primary has ended, or without PDL).
    if constexpr (K::kPdlSecondary) ptx::wait_dependency();
    sm.tail_last[wg] = atomicAdd(a.tail_count + x * K::kConsumers + wg, 1) == c_last - c_first;
  }
  ptx::named_sync(kWarpgroup + wg, 128);
  if (sm.tail_last[wg] == 0) return false;
  // Every piece's partial, this one's too (read back), merged in CTA order: the result does not depend on which piece
  // finished last. From O = 0, m = -inf, l = 0 the first merge is exact (factors 0 and 1).
  __threadfence();
#pragma unroll
  for (int i = 0; i < K::kORegs; ++i) acc_o[i] = 0.f;
  float(&row_max)[2] = softmax.row_max;
  float(&row_sum)[2] = softmax.row_sum;
  row_max[0] = row_max[1] = -INFINITY;
  row_sum[0] = row_sum[1] = 0.f;
  for (int c = c_first; c <= c_last; ++c) {
    const float4* src = slot_at(tail_slot(a.tail, g, c, x));
    const float4 ml = __ldcg(src + (kF4 - 1) * 128);
    const float m_other[2] = {ml.x, ml.y}, l_other[2] = {ml.z, ml.w};
    float fa[2], fb[2];  // the two partials' factors to the common max, as the online softmax's correction
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float m = fmaxf(row_max[r], m_other[r]);
      const float m_scaled = m == -INFINITY ? 0.f : m * scale_log2;
      fa[r] = exp2f(row_max[r] * scale_log2 - m_scaled);
      fb[r] = exp2f(m_other[r] * scale_log2 - m_scaled);
      row_sum[r] = row_sum[r] * fa[r] + l_other[r] * fb[r];
      row_max[r] = m;
    }
#pragma unroll
    for (int j = 0; j < K::kORegs / 4; ++j) {
      const float4 o = __ldcg(src + j * 128);
      acc_o[4 * j] = acc_o[4 * j] * fa[0] + o.x * fb[0];
      acc_o[4 * j + 1] = acc_o[4 * j + 1] * fa[0] + o.y * fb[0];
      acc_o[4 * j + 2] = acc_o[4 * j + 2] * fa[1] + o.z * fb[1];
      acc_o[4 * j + 3] = acc_o[4 * j + 3] * fa[1] + o.w * fb[1];
    }
  }
  return true;
}

template <class K>
__device__ __forceinline__ void Consumer<K>::epilogue(const Tile& tile, float (&acc_o)[K::kORegs], OnlineSoftmax<K>& softmax,
                                                      int q_begin, int q_end, int q_slot, int s_last) {
  bool write_out = true;
  // The work code, read back from shared memory rather than kept live across the loop (a register more spilled).
  const int x_end = K::kTailSplit ? *static_cast<volatile int*>(&sm.wg_code[wg]) : 0;
  if (K::kTailSplit && is_piece(a, x_end)) write_out = merge_pieces(acc_o, softmax, x_end);

  const float scale = fabsf(p.scale);
  // kVarlen, a varlen call: a warpgroup whose 64 rows run past its sequence's end (the next sequence's rows) stores its
  // rows from registers, row by row, instead of the TMA store's whole box.
  bool direct = false;
  if constexpr (K::kVarlen) direct = p.varlen && q_begin + rg * 64 + 64 > q_end;
  // This warpgroup's staging tile: kHeadDim / 64 pages of 64 rows x 128 bytes, swizzled as TMA reads it -- its own tile
  // after the ring, its own rows of the Q buffer (pages kBlockM rows apart), or (O staged in the ring) warpgroup 1's in
  // the last K slot and warpgroup 0's in the last V slot; every tile has a last block (KeyBlocks' at_least_one).
  const uint32_t q_wg = sm.q + q_slot * K::kQBytes + rg * 64 * 128;
  const uint32_t o_stage = K::kOStageInRing ? (wg == 1 ? sm.k0 : sm.v0) + s_last * K::kKVBytes
                           : K::kOStageInQ  ? q_wg
                                            : o_stage_own;
  constexpr uint32_t kOPage = K::kOStageInQ ? K::kBlockM * 128 : 64 * 128;
  if constexpr (K::kOStageInRing) {
    if (wg == 0) ptx::named_sync(kOInRing, 256);
  } else if constexpr (K::kTmaStoreO && !K::kOStageInQ) {
    // The previous tile's store must have read the staging tile before it is written again.
    if (tid == 0) wg::bulk_wait_read();
    ptx::named_sync(kWarpgroup + wg, 128);
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float sum = softmax.row_sum[r];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const float inv = sum > 0.f ? 1.f / sum : 0.f;
    const int row = rg * 64 + row_in_wg + 8 * r;
    if (K::kTmaStoreO && write_out && !direct) {
      // Element (row, 8i + 2t) of the warpgroup's 64 rows: page i / 8, 16-byte chunk (i % 8) ^ (row % 8).
      const int wrow = row_in_wg + 8 * r;
#pragma unroll
      for (int i = 0; i < K::kHeadDim / 8; ++i)
        asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(o_stage + (i / 8) * kOPage + wrow * 128 + (((i % 8) ^ (wrow % 8)) << 4) + 4 * t),
                     "r"(ptx::pack2<K::kDType>(acc_o[4 * i + 2 * r] * inv, acc_o[4 * i + 2 * r + 1] * inv)));
    }
    if (write_out && q_begin + row >= 0 && q_begin + row < q_end) {
      if (!K::kTmaStoreO || direct) {
        using T = std::conditional_t<K::kBF16, __nv_bfloat16, __half>;
        T* o_row = static_cast<T*>(p.o) + tile.b * p.o_batch_stride + tile.h * p.o_head_stride +
                   int64_t(q_begin + row) * p.o_row_stride + 2 * t;
#pragma unroll
        for (int i = 0; i < K::kHeadDim / 8; ++i)
          *reinterpret_cast<uint32_t*>(o_row + 8 * i) =
              ptx::pack2<K::kDType>(acc_o[4 * i + 2 * r] * inv, acc_o[4 * i + 2 * r + 1] * inv);
      }
      if (p.lse != nullptr && t == 0)
        p.lse[tile.b * p.lse_batch_stride + tile.h * p.lse_head_stride + int64_t(q_begin + row) * p.lse_row_stride] =
            sum > 0.f ? softmax.row_max[r] * scale + logf(sum) : -INFINITY;
    }
  }
  if constexpr (kDeferO) {
    // The store waits for the next tile's prologue (flush_o); only staged rows need one.
    if (write_out) o_pend_row = q_begin + rg * 64 + 64 > 0 && !direct ? q_begin + rg * 64 : -1, o_h = tile.h, o_b = tile.b;
  } else if constexpr (K::kTmaStoreO) {
    // Every thread's shared stores made visible to the TMA unit (async proxy), then one thread stores the warpgroup's 64
    // rows page by page (rows past seqlen_q fall outside the map and are dropped).
    wg::fence_proxy_async();
    ptx::named_sync(kWarpgroup + wg, 128);
    // (A box wholly before row 0: nothing to store; two rings: nor one wholly past the tile's end, another tile's rows.)
    if (tid == 0 && write_out && !direct && q_begin + rg * 64 + 64 > 0 && (!K::kTwoRings || q_begin + rg * 64 < q_end)) {
      store_o_rows(o_stage, kOPage, q_begin + rg * 64, tile.h, tile.b);
      if constexpr (K::kOStageInQ && !kDeferQRelease) wg::bulk_wait_read();  // the store has read these Q rows
    }
    // Staged in Q: every thread's arrive after its own staging stores, thread 0's after the store has read them; then
    // the producer may load the next Q there (deferred to the next tile's prologue with two Q buffers).
    if constexpr (kDeferQRelease) q_release_pending = true;
    else if constexpr (K::kOStageInQ) ptx::mbar_arrive(sm.q_empty(q_slot));
    if constexpr (K::kOStageInRing) {
      // The slot's last arrival, once the store has read it (the stores' owner, thread 0).
      if (tid == 0) {
        wg::bulk_wait_read();
        ptx::mbar_arrive(wg == 1 ? sm.k_empty(s_last) : sm.v_empty(s_last));
      }
    }
  }
}

}  // namespace flash::sm90
