// libflash/cuda/sm90/fwd/smem.cuh -- the Hopper forward's shared memory: the dynamic buffers (Q, the K/V ring(s), O's
// staging tile, block-sparse schedules) and the mbarriers and hand-over words, as addresses the roles share.
//
// Tiles are stored exactly as TMA's 128-byte swizzle writes them: pages of 64 columns (128 bytes a row), 8-row atoms of
// 1024 bytes with the 16-byte chunk index XORed by row % 8 -- the layout wgmma's descriptors name with swizzle mode 1.
// Q and K are read K-major (d contiguous), V MN-major (d contiguous is the N dimension of P V).
//
// Barriers: Q full/empty per Q buffer; per ring slot K full, V full, K empty, V empty (K_j is released as soon as S_j is
// done, V_j after P_j V_j, so the producer refills each as early as it can); tile_full per tile slot; block-sparse
// sched_empty per schedule, dense `claimed` (the dynamic order's word claimed for the launch). Two rings: ring 1's slots
// follow ring 0's (kStages .. 2 kStages - 1) in every array.
// A tile's index (and block-sparse schedule) is handed over with plain shared stores and loads ordered thread by thread
// -- every producer lane that stores arrives on tile_full, every consumer thread waits on it, and every reader arrives on
// q_empty / sched_empty, which every storing lane waits on before storing there again -- so compute-sanitizer's racecheck
// can follow it.
#pragma once
#include <cstdint>

#include "schedule.h"

namespace flash::sm90 {

// A varlen tile's sequence as the producer publishes it in Smem::tile_seq (seq_bounds(), clamped): its first query row
// and first key in the packed tensors, its query rows and used keys. Valid from the tile's tile_full until its Q
// buffer's release (q_empty): the consumers read it at the tile's start and in the key loop's masked blocks only.
enum VarSeq : int { kSeqQ0 = 0, kSeqK0 = 1, kSeqLenQ = 2, kSeqLenK = 3 };
// tile_seq's rows past the Q buffers' two, the producer thread's own: its next tile, staged when it is asked for (its
// VarSeq in row kSeqPend; in row kSeqPendQ its Q box's first packed row and head, its index), and the current tile's
// first key (its K/V loads').
enum VarSeqPend : int { kSeqPend = 2, kSeqPendQ = 3, kPendQRow = 0, kPendH = 1, kPendX = 2, kPendK0 = 3 };
// ... and (rows kSeqLoop, kSeqLoop + 1) its tile count, the tile's KV head, the ring position at which the next tile
// starts, the walk's lowest block, the pending V block, and the ring position and walk cursor parked across the next
// tile's search and start: the varlen loop's state kept here, not in registers (producer.cuh run_tiles<true>).
enum VarLoop : int { kSeqLoop = 4, kLoopIter = 0, kLoopHkv = 1, kLoopQAt = 2, kLoopNLo = 3,
                     kLoopVPend = 0 /* row kSeqLoop + 1 */, kLoopIt = 1 /* row kSeqLoop + 1 */, kLoopCursor = 2 /* same */ };

template <class K>
struct Smem {
  static constexpr int kSlots = K::kRingSlots;
  static constexpr int kTileSlots = K::kSparse ? 2 : K::kQStages;  // the Q buffers' for dense masks, else the schedules'
  static constexpr int kBarriers = 8 + 4 * kSlots;

  uint32_t q;              // Q buffers
  uint32_t k0, v0;         // K and V ring slots
  uint32_t o_stage0;       // O's staging tile (store_o 1)
  int32_t* sched_base;     // block-sparse: two schedules a ring of args.sched_stride ints,
  uint32_t* sched_bits;    //   then the list bitmap
  uint32_t bar0;
  int* tile_ids;           // the work code in each tile slot
  int (*tile_mhb)[3];      // kTileInSmem: the tile's m_block, h, b beside its index
  int (*tile_seq)[4];      // kVarlen, a varlen call: the tile's sequence (VarSeq) beside its index, per Q buffer; then
                           // the producer's staged next tile (VarSeqPend)
  int (*ring_pos)[2];      // two rings: each ring's position at the start of the tile in each slot
  int* tail_last;          // a split tile's piece: whether this warpgroup's piece finished last
  TailPlan* tail_plan;     // dense: this CTA's share of the split round
  int* wg_code;            // dense: each consumer warpgroup's current work code (read back at the tile's end)
  uint32_t* pin_sink;      // kPinSoftmax: a word a warp for its clock read

  __device__ uint32_t q_full(int slot) const { return bar0 + 8 * slot; }
  __device__ uint32_t q_empty(int slot) const { return bar0 + 16 + 8 * slot; }
  __device__ uint32_t k_full(int s) const { return bar0 + 32 + 8 * s; }
  __device__ uint32_t v_full(int s) const { return bar0 + 32 + 8 * (kSlots + s); }
  __device__ uint32_t k_empty(int s) const { return bar0 + 32 + 8 * (2 * kSlots + s); }
  __device__ uint32_t v_empty(int s) const { return bar0 + 32 + 8 * (3 * kSlots + s); }
  __device__ uint32_t tile_full(int slot) const { return bar0 + 32 + 8 * (4 * kSlots + slot); }
  __device__ uint32_t sched_empty(int slot) const { return bar0 + 32 + 8 * (4 * kSlots + 2 + slot); }
  __device__ uint32_t claimed() const { return bar0 + 32 + 8 * (4 * kSlots + 2); }  // dense (sched_empty(0)'s place)
};

}  // namespace flash::sm90
