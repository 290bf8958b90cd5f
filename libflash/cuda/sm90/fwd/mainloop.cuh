// libflash/cuda/sm90/fwd/mainloop.cuh -- a consumer warpgroup of the Hopper forward: 64 rows of each query tile Q_i,
// Algorithm 1 over the key blocks the tile visits (FlashAttention-3's schedule):
//   S_j = Q_i K_j^T                        wgmma m64 n{kBlockN} k16, both operands in shared memory
//   m' = max(m, rowmax(S_j)), P_j = exp(S_j - m'), l = exp(m - m') l + rowsum(P_j)       (softmax.cuh)
//   O = exp(m - m') O + P_j V_j            wgmma m64 n{d} k16, P from registers
// then O / l and LSE = m scale + log(l), once per tile (epilogue.cuh).
// Ping-pong: the consumer warpgroups take turns issuing their products (named barriers kTurn + wg), so while one runs its
// softmax on the SFU the others' wgmmas keep the tensor cores busy. Within a warpgroup S_{j+1} and P_j V_j are issued in
// one turn and the softmax of S_{j+1} runs while P_j V_j does. K_j is released when S_j is done, V_j when P_j V_j is.
#pragma once
#include <type_traits>

#include "../../ptx/hopper.cuh"
#include "../../ptx/wgmma.cuh"
#include "key_blocks.cuh"
#include "smem.cuh"
#include "softmax.cuh"
#include "tile_scheduler.cuh"

namespace flash::sm90 {

template <class K>
struct Consumer {
  using Blocks = KeyBlocks<K::kBlockN, K::kSparse, K::kTwoRings, K::kUpward>;
  // O staged in Q with two Q buffers (d128 block-sparse): the previous tile's buffer is released in this tile's
  // prologue, once its O store has surely read it.
  static constexpr bool kDeferQRelease = K::kOStageInQ && K::kQStages == 2;
  static constexpr bool kDeferO = K::kDeferStore && K::kTmaStoreO && !K::kOStageInQ && !K::kOStageInRing;

  const Args& a;
  const FwdParams& p;
  const Smem<K> sm;
  const int wg;  // rows [64 wg, 64 wg + 64) of the query tile (two rings: see rg)
  const int tid, warp, lane, t, row_in_wg;
  const float scale_log2;
  int it = 0;    // position in the K/V ring, continued across tiles (two rings: the ring's number in bit 30)
  int ring = 0;  // two rings: this warpgroup's ring (0: the pair's, 1: the single's)
  int rg;        // the tile's 64-row group this warpgroup computes (two rings: the single's group for warpgroup 2)
  bool q_release_pending = false;     // kDeferQRelease
  int o_pend_row = -2, o_h = 0, o_b = 0;  // kDeferO: the staged rows' first row, head, batch (-1: none to store, -2: none staged)
  const uint32_t o_stage_own;

  __device__ __forceinline__ Consumer(const Args& args, const Smem<K>& smem, int warpgroup)
      : a(args), p(args.p), sm(smem), wg(warpgroup - 1), tid(threadIdx.x % 128), warp(tid / 32), lane(tid % 32),
        t(lane % 4), row_in_wg(warp * 16 + lane / 4), scale_log2(args.p.scale_log2), rg(warpgroup - 1),
        o_stage_own(smem.o_stage0 + (warpgroup - 1) * 64 * K::kHeadDim * 2) {}

  // ---- Turns ----------------------------------------------------------------------------------------------------------
  __device__ __forceinline__ void take_turn() const { ptx::named_sync(kTurn + wg, 256); }
  __device__ __forceinline__ void pass_turn() const { ptx::named_arrive(kTurn + (wg + 1) % K::kConsumers, 256); }
  __device__ __forceinline__ void empty_sfu_turn() const {
    if constexpr (K::kSfuTurns) ptx::named_sync_arrive(kSfuTurn + wg, kSfuTurn + (wg + 1) % K::kConsumers);
  }
  // The ring slot and phase of ring position i.
  __device__ __forceinline__ static int slot_of(int i) {
    if constexpr (K::kTwoRings) return K::ring_slot(i >> 30, i & 0x3fffffff);
    else return i % K::kStages;
  }
  __device__ __forceinline__ static uint32_t phase_of(int i) {
    if constexpr (K::kTwoRings) return ((i & 0x3fffffff) / K::kStages) & 1;
    else return (i / K::kStages) & 1;
  }
  // One warp's lane 0 hands a slot back (after the warp's own reads: __syncwarp).
  __device__ __forceinline__ void release(uint32_t empty_bar) const {
    __syncwarp();
    if (lane == 0) ptx::mbar_arrive(empty_bar);
  }

  // ---- The products ---------------------------------------------------------------------------------------------------
  // Q's descriptors for the S k-steps (step kk is 32 bytes into the 128-byte rows of page kk / 4), for the prologue's and
  // the loop's S.
  __device__ __forceinline__ void q_descriptors(uint64_t (&dq)[K::kHeadDim / 16], uint32_t q_wg) const {
    [[maybe_unused]] const uint64_t da0 = wg::desc(q_wg, 16);  // kDescPlus
#pragma unroll
    for (int kk = 0; kk < K::kHeadDim / 16; ++kk) {
      const uint32_t oa = (kk / 4) * K::kBlockM * 128 + (kk % 4) * 32;
      dq[kk] = K::kDescPlus ? wg::desc_plus(da0, oa) : wg::desc(q_wg + oa, 16);
      if constexpr (K::kQDescOnce) asm volatile("" : "+l"(dq[kk]));  // opaque: not rebuilt beside each use
    }
  }
  // S = Q K_s^T: head_dim / 16 k-steps.
  __device__ __forceinline__ void issue_s(float (&acc_s)[K::kSRegs], const uint64_t (&dq)[K::kHeadDim / 16], int s) const {
    const uint32_t k_s = sm.k0 + s * K::kKVBytes;
    [[maybe_unused]] const uint64_t db0 = wg::desc(k_s, 16);  // kDescPlus
#pragma unroll
    for (int kk = 0; kk < K::kHeadDim / 16; ++kk) {
      const uint32_t ob = (kk / 4) * K::kBlockN * 128 + (kk % 4) * 32;
      const uint64_t db = K::kDescPlus ? wg::desc_plus(db0, ob) : wg::desc(k_s + ob, 16);
      if (kk == 0) wg::SS<K::kBlockN, 0, 0, K::kDType>::zero(acc_s, dq[kk], db);
      else wg::SS<K::kBlockN, 0, 0, K::kDType>::mma(acc_s, dq[kk], db, 1);
    }
    wg::commit();
  }
  // O += P V_s: kBlockN / 16 k-steps; step kc is 16 rows = 2048 bytes into every page of V, pages (the N direction)
  // kBlockN * 128 bytes apart.
  __device__ __forceinline__ void issue_pv(float (&acc_o)[K::kORegs], uint32_t (&p_frag)[K::kBlockN / 16][4], int s) const {
    const uint32_t v_s = sm.v0 + s * K::kKVBytes;
    [[maybe_unused]] const uint64_t dv0 = wg::desc(v_s, K::kBlockN * 128);  // kDescPlus
#pragma unroll
    for (int kc = 0; kc < K::kBlockN / 16; ++kc)
      wg::RS<K::kHeadDim, 1, K::kDType>::mma(
          acc_o, p_frag[kc], K::kDescPlus ? wg::desc_plus(dv0, kc * 2048) : wg::desc(v_s + kc * 2048, K::kBlockN * 128), 1);
    wg::commit();
  }

  // ---- Deferred stores and releases (epilogue.cuh stages them) ----------------------------------------------------------
  // Thread 0's TMA store of the warpgroup's 64 staged rows from query row `row`, pages `page` bytes apart, as one group.
  __device__ __forceinline__ void store_o_rows(uint32_t stage, uint32_t page, int row, int h, int b) const {
    int c[4];
#pragma unroll
    for (int pg = 0; pg < K::kPages; ++pg) {
      tma_coords(c, a.o_pos, pg * 64, row, h, b);
      ptx::tma_store_4d(&a.to, stage + pg * page, c[0], c[1], c[2], c[3]);
    }
    wg::bulk_commit();
  }
  // kDeferO: the previous tile's staged O, stored once this tile's S_0 is issued (every thread's staging stores made
  // visible to the TMA unit first).
  __device__ __forceinline__ void flush_o() {
    if constexpr (kDeferO) {
      if (o_pend_row == -2) return;
      wg::fence_proxy_async();
      ptx::named_sync(kWarpgroup + wg, 128);
      if (tid == 0 && o_pend_row != -1) store_o_rows(o_stage_own, 64 * 128, o_pend_row, o_h, o_b);
      o_pend_row = -2;
    }
  }
  // kDeferQRelease: the previous tile's Q buffer, once its O store has read it.
  __device__ __forceinline__ void release_prev_q(int q_slot) {
    if constexpr (kDeferQRelease)
      if (q_release_pending) {
        if (tid == 0) wg::bulk_wait_read();
        ptx::mbar_arrive(sm.q_empty(q_slot ^ 1));
        q_release_pending = false;
      }
  }

  // ---- One tile's key blocks -----------------------------------------------------------------------------------------
  // The diagonal and the key count the tile's masks use: the call's, or (kVarlen, a varlen call) its sequence's as the
  // producer published them for the tile in `slot` (the diagonal moved to the packed query rows). Read where used, so a
  // dense call's stay parameter reads and a varlen call keeps no register for them across the key loop.
  struct SeqMask {
    int64_t diag, seqlen_k;
  };
  __device__ __forceinline__ SeqMask seq_mask(int slot) const {
    if constexpr (K::kVarlen)
      if (p.varlen) {
        const int* seq = sm.tile_seq[slot];
        const int64_t sk = seq[kSeqLenK];
        return SeqMask{(p.bottom_right ? sk - seq[kSeqLenQ] : int64_t(0)) - seq[kSeqQ0], sk};
      }
    return SeqMask{p.diag_offset, p.seqlen_k};
  }
  // The key end (exclusive) this warpgroup's rows can see at most: their last row's right edge.
  __device__ __forceinline__ int64_t wg_key_end(int q_begin, int q_end, const SeqMask& sq) const {
    const int64_t last_row = min(q_begin + rg * 64 + 63, q_end - 1);
    const int64_t hi = p.window_right >= 0 ? last_row + sq.diag + p.window_right + 1 : sq.seqlen_k;
    return min(hi, sq.seqlen_k);
  }
  // The columns of block nb this warpgroup's rows can see at most.
  __device__ __forceinline__ int wg_vis(int nb, int q_begin, int q_end, const SeqMask& sq) const {
    return int(max(min(wg_key_end(q_begin, q_end, sq) - int64_t(nb) * K::kBlockN, int64_t(K::kBlockN)), int64_t(0)));
  }

  // Runs the tile's key blocks into acc_o and the softmax's (m, l), and releases Q (and the schedule) once every S is
  // done; returns false, having done nothing, where the tile visits no key block. s_last: the last block's slot.
  __device__ __forceinline__ bool mainloop(Blocks& blocks, float (&acc_o)[K::kORegs], OnlineSoftmax<K>& softmax, int q_begin,
                                           int q_end, int q_slot, int t_slot, int& s_last);
  // O / l and the LSE out (epilogue.cuh); write_out false: a piece that did not finish its tile last.
  __device__ __forceinline__ void epilogue(const Tile& tile, float (&acc_o)[K::kORegs], OnlineSoftmax<K>& softmax, int q_begin,
                                           int q_end, int q_slot, int s_last);
  // A split tile's piece: parks this warpgroup's partial in the workspace; the tile's last piece to finish merges them
  // all and returns true, the others false (epilogue.cuh).
  __device__ __forceinline__ bool merge_pieces(float (&acc_o)[K::kORegs], OnlineSoftmax<K>& softmax, int code);

  // The warpgroup's tiles until the producer publishes the end marker.
  __device__ __forceinline__ void run() {
    constexpr int kTileSlots = Smem<K>::kTileSlots;
    if (wg == K::kConsumers - 1) ptx::named_arrive(kTurn, 256);  // warpgroup 0 takes the first turns
    if constexpr (K::kSfuTurns)
      if (wg == K::kConsumers - 1) ptx::named_arrive(kSfuTurn, 256);
    for (int tile_iter = 0;; ++tile_iter) {
      const int q_slot = tile_iter % K::kQStages;
      const int t_slot = tile_iter % kTileSlots;
      ptx::mbar_wait(sm.tile_full(t_slot), (tile_iter / kTileSlots) & 1);  // the tile's index (and schedule) are written
      const int x = sm.tile_ids[t_slot];                                    // a work item's code (Work)
      [[maybe_unused]] int mhb[3] = {0, 0, 0};
      if constexpr (K::kTileInSmem) mhb[0] = sm.tile_mhb[t_slot][0], mhb[1] = sm.tile_mhb[t_slot][1], mhb[2] = sm.tile_mhb[t_slot][2];
      if (!is_work<K::kTailSplit>(a, x)) break;
      ptx::mbar_wait(sm.q_full(q_slot), (tile_iter / K::kQStages) & 1);  // Q_i has landed
      const Work work = decode_work<K::kTailSplit>(a, *sm.tail_plan, x);
      if (K::kTailSplit && tid == 0) sm.wg_code[wg] = x;
      Tile tile = K::kTileInSmem ? Tile(mhb[0], mhb[2], mhb[1]) : Tile(a, work.x);
      // The tile's rows [q_begin, q_begin + kBlockM), of which [max(q_begin, 0), q_end) are real: rows past seqlen_q in the
      // last tile, or rows before 0 in the first one when the tiles are shifted. Q's TMA box reads zeros there and O's TMA
      // store drops them.
      int q_begin = tile.m_block * K::kBlockM - a.q_shift;
      int q_end = min(q_begin + K::kBlockM, p.seqlen_q);
      if constexpr (K::kVarlen)
        if (p.varlen) {
          // A varlen tile: rows of its sequence in the packed tensors (batch index 0); the rows past the sequence's end
          // (the next sequence's) are computed but never written (epilogue).
          const int q0 = sm.tile_seq[t_slot][kSeqQ0];
          q_end = q0 + min(q_begin + K::kBlockM, sm.tile_seq[t_slot][kSeqLenQ]);
          q_begin += q0;
          tile.b = 0;
        }
      if constexpr (K::kTwoRings) {
        ring_rows(p, tile.m_block, q_begin, q_end);
        const int single = single_wg(q_begin);
        ring = wg == 2 ? 1 : 0;
        rg = wg == 2 ? single : single == 0 ? wg + 1 : wg;
        it = sm.ring_pos[t_slot][ring] | ring << 30;
        if constexpr (K::kUniformIt) {  // the same in every lane, said so to ptxas by a broadcast
          it = __shfl_sync(0xffffffffu, it, 0);
          ring = __shfl_sync(0xffffffffu, ring, 0);
          rg = __shfl_sync(0xffffffffu, rg, 0);
        }
      }
      // Two rings: the empty turns this warpgroup owes after its epilogue (its list against the other ring's, both read
      // before the schedule is released), and whether the first is a product turn alone (an empty list).
      [[maybe_unused]] int owed_turns = 0;
      [[maybe_unused]] bool owed_lone = false;
      if constexpr (K::kTwoRings) {
        const int32_t* s0 = sm.sched_base + (tile_iter & 1) * K::kRings * a.sched_stride;
        const int c0 = s0[0], c1 = s0[a.sched_stride];
        const int c_own = ring == 0 ? c0 : c1, c_max = max(c0, c1);
        owed_turns = c_max - c_own;
        owed_lone = c_own == 0 && c_max > 0;
      }
      const SeqMask sq = seq_mask(t_slot);
      Blocks blocks(p, sq.diag, sq.seqlen_k, max(q_begin, 0), q_end,
                    sm.sched_base + ((tile_iter & 1) * K::kRings + ring) * a.sched_stride, K::kOStageInRing);
      if (work.slot >= 0) blocks.clip(work.n_begin, work.n_end);

      float acc_o[K::kORegs];
#pragma unroll
      for (int i = 0; i < K::kORegs; ++i) acc_o[i] = 0.f;
      OnlineSoftmax<K> softmax;
      int s_last = 0;
      if (!mainloop(blocks, acc_o, softmax, q_begin, q_end, q_slot, t_slot, s_last)) {
        if constexpr (!K::kOStageInQ) ptx::mbar_arrive(sm.q_empty(q_slot));  // no key block: nothing read Q_i
        if constexpr (K::kSparse) ptx::mbar_arrive(sm.sched_empty(t_slot));
        release_prev_q(q_slot);
        flush_o();
      }
      epilogue(tile, acc_o, softmax, q_begin, q_end, q_slot, s_last);
      if constexpr (K::kTwoRings) {
        // A block's turns are a product turn then an SFU turn, and a tile ends with the drain's product turn: owe them in
        // that shape (P (S P)^k for an empty list, (S P)^k after a shorter one).
        if (owed_lone) {
          take_turn();
          pass_turn();
        }
        for (int k = 0; k < owed_turns; ++k) {
          empty_sfu_turn();
          take_turn();
          pass_turn();
        }
      }
    }
    flush_o();  // (kDeferO: the CTA's last tile's store)
    if constexpr (K::kTmaStoreO)
      if (tid == 0) wg::bulk_wait();  // the last stores complete before the CTA's shared memory goes
  }
};

template <class K>
__device__ __forceinline__ bool Consumer<K>::mainloop(Blocks& blocks, float (&acc_o)[K::kORegs], OnlineSoftmax<K>& softmax,
                                                      int q_begin, int q_end, int q_slot, int t_slot, int& s_last) {
  constexpr int kBlockN = K::kBlockN;
  // kUpward: a warpgroup whose rows see none of the walk's last block (the diagonal one) leaves it out: its walk stops a
  // block early, and after the drain it hands the block's slots back and takes the turn its last P V would have taken.
  [[maybe_unused]] bool skip_top = false;
  if constexpr (K::kUpward) {
    const int64_t key_end = wg_key_end(q_begin, q_end, seq_mask(q_slot));
    if (blocks.cursor > blocks.n_lo && key_end <= int64_t(blocks.cursor) * kBlockN) {
      skip_top = true;
      blocks.cursor -= 1;
    }
  }
  float acc_s[K::kSRegs];
  uint32_t p_frag[kBlockN / 16][4];                                       // P_{j-1}, the A operand of the next P V
  const uint32_t q_wg = sm.q + q_slot * K::kQBytes + rg * 64 * 128;  // this warpgroup's 64 rows of page 0
  uint64_t dq[K::kHeadDim / 16];
  q_descriptors(dq, q_wg);
  int n = blocks.next();
  if (n < 0) return false;

  // kHalfDiag / kSkipDiag: how many of the first block's (the diagonal one's) columns this warpgroup's rows can see.
  int vis = kBlockN;
  if constexpr (K::kHalfDiag || K::kSkipDiag) vis = wg_vis(n, q_begin, q_end, seq_mask(q_slot));
  [[maybe_unused]] int skip_v = -1;  // kSkipDiag: the left-out block's V slot, handed back after S_0's issue
  [[maybe_unused]] uint32_t skip_v_phase = 0;
  if constexpr (K::kSkipDiag) {
    if (vis <= 0 && blocks.has_next()) {  // none of block n is visible here, and the walk has a block after it
      const int s0 = slot_of(it);
      const uint32_t ph0 = phase_of(it);
      // The slot goes back only once its fill has landed: the full wait orders this warpgroup's arrival after the
      // others' for the slot's previous fill (an empty barrier counts arrivals, not whose).
      ptx::mbar_wait(sm.k_full(s0), ph0);
      release(sm.k_empty(s0));
      skip_v = s0, skip_v_phase = ph0;
      take_turn();  // the turns S_n and its softmax would have taken
      pass_turn();
      empty_sfu_turn();
      ++it;
      n = blocks.next();
      vis = wg_vis(n, q_begin, q_end, seq_mask(q_slot));
    }
  }

  // Prologue: S_0 and its softmax.
  int s_prev = slot_of(it);
  uint32_t phase_prev = phase_of(it);
  ptx::mbar_wait(sm.k_full(s_prev), phase_prev);
  take_turn();
  wg::fence();
  issue_s(acc_s, dq, s_prev);
  pass_turn();
  release_prev_q(q_slot);  // (while S_0 runs)
  flush_o();               // (kDeferO: the previous tile's O store, while S_0 runs)
  if constexpr (K::kSkipDiag)
    if (skip_v >= 0) {
      ptx::mbar_wait(sm.v_full(skip_v), skip_v_phase);
      release(sm.v_empty(skip_v));
    }
  wg::wait<0>();
  wg::fence_regs(acc_s);
  release(sm.k_empty(s_prev));  // S_0 done: K_0's slot may be refilled
  {
    float corr[2];
    auto first_block = [&](auto cols_c) {
      constexpr int kCols = decltype(cols_c)::value;
      if (kCols > 0 && blocks.needs_mask(n)) {
        const SeqMask sq = seq_mask(q_slot);
        mask_block<K>(acc_s, p, sq.diag, sq.seqlen_k, n, q_begin + rg * 64 + row_in_wg, t, kCols);
      }
      softmax.update(acc_s, true, corr, kCols, scale_log2, wg);
      pack_p<K>(acc_s, p_frag, kCols);
    };
    if (K::kHalfDiag && vis <= 0) first_block(std::integral_constant<int, 0>{});  // nothing visible: P_0 = 0
    else if (K::kHalfDiag && vis <= kBlockN / 2) first_block(std::integral_constant<int, kBlockN / 2>{});
    else first_block(std::integral_constant<int, kBlockN>{});
  }
  ++it;

  // Steady state: S_j and P_{j-1} V_{j-1} issued in one turn (O rescaled by P_{j-1}'s correction between the two, in the
  // shadow of S_j's wgmmas), then the softmax of S_j while P_{j-1} V_{j-1} runs, then P_j packed.
  [[maybe_unused]] bool landed = false;  // kEarlyProbe: this block's K and V_{j-1} had landed at the last probe
  bool rescale_prev = false;
  float corr_prev[2] = {1.f, 1.f};
  for (n = blocks.next(); n >= 0; n = blocks.next(), ++it) {
    const int s = slot_of(it);
    const uint32_t phase = phase_of(it);
    if (!(K::kEarlyProbe && landed)) ptx::mbar_wait2(sm.k_full(s), phase, sm.v_full(s_prev), phase_prev);  // K_j, V_{j-1}
    take_turn();
    wg::fence();
    issue_s(acc_s, dq, s);                        // S_j = Q K_j^T
    if (rescale_prev) rescale_o<K>(acc_o, corr_prev);  // O *= exp(m_{j-2} - m_{j-1})
    wg::fence();                                   // (O's registers were written since the last fence)
    issue_pv(acc_o, p_frag, s_prev);               // O += P_{j-1} V_{j-1}
    pass_turn();
    if constexpr (K::kEarlyProbe) landed = ptx::mbar_test2(sm.k_full(slot_of(it + 1)), phase_of(it + 1), sm.v_full(s), phase);
    wg::wait<1>();  // S_j is ready; P_{j-1} V_{j-1} may still run
    release(sm.k_empty(s));
    // The softmax works on a copy of S and keeps P in fp32 while P_{j-1} V_{j-1} is in flight (writing the accumulator
    // registers or packing P here made ptxas serialise the wgmmas).
    float sv[K::kSRegs];
#pragma unroll
    for (int i = 0; i < K::kSRegs; ++i) sv[i] = acc_s[i];
    if (blocks.needs_mask(n)) {
      const SeqMask sq = seq_mask(q_slot);  // (Q_i and its tile_seq are not released before the loop's end)
      mask_block<K>(sv, p, sq.diag, sq.seqlen_k, n, q_begin + rg * 64 + row_in_wg, t, kBlockN);
    }
    float corr[2];
    const bool rescale = softmax.update(sv, false, corr, kBlockN, scale_log2, wg);  // m_j, P_j, l_j
    if constexpr (K::kPinSoftmax) {
      // A clock read kept alive by a predicated shared store: ptxas schedules nothing across it, so the exps stay before
      // the P V wait.
      const uint32_t now = static_cast<uint32_t>(clock());
      asm volatile("{\n.reg .pred p;\nsetp.eq.u32 p, %2, 0;\n@p st.shared.u32 [%0], %1;\n}\n" ::"r"(
                       static_cast<uint32_t>(__cvta_generic_to_shared(&sm.pin_sink[threadIdx.x / 32]))),
                   "r"(now), "r"(lane));
    }
    wg::wait<0>();  // P_{j-1} V_{j-1} done
    wg::fence_regs(acc_o);
    wg::fence_regs(p_frag);
    release(sm.v_empty(s_prev));
    rescale_prev = rescale;
    corr_prev[0] = corr[0], corr_prev[1] = corr[1];
    pack_p<K>(sv, p_frag, kBlockN);  // P_j, the A operand of the next turn's P V
    s_prev = s;
    phase_prev = phase;
  }
  // Every S of this tile is done: Q_i (and the schedule) are released now, so the producer loads the next tile's Q while
  // the last P V and the epilogue run.
  if constexpr (!K::kOStageInQ) ptx::mbar_arrive(sm.q_empty(q_slot));
  if constexpr (K::kSparse) ptx::mbar_arrive(sm.sched_empty(t_slot));

  // Drain: the last P V.
  if (rescale_prev) rescale_o<K>(acc_o, corr_prev);
  ptx::mbar_wait(sm.v_full(s_prev), phase_prev);
  take_turn();
  wg::fence();
  issue_pv(acc_o, p_frag, s_prev);
  pass_turn();
  wg::wait<0>();
  wg::fence_regs(acc_o);
  wg::fence_regs(p_frag);
  release(sm.v_empty(s_prev));
  if constexpr (K::kOStageInRing) {
    // Warpgroup 0 stages its O in V_last's slot: warpgroup 1 says when its last P V no longer reads it.
    if (wg == 1) ptx::named_arrive(kOInRing, 256);
    s_last = s_prev;
  }
  if constexpr (K::kUpward)
    if (skip_top) {
      // The left-out block (ring position it): its K and V slots back once filled, and its P V's turn, empty.
      const int s = slot_of(it);
      const uint32_t ph = phase_of(it);
      ptx::mbar_wait(sm.k_full(s), ph);
      release(sm.k_empty(s));
      ptx::mbar_wait(sm.v_full(s), ph);
      release(sm.v_empty(s));
      take_turn();
      pass_turn();
      if constexpr (K::kOStageInRing) s_last = s;  // the tile's last block: where this warpgroup stages its O
      ++it;
    }
  return true;
}

}  // namespace flash::sm90
