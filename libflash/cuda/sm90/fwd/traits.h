// libflash/cuda/sm90/fwd/traits.h -- the compile-time options of one Hopper forward instantiation, all derived from its
// variant (plan.h): the tile shape, the warp roles' register budgets, the epilogue, and the scheduling options each
// variant was tuned with. One line each says what an option does; docs/kernels.md "Tuning: sm90 forward" has the
// measurements that chose it.
#pragma once
#include "../../../params.h"
#include "plan.h"

namespace flash::sm90 {

// Named barriers (bar.sync ids; 0 is __syncthreads). Turns go round the consumer warpgroups: warpgroup wg waits on
// kTurn + wg and hands over on the next one's.
enum Barrier : int {
  kTurn = 1,         // 1-3: "warpgroup wg may issue its matrix products" (ping-pong)
  kWarpgroup = 4,    // 4-6: one consumer warpgroup's own 128 threads (staging tiles, the tail split's merge)
  kOInRing = 7,      // warpgroup 1's last P V no longer reads the V slot where warpgroup 0 stages its O
  kSfuTurn = 9,      // 9-11: "warpgroup wg may run its exponentials"
};

// Varlen: the packed variable-length mode of a general variant (launch.cuh picks it for FwdParams::varlen calls).
template <Variant V, DType T, bool Varlen = false>
struct Traits {
  static constexpr Variant kVariant = V;
  static constexpr Shape kShape = shape_of(V);
  static constexpr DType kDType = T;
  static constexpr bool kBF16 = T == DType::BF16;
  static constexpr int kHeadDim = kShape.head_dim;
  static constexpr int kBlockN = kShape.block_n;  // keys per block
  static constexpr int kStages = kShape.stages;   // K/V ring depth
  static constexpr int kConsumers = kShape.consumers;
  static_assert(kConsumers == 2 || kConsumers == 3, "consumer warpgroups");
  static constexpr int kBlockM = 64 * kConsumers;  // query rows per tile
  static constexpr bool kSparse = kShape.sparse;   // a scheduler warp builds each tile's key-block schedule
  static constexpr bool kTailSplit = has_tail_split(V);
  // Packed variable-length batches (FwdParams::varlen) run on the general variant of each head dim (plan.cpp never picks
  // another for them), compiled a second time with every varlen branch: the dense kernel keeps none of them (they cost
  // d64/d128 tiles of 512-2k rows 2-5% on the H200; docs/kernels.md).
  static constexpr bool kVarlen = Varlen;
  static_assert(!Varlen || has_varlen_mode(V), "varlen: general variants only");

  // ---- Epilogue: where O is staged for its TMA store (Shape::store_o) --------------------------------------------------
  static constexpr bool kTmaStoreO = kShape.store_o != 0;
  static constexpr bool kOStageInQ = kShape.store_o == 2;  // Q is released once the store has read it
  // The last key block's ring slots (warpgroup 1 in K's, warpgroup 0 in V's): Q is released after the tile's last S, so
  // the next tile's Q loads during the epilogue; a slot's empty barrier counts one arrival more (the producer's for every
  // block but a tile's last, the store owner's for the last).
  static constexpr bool kOStageInRing = kShape.store_o == 3;
  static_assert(!kOStageInRing || (kConsumers == 2 && !kSparse), "O staged in the ring: two consumers, dense");
  // The staged tile's fence, barrier and TMA store deferred to the next tile's prologue, after its S_0 is issued.
  static constexpr bool kDeferStore = kHeadDim == 128 && kBlockN == 128 && !kSparse && !kTailSplit;

  // ---- Rings ---------------------------------------------------------------------------------------------------------
  // Two K/V rings (d64 block-sparse, 192-row tiles): the tile's rows lie in two 128-row mask blocks, whose lists differ.
  // Warpgroups 0 and 1 (the pair, ring 0) and 2 (the single, ring 1) keep their rings; the tile's 64-row groups are dealt
  // to them, and the shorter list's warpgroups take empty turns after their epilogue.
  static constexpr bool kTwoRings = kSparse && kConsumers == 3;
  static constexpr int kRings = kTwoRings ? 2 : 1;
  static constexpr int kRingSlots = kRings * kStages;  // ring r's stage s is slot r * kStages + s
  __device__ __forceinline__ static int ring_slot(int ring, int at) { return ring * kStages + at % kStages; }
  static constexpr int kLoaders = kTwoRings ? 2 : 1;  // block-sparse K/V loader threads (one a ring)

  // ---- Consumer loop ---------------------------------------------------------------------------------------------------
  // Turns at the SFU beside the products' ping-pong: the exponentials of one warpgroup at a time (three warpgroups, where
  // a block's exps take about as long as its products; d128 block-sparse with long lists).
  static constexpr bool kSfuTurns = kConsumers == 3 || V == Variant::kD128SparseTurns;
  // A clock read after the softmax pins it before the P V wait (ptxas otherwise moves the exps after it): two ping-pong
  // warpgroups on blocks of <= 128 keys.
  static constexpr bool kPinSoftmax = !kSparse && kConsumers == 2 && kBlockN <= 128;
  // A block's K/V full barriers probed a block early (mbar_test2), the blocking wait only if they had not completed.
  static constexpr bool kEarlyProbe =
      (kHeadDim == 256 && !kSparse) || V == Variant::kD128Long || V == Variant::kD128LongSplit;
  // Descriptors from one base per operand and block plus a 32-bit offset; the ring position broadcast from lane 0 so
  // ptxas knows it warp-uniform (the two-ring consumers read it from shared memory).
  static constexpr bool kDescPlus = kTwoRings;
  static constexpr bool kUniformIt = kTwoRings;
  // Q's descriptors built once a tile, before the prologue, and kept (ptxas otherwise rebuilds them beside the prologue's
  // and the loop's S): d128 block-sparse, 3% slower at 4k-16k without.
  static constexpr bool kQDescOnce = kSparse && kHeadDim == 128;
  // The warpgroup index broadcast from lane 0: what derives from it may live in uniform registers.
  static constexpr bool kUniformWg = !kSparse && !kTailSplit && (kHeadDim == 64 || kHeadDim == 256);
  // S_0's mask, softmax and pack on only the half (or none) of the diagonal block a warpgroup's rows can see.
  static constexpr bool kHalfDiag = !kSparse && kConsumers == 3;
  // Key blocks walked upwards (causal d256: a head's tiles then read each K/V block at about the same time).
  static constexpr bool kUpward = V == Variant::kD256Up;
  // A warpgroup whose rows see none of the walk's first block (the diagonal one) leaves it out: it hands the slots back
  // and takes the block's turns empty. (The upward walk skips at its other end instead.)
  static constexpr bool kSkipDiag = !kSparse && !kTailSplit && !kUpward && (kConsumers == 3 || kHeadDim == 256);

  // ---- Warp roles ------------------------------------------------------------------------------------------------------
  static constexpr int kThreads = 128 * (1 + kConsumers);
  // Registers after setmaxnreg: 128 x producer + 128 x consumers x consumer <= 64K. The block-sparse scheduler warp
  // builds schedules with all lanes (40 keeps it from spilling, except at d256, whose consumers need all 240).
  static constexpr int kProducerRegs = kConsumers == 3 ? 32 : kSparse && kHeadDim < 256 ? 40 : 24;
  static constexpr int kConsumerRegs = kConsumers == 3 ? 160 : kSparse && kHeadDim < 256 ? 232 : 240;
  // The tile's decode (query block, head, batch) done once by the producer and published beside its index.
  static constexpr bool kTileInSmem = (kSparse && kHeadDim < 256) || (!kSparse && kConsumers == 3 && !kTailSplit);
  static constexpr bool kLoaderMhb = kSparse && kTileInSmem;  // the K/V loaders take the scheduler's decode too
  // Two-kernel forms (plan.h, Launch::Pdl): the primary lets the dependent launch start once all its CTAs run, the
  // secondary's CTAs wait for the primary's end before they exit. Both instructions do nothing without PDL.
  static constexpr bool kPdlPrimary = V == Variant::kD64 || V == Variant::kD128;
  static constexpr bool kPdlSecondary = V == Variant::kD64Rows || V == Variant::kD128Pieces;

  // ---- Shared memory -----------------------------------------------------------------------------------------------------
  static constexpr int kPages = kHeadDim / 64;  // 64-column (128-byte swizzle) pages per row
  static_assert(kHeadDim % 64 == 0 && kBlockN % 16 == 0 && kBlockN <= 256, "tile shape");
  static constexpr int kQBytes = kBlockM * kHeadDim * 2;
  static constexpr int kQStages = kShape.q_stages();
  static constexpr int kKVBytes = kBlockN * kHeadDim * 2;
  static constexpr int kOStageBytes = kShape.o_stage_bytes();  // after the K/V ring
  static constexpr int kSmemBytes = kShape.smem_bytes();
  static_assert(kSmemBytes <= kHopperSmemOptin, "shared memory");
  static constexpr int kSRegs = kBlockN / 2;   // S accumulator floats per thread (m64 x kBlockN / 128)
  static constexpr int kORegs = kHeadDim / 2;  // O accumulator floats per thread
};

}  // namespace flash::sm90
