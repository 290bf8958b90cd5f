// libflash/cuda/sm90/fwd/producer.cuh -- the producer warpgroup of the Hopper forward: it gives its registers away
// (setmaxnreg) and issues every TMA load -- a query tile Q_i per work tile, then K_j and V_j of each key block j the tile
// visits into the ring of shared slots -- each slot guarded by a full and an empty mbarrier.
//   dense and window masks: thread 0 takes the tiles (static order, or the counter) and issues all loads;
//   block-sparse masks: warp 1 is the scheduler (takes the tiles, turns each one's block list into a schedule in shared
//   memory up to two tiles ahead), lane 0 of warp 3 loads Q, lane 0 of warp 0 (and of warp 2 for ring 1) loads K/V.
// V_j is consumed one turn after K_j (P_j V_j is issued with S_{j+1}), so V loads trail K loads by one block: K_{j+1}
// never waits behind V_j's slot.
#pragma once
#include "../../../varlen.h"
#include "../../ptx/hopper.cuh"
#include "key_blocks.cuh"
#include "smem.cuh"
#include "tile_scheduler.cuh"

namespace flash::sm90 {

template <class K>
struct Producer {
  const Args& a;
  const Smem<K> sm;

  // Key block n of K or V (map, pos, ring base smem0) for (batch b, KV head h_kv) into ring position `at` (slot
  // at % kStages), once the consumers released the slot.
  // (kVar, a varlen call's loads: the rows start from the tile's first key, batch index 0; read from this thread's copy
  // in tile_seq, so no register holds it across the key loop.)
  template <bool kVar = false>
  __device__ __forceinline__ void load_kv(const CUtensorMap* map, const TensorPos& pos, uint32_t smem0, uint32_t full,
                                          uint32_t empty, int n, int at, int h_kv, int b, int seq_slot = 0) const {
    ptx::mbar_wait(empty, ((at / K::kStages) & 1) ^ 1);
    ptx::mbar_arrive_expect_tx(full, K::kKVBytes);
    int row0 = 0;
    if constexpr (kVar) {
      row0 = *static_cast<volatile int*>(&sm.tile_seq[kSeqPendQ][kPendK0]), b = 0;
      h_kv = *static_cast<volatile int*>(&sm.tile_seq[kSeqLoop][kLoopHkv]);
    }
    int c[4];
#pragma unroll
    for (int pg = 0; pg < K::kPages; ++pg) {
      tma_coords(c, pos, pg * 64, n * K::kBlockN + row0, h_kv, b);
      ptx::tma_load_4d(smem0 + (at % K::kStages) * K::kKVBytes + pg * K::kBlockN * 128, map, full, c[0], c[1], c[2], c[3]);
    }
  }
  // The wait for the Q buffer of the tile_iter-th tile to be released by every consumer thread.
  __device__ __forceinline__ void wait_q_slot(int tile_iter) const {
    ptx::mbar_wait(sm.q_empty(tile_iter % K::kQStages), ((tile_iter / K::kQStages) & 1) ^ 1);
  }
  // Q_i's load into buffer tile_iter % kQStages: rows from q_begin of query head h, batch b.
  __device__ __forceinline__ void load_q(int tile_iter, int q_begin, int h, int b) const {
    const int q_slot = tile_iter % K::kQStages;
    ptx::mbar_arrive_expect_tx(sm.q_full(q_slot), K::kQBytes);
    int c[4];
#pragma unroll
    for (int pg = 0; pg < K::kPages; ++pg) {
      tma_coords(c, a.q_pos, pg * 64, q_begin, h, b);
      ptx::tma_load_4d(sm.q + q_slot * K::kQBytes + pg * K::kBlockM * 128, &a.tq, sm.q_full(q_slot), c[0], c[1], c[2], c[3]);
    }
  }

  // ---- Varlen (kVarlen, a varlen call): tiles over max_seqlen_q's query blocks x heads x sequences ---------------------
  // Whether tile x has query rows of its sequence (its query block starts before the sequence's end, seq_bounds()'s
  // clamped length). Tiles without are skipped here: no load, and the consumers never see them.
  __device__ __forceinline__ bool varlen_has_rows(int x) const {
    const FwdParams& p = a.p;
    const Tile tile(a, x);
    const int64_t q0 = clamp_to(p.cu_seqlens_q[tile.b], 0, p.total_q);
    const int64_t q1 = clamp_to(p.cu_seqlens_q[tile.b + 1], q0, p.total_q);
    return int64_t(tile.m_block) * K::kBlockM < min(q1 - q0, int64_t(p.seqlen_q));
  }
  // The tile after x in this CTA's order (varlen calls never split: no pieces): static, the next round's; dynamic, the
  // CTA's second tile (tile_of(1)), then takes from the counter (a take that is the launch's last resets the word).
  __device__ int varlen_after(int x) const {
    const int g = int(gridDim.x);
    if (a.tile_counter == nullptr) return tile_of(x / g + 1);
    if (x < g) return tile_of(1);
    ptx::mbar_wait(sm.claimed(), 0);
    const int y = 2 * g + int(static_cast<uint32_t>(atomicAdd(a.tile_counter, 1ull)));
    if (y == a.num_tiles + g - 1) atomicExch(a.tile_counter, 0ull);
    return y;
  }
  // The first tile at or after x with query rows (or the end).
  __device__ int varlen_first(int x) const {
    while (x < a.num_tiles && !varlen_has_rows(x)) x = varlen_after(x);
    return x;
  }
  // Tile x's index, sequence (VarSeq) and Q box (first packed row, head) worked out ahead, when x is asked for, into this
  // thread's own rows of tile_seq (kSeqPend, kSeqPendQ): start_tile, which may run inside the key loop, only copies
  // them, and the loop keeps no register for them (its 24 hold the dense loop's state, which spills a little already).
  __device__ __forceinline__ void varlen_stage(int x) const {
    sm.tile_seq[kSeqPendQ][kPendX] = x;
    if (x >= a.num_tiles) return;
    const Tile tile(a, x);
    const SeqBounds sb = seq_bounds(a.p, tile.b);
    int* seq = sm.tile_seq[kSeqPend];
    seq[kSeqQ0] = sb.q_start, seq[kSeqK0] = sb.k_start, seq[kSeqLenQ] = sb.seqlen_q, seq[kSeqLenK] = sb.seqlen_k;
    sm.tile_seq[kSeqPendQ][kPendQRow] = sb.q_start + tile.m_block * K::kBlockM, sm.tile_seq[kSeqPendQ][kPendH] = tile.h;
  }

  // ---- Dense and window masks: thread 0 ------------------------------------------------------------------------------
  // A tile's start: once its Q buffer is free, its work code to the consumers (through the Q slot's tile_full), then
  // Q_i by TMA; no tile left: the end marker in its place, as if it were a tile.
  // (kVar: a varlen call's, which publishes the tile's sequence too.)
  template <bool kVar>
  __device__ __forceinline__ void start_tile(int tile_iter, int x) const {
    const int q_slot = tile_iter % K::kQStages;
    wait_q_slot(tile_iter);
    sm.tile_ids[q_slot] = x;
    if constexpr (K::kTileInSmem)
      if (is_work<false>(a, x)) {
        const Tile tile(a, x);
        sm.tile_mhb[q_slot][0] = tile.m_block, sm.tile_mhb[q_slot][1] = tile.h, sm.tile_mhb[q_slot][2] = tile.b;
      }
    if constexpr (kVar)
      if (is_work<false>(a, x)) {
        // The tile's sequence (varlen_stage's), published beside its index (and read back by this thread for its loads).
        const int* pend = sm.tile_seq[kSeqPend];
        int* seq = sm.tile_seq[q_slot];
        seq[kSeqQ0] = pend[kSeqQ0], seq[kSeqK0] = pend[kSeqK0], seq[kSeqLenQ] = pend[kSeqLenQ], seq[kSeqLenK] = pend[kSeqLenK];
        ptx::mbar_arrive(sm.tile_full(q_slot));
        load_q(tile_iter, sm.tile_seq[kSeqPendQ][kPendQRow], sm.tile_seq[kSeqPendQ][kPendH], 0);  // (batch index 0)
        return;
      }
    ptx::mbar_arrive(sm.tile_full(q_slot));
    if (is_work<K::kTailSplit>(a, x)) {
      const Tile tile(a, decode_work<K::kTailSplit>(a, *sm.tail_plan, x).x);
      load_q(tile_iter, tile.m_block * K::kBlockM - a.q_shift, tile.h, tile.b);
    }
  }
  // A varlen call runs its own instantiation of the loop (kVar): the dense one keeps no varlen branch, so its registers
  // (24 in this warpgroup) are the pre-varlen loop's.
  __device__ __forceinline__ void run_dense() const {
    if constexpr (K::kVarlen)
      if (a.p.varlen) {
        run_tiles<true>();
        return;
      }
    run_tiles<false>();
  }
  template <bool kVar>
  __device__ __forceinline__ void run_tiles() const {
    const FwdParams& p = a.p;
    // With two Q buffers the next tile's Q loads while this tile's K/V loads go on, after its kStages-th block: by then
    // the consumers have released that buffer (its tile's last S), so the wait holds back no K/V load.
    constexpr int kQAhead = K::kQStages == 2 ? K::kStages - 1 : -1;  // the block index after which it goes out
    int it = 0;  // position in the K/V ring, continued across tiles
    // The first tile of either order (a split tail needs more tiles than CTAs), or a pair's secondary's first piece.
    int x = int(blockIdx.x);
    if constexpr (K::kPdlSecondary && K::kTailSplit)
      if (a.tail.pieces_only) x = static_item<true>(a, *sm.tail_plan, 0);
    if constexpr (kVar) x = varlen_first(x), varlen_stage(x), sm.tile_seq[kSeqLoop][kLoopIter] = 0;
    start_tile<kVar>(0, x);
    // (Varlen: the tile count read back from this thread's row of tile_seq where used, as the K/V loads' head.)
    auto iter_of = [&](int tile_iter) {
      if constexpr (kVar) return *static_cast<volatile int*>(&sm.tile_seq[kSeqLoop][kLoopIter]);
      else return tile_iter;
    };
    for (int tile_iter = 0; is_work<K::kTailSplit>(a, x); ++tile_iter) {
      // (Varlen: the next tile asked for and staged first, while the least is held in this thread's registers.)
      if constexpr (kVar) {
        sm.tile_seq[kSeqLoop + 1][kLoopIt] = it;  // (read back after: no register for it across the search)
        varlen_stage(varlen_first(varlen_after(x)));
        it = *static_cast<volatile int*>(&sm.tile_seq[kSeqLoop + 1][kLoopIt]);
      }
      const Work w = decode_work<K::kTailSplit>(a, *sm.tail_plan, x);
      const Tile tile(a, w.x);
      int q_begin = tile.m_block * K::kBlockM - a.q_shift;  // < 0 in the first tile when shifted
      int q_end = min(q_begin + K::kBlockM, p.seqlen_q);
      const int h_kv = tile.h / p.head_ratio;
      if constexpr (kVar) sm.tile_seq[kSeqLoop][kLoopHkv] = h_kv;
      // A varlen tile: its sequence's rows in the packed tensors, its own diagonal (moved to the packed query rows) and key
      // count, as start_tile published them (load_kv reads its first key there).
      int64_t diag = p.diag_offset, seqlen_k = p.seqlen_k;
      if constexpr (kVar) {
        const int* seq = sm.tile_seq[iter_of(tile_iter) % K::kQStages];
        const int q0 = seq[kSeqQ0], sq = seq[kSeqLenQ];
        q_end = q0 + min(q_begin + K::kBlockM, sq);
        q_begin += q0;
        seqlen_k = seq[kSeqLenK];
        diag = (p.bottom_right ? seqlen_k - sq : int64_t(0)) - q0;
        sm.tile_seq[kSeqPendQ][kPendK0] = seq[kSeqK0];  // (load_kv's)
      }
      KeyBlocks<K::kBlockN, false, false, K::kUpward> blocks(p, diag, seqlen_k, max(q_begin, 0), q_end, nullptr,
                                                             K::kOStageInRing);
      if (w.slot >= 0) blocks.clip(w.n_begin, w.n_end);
      // The next tile, asked for now so the atomic's latency hides behind this tile's loads. The dynamic order: a CTA's
      // second tile is the static order's (tile_of(1): the longest first tiles meet the shortest second ones), its takes
      // start there, once a consumer thread has claimed the word for the launch (`claimed`, long done by then).
      // (Varlen: staged above, read back where used.)
      [[maybe_unused]] int next = 0;
      auto next_x = [&] {
        if constexpr (kVar) return *static_cast<volatile int*>(&sm.tile_seq[kSeqPendQ][kPendX]);
        else return next;
      };
      if constexpr (!kVar)
        next = a.tile_counter == nullptr ? static_item<K::kTailSplit>(a, *sm.tail_plan, tile_iter + 1)
               : tile_iter == 0          ? tile_of(1)
                                         : (ptx::mbar_wait(sm.claimed(), 0),
                                   2 * int(gridDim.x) + int(static_cast<uint32_t>(atomicAdd(a.tile_counter, 1ull))));
      auto load_v = [&](int n, int at) {
        load_kv<kVar>(&a.tv, a.v_pos, sm.v0, sm.v_full(at % K::kStages), sm.v_empty(at % K::kStages), n, at, h_kv, tile.b,
                            tile_iter % K::kQStages);
      };
      int v_pending = -1, v_at = 0, j = 0;
      // (Varlen: the next tile starts at ring position it + kQAhead, read back rather than counting j.)
      if constexpr (kVar) sm.tile_seq[kSeqLoop][kLoopQAt] = it + kQAhead;
      auto q_ahead_at = [&](int it_now) {
        if constexpr (kVar) return it_now == *static_cast<volatile int*>(&sm.tile_seq[kSeqLoop][kLoopQAt]);
        else return j == kQAhead;
      };
      auto q_ahead_missed = [&](int it_now) {
        if constexpr (kVar) return it_now <= *static_cast<volatile int*>(&sm.tile_seq[kSeqLoop][kLoopQAt]);
        else return j <= kQAhead;
      };
      // (Varlen: the walk's lowest block and the pending V block read back too.)
      [[maybe_unused]] volatile int* const var_loop = sm.tile_seq[kSeqLoop];
      [[maybe_unused]] volatile int* const var_pend = sm.tile_seq[kSeqLoop + 1];
      if constexpr (kVar) var_loop[kLoopNLo] = blocks.n_lo, var_pend[kLoopVPend] = -1;
      auto next_block = [&] {
        if constexpr (kVar && !K::kUpward) return blocks.cursor >= var_loop[kLoopNLo] ? blocks.cursor-- : -1;
        else return blocks.next();
      };
      for (int n = next_block(); n >= 0; n = next_block(), ++it, ++j) {
        load_kv<kVar>(&a.tk, a.k_pos, sm.k0, sm.k_full(it % K::kStages), sm.k_empty(it % K::kStages), n, it, h_kv, tile.b,
                      tile_iter % K::kQStages);
        if constexpr (kVar) v_pending = var_pend[kLoopVPend];
        if (v_pending >= 0) {
          if constexpr (kVar) v_at = it - 1;  // (the previous block's position)
          load_v(v_pending, v_at);
          if constexpr (K::kOStageInRing) {
            // Block j-1 was not the tile's last: its slots' extra arrivals, each after this thread's own wait for the
            // slot's previous phase, so they count toward block j-1's.
            ptx::mbar_arrive(sm.k_empty(v_at % K::kStages));
            ptx::mbar_arrive(sm.v_empty(v_at % K::kStages));
          }
        }
        v_pending = n;
        if constexpr (kVar) var_pend[kLoopVPend] = n;
        v_at = it;
        if (q_ahead_at(it)) {
          // (Varlen: the ring position and the walk's cursor parked here across the start: no register for them.)
          if constexpr (kVar) var_pend[kLoopIt] = it, var_pend[kLoopCursor] = blocks.cursor;
          start_tile<kVar>(iter_of(tile_iter) + 1, next_x());
          if constexpr (kVar) it = var_pend[kLoopIt], blocks.cursor = var_pend[kLoopCursor];
        }
      }
      if constexpr (kVar) v_pending = var_pend[kLoopVPend];
      if (v_pending >= 0) {
        if constexpr (kVar) v_at = it - 1;
        load_v(v_pending, v_at);
      }
      if (kQAhead < 0 || q_ahead_missed(it)) {  // (not started in the loop)
        if constexpr (kVar) var_pend[kLoopIt] = it;
        start_tile<kVar>(iter_of(tile_iter) + 1, next_x());
        if constexpr (kVar) it = var_pend[kLoopIt];
      }
      // The launch's last take (relative index num_tiles - gridDim.x - 1) resets the word (take_claim).
      if (a.tile_counter != nullptr && next_x() == a.num_tiles + int(gridDim.x) - 1) atomicExch(a.tile_counter, 0ull);
      x = next_x();
      if constexpr (kVar) sm.tile_seq[kSeqLoop][kLoopIter] = iter_of(tile_iter) + 1;
    }
  }

  // ---- Block-sparse masks ------------------------------------------------------------------------------------------
  // Warp 1: takes the tiles, builds each one's schedule(s) and publishes both through tile_full, up to two tiles ahead.
  // (Building a schedule waits on two dependent global loads, the count and the list, which in the loader's own sequence
  // held every tile start up.)
  __device__ __forceinline__ void scheduler_warp() const {
    const FwdParams& p = a.p;
    const int lane = threadIdx.x % 32;
    int x = int(blockIdx.x);
    [[maybe_unused]] int pos0 = 0, pos1 = 0;  // two rings: their positions (lane 0)
    for (int tile_iter = 0;; ++tile_iter) {
      const int slot = tile_iter & 1;
      // Ask for the tile after this one now, so the atomic's latency hides behind the build (resolved after it).
      int next = 0;
      uint32_t take = 0;
      if (lane == 0 && x < a.num_tiles) {
        if (a.tile_counter != nullptr)
          take = take_issue(a, tile_iter == 0);
        else
          next = tile_of(tile_iter + 1);
      }
      ptx::mbar_wait(sm.sched_empty(slot), ((tile_iter >> 1) & 1) ^ 1);  // tile tile_iter - 2's users are done with it
      if (x < a.num_tiles) {
        const Tile tile = K::kTwoRings ? ring_tile(a, x) : Tile(a, x);
        int q_begin = tile.m_block * K::kBlockM - a.q_shift, q_end = min(q_begin + K::kBlockM, p.seqlen_q);
        if constexpr (K::kTwoRings) ring_rows(p, tile.m_block, q_begin, q_end);
        int32_t* sched = sm.sched_base + slot * K::kRings * a.sched_stride;
        const KeyBlocks<K::kBlockN, true> blocks(p, max(q_begin, 0), q_end, sched);
        if constexpr (K::kTwoRings) {
          // Ring 0: the pair's list (from its first warpgroup's rows), ring 1: the single warpgroup's. Rows past the tile's
          // end (a tail plan's 128-row tile: its single's) list nothing: build_schedule leaves a row at seqlen_q empty.
          const int single = single_wg(q_begin);
          const int pair_row = q_begin + (single == 2 ? 0 : 64), single_row = q_begin + 64 * single;
          blocks.build_schedule(p, tile.b, tile.h, pair_row < q_end ? pair_row : p.seqlen_q, sched, sm.sched_bits, lane);
          blocks.build_schedule(p, tile.b, tile.h, single_row < q_end ? single_row : p.seqlen_q, sched + a.sched_stride,
                                sm.sched_bits, lane);
          if (lane == 0) {  // (lane 0 stored both counts)
            sm.ring_pos[slot][0] = pos0, sm.ring_pos[slot][1] = pos1;
            pos0 += sched[0], pos1 += sched[a.sched_stride];
          }
        } else {
          blocks.build_schedule(p, tile.b, tile.h, q_begin, sched, sm.sched_bits, lane);
        }
        if constexpr (K::kTileInSmem)
          if (lane == 0) sm.tile_mhb[slot][0] = tile.m_block, sm.tile_mhb[slot][1] = tile.h, sm.tile_mhb[slot][2] = tile.b;
      }
      if (lane == 0) sm.tile_ids[slot] = x;
      ptx::mbar_arrive(sm.tile_full(slot));  // each lane's arrive releases its own stores
      if (x >= a.num_tiles) break;           // the end marker is published
      if (lane == 0 && a.tile_counter != nullptr) next = take_resolve(a, take);
      next = __shfl_sync(0xffffffffu, next, 0);
      x = next;
    }
  }
  // Lane 0 of warp 3: each tile's Q as soon as its buffer is free, so no K/V load waits behind a Q buffer's release.
  __device__ __forceinline__ void q_loader() const {
    if (K::kTmaStoreO) ptx::prefetch_tensormap(&a.to);
    for (int tile_iter = 0;; ++tile_iter) {
      const int slot = tile_iter & 1;
      // The CTA's first tile is its own (grid <= tiles), so its Q goes out at once, while its schedule is being built.
      int x = int(blockIdx.x);
      if (tile_iter > 0) {
        ptx::mbar_wait(sm.tile_full(slot), (tile_iter >> 1) & 1);
        x = sm.tile_ids[slot];
      }
      ptx::mbar_arrive(sm.sched_empty(slot));  // the tile index is read
      if (x >= a.num_tiles) break;
      const Tile tile = K::kTwoRings ? ring_tile(a, x) : Tile(a, x);
      wait_q_slot(tile_iter);
      load_q(tile_iter, K::kTwoRings ? (tile.m_block & 0xffff) * 64 : tile.m_block * K::kBlockM - a.q_shift, tile.h, tile.b);
    }
  }
  // Lane 0 of warp 0 (ring 0) and, with two rings, of warp 2 (ring 1): the scheduled K/V blocks of its ring, so a ring
  // whose warpgroups are ahead never waits behind the other ring's wait for a free slot.
  __device__ __forceinline__ void kv_loader() const {
    const FwdParams& p = a.p;
    [[maybe_unused]] const int ring = K::kTwoRings ? threadIdx.x / 64 : 0;
    int it = 0;  // position in this thread's K/V ring, continued across tiles
    // The first K/V loads wait for the first schedule, so their descriptors can be fetched meanwhile.
    ptx::prefetch_tensormap(&a.tk);
    ptx::prefetch_tensormap(&a.tv);
    for (int tile_iter = 0;; ++tile_iter) {
      const int slot = tile_iter & 1;
      ptx::mbar_wait(sm.tile_full(slot), (tile_iter >> 1) & 1);
      const int x = sm.tile_ids[slot];
      if (x >= a.num_tiles) break;
      // (kLoaderMhb: the scheduler's decode, read before this thread's sched_empty arrive below.)
      const Tile tile = K::kLoaderMhb ? Tile(sm.tile_mhb[slot][0], sm.tile_mhb[slot][2], sm.tile_mhb[slot][1]) : Tile(a, x);
      const int q_begin = tile.m_block * K::kBlockM - a.q_shift;  // (two rings: not used; m_block is ring_tile's code)
      const int h_kv = tile.h / p.head_ratio;
      if constexpr (K::kTwoRings) {
        auto load_ring = [&](bool v, int n, int at) {  // (this ring's slots from ring * kStages on)
          const int sl = K::ring_slot(ring, at);
          const uint32_t ring0 = ring * K::kStages * K::kKVBytes;
          if (v) load_kv(&a.tv, a.v_pos, sm.v0 + ring0, sm.v_full(sl), sm.v_empty(sl), n, at, h_kv, tile.b);
          else load_kv(&a.tk, a.k_pos, sm.k0 + ring0, sm.k_full(sl), sm.k_empty(sl), n, at, h_kv, tile.b);
        };
        // This ring's schedule, read directly (not through KeyBlocks: the producer has 32 registers here).
        const int32_t* sr = sm.sched_base + (slot * 2 + ring) * a.sched_stride;
        const int c = sr[0];
        for (int j = 0; j < c; ++j) {
          load_ring(false, sr[1 + j], it + j);
          if (j > 0) load_ring(true, sr[j], it + j - 1);
        }
        const int last = c > 0 ? sr[c] : -1;
        ptx::mbar_arrive(sm.sched_empty(slot));  // the schedule is read
        if (last >= 0) load_ring(true, last, it + c - 1);
        it += c;
      } else {
        KeyBlocks<K::kBlockN, true> blocks(p, max(q_begin, 0), min(q_begin + K::kBlockM, p.seqlen_q),
                                           sm.sched_base + slot * a.sched_stride);
        int v_pending = -1, v_at = 0;
        for (int n = blocks.next(); n >= 0; n = blocks.next(), ++it) {
          load_kv(&a.tk, a.k_pos, sm.k0, sm.k_full(it % K::kStages), sm.k_empty(it % K::kStages), n, it, h_kv, tile.b);
          if (v_pending >= 0)
            load_kv(&a.tv, a.v_pos, sm.v0, sm.v_full(v_at % K::kStages), sm.v_empty(v_at % K::kStages), v_pending, v_at,
                    h_kv, tile.b);
          v_pending = n;
          v_at = it;
        }
        ptx::mbar_arrive(sm.sched_empty(slot));  // the schedule is read
        if (v_pending >= 0)
          load_kv(&a.tv, a.v_pos, sm.v0, sm.v_full(v_at % K::kStages), sm.v_empty(v_at % K::kStages), v_pending, v_at, h_kv,
                  tile.b);
      }
    }
  }

  __device__ __forceinline__ void run() const {
    ptx::setmaxnreg_dec<K::kProducerRegs>();
    if constexpr (K::kSparse) {
      if (threadIdx.x / 32 == 1) scheduler_warp();
      else if (threadIdx.x == 96) q_loader();
      else if (threadIdx.x == 0 || (K::kTwoRings && threadIdx.x == 64)) kv_loader();
    } else {
      if (threadIdx.x == 0) run_dense();
    }
  }
};

}  // namespace flash::sm90
