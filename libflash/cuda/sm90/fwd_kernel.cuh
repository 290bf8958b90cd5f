// libflash/cuda/sm90/fwd_kernel.cuh -- the Hopper forward (FLASH_ALGO_SM90): warp-specialised,
// TMA-fed, wgmma-computed FlashAttention (the schedule of FlashAttention-3, written in inline PTX).
//
// A CTA has three warpgroups (four at d64) and stays resident (persistent grid, one CTA per SM):
//   producer  (warpgroup 0, 24-40 registers/thread): one thread issues every TMA load -- a query tile
//             Q_i (kBlockM = 64 x consumers rows; one or two buffers) per work tile, then K_j and V_j of each key
//             block j it visits into a kStages-deep ring of shared buffers, each guarded by "full" and
//             "empty" mbarriers (block-sparse masks: a second warp, the scheduler, turns each tile's list
//             into a schedule in shared memory up to two tiles ahead, and Q, K/V -- and with two rings each
//             ring's K/V -- have loading threads of their own);
//   consumers (warpgroups 1 and 2, 232-240 registers/thread; 1-3 with 160 at d64): each owns 64 rows of Q_i and runs
//             Algorithm 1 on them:
//               S   = Q_i K_j^T                      wgmma m64 n{kBlockN} k16, both operands in smem
//               m'  = max(m, rowmax(S)),  P = exp2(S*scale_log2 - m'*scale_log2)
//               l   = exp2((m - m')*scale_log2) * l + rowsum(P)
//               O   = exp2((m - m')*scale_log2) * O + P V_j    wgmma m64 n{d} k16, P from registers
//             then O /= l and LSE = m*scale + log(l), written once per tile.
// Ping-pong: the two consumer warpgroups take turns issuing their matrix products (named barriers),
// so while one runs its softmax (exp2 on the SFU) the other's wgmmas keep the tensor cores busy; within
// a warpgroup, S_{j+1} and P_j V_j are issued together and the softmax of S_{j+1} runs while P_j V_j
// does. K_j is released when S_j is done, V_j when P_j V_j is.
// d64 block-sparse masks of 128-row blocks with long lists (shapes.h, use_two_rings) run three consumer warpgroups on
// 192-row tiles instead, whose rows lie in two mask row blocks: one K/V ring per list (Traits::kTwoRings), the three
// warpgroups taking turns as d64's dense ones do, the shorter list's warpgroups with empty turns (Traits::kRingTurns).
//
// Hand-over of a tile's index and block-sparse schedule (plain shared stores by the producer, plain loads
// by the consumers): through a "tile_full" mbarrier per tile slot (per Q buffer; block-sparse: per
// schedule) that only threads arrive on -- every producer lane after its own stores (release), every
// consumer thread waits (acquire) -- and back through q_empty (block-sparse: sched_empty, which the loading
// lanes also arrive on), which every consumer thread arrives on after its last load and every producer
// lane that stores waits on before storing there again. Thread by thread, so compute-sanitizer racecheck can follow
// it: handed over through q_full (whose phase TMA completes) or released by one lane per warp after
// __syncwarp, racecheck reported the pairs (perf-log v5; dev/racecheck_mbarrier.cu is the minimal case).
//
// Shared tiles are stored exactly as TMA's 128-byte swizzle writes them: pages of 64 columns (128
// bytes per row), 8-row atoms of 1024 bytes with the 16-byte chunk index XORed by row % 8 -- the
// layout wgmma's descriptors name with swizzle mode 1. Q and K are read K-major (d contiguous), V
// MN-major (trans-b: d contiguous is the N dimension of P V).
#pragma once
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>

#include "../../error.h"
#include "../../params.h"
#include "../runtime.h"
#include "pdl.cuh"
#include "shapes.h"
#include "tma.h"
#include "../wgmma.cuh"

namespace flash::sm90 {

// ---- PTX wrappers -----------------------------------------------------------------------------------
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count));
}
// Arrive once and add `bytes` to the transaction count this phase waits for (the TMA loads' total).
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// Wait until the phase with this parity has completed. A fresh barrier is in phase 0, so waiting for
// parity 1 returns at once (the "previous phase" counts as complete): producers start on parity 1.
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\n"
      "WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
// Both phases complete: the two probes are issued back to back, so their round trips overlap (a loop block
// waits for K_j and V_{j-1}; one after the other they were ~6% of the d64 block-sparse loop's stall samples,
// ncu s17-3, though both had always completed).
__device__ __forceinline__ void mbar_wait2(uint32_t bar_a, uint32_t parity_a, uint32_t bar_b, uint32_t parity_b) {
  asm volatile(
      "{\n.reg .pred da, db;\n"
      "mbarrier.try_wait.parity.shared::cta.b64 da, [%0], %1;\n"
      "mbarrier.try_wait.parity.shared::cta.b64 db, [%2], %3;\n"
      "@da bra DONE_A;\n"
      "WAIT_A:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 da, [%0], %1;\n"
      "@!da bra WAIT_A;\n"
      "DONE_A:\n"
      "@db bra DONE_B;\n"
      "WAIT_B:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 db, [%2], %3;\n"
      "@!db bra WAIT_B;\n"
      "DONE_B:\n}\n" ::"r"(bar_a),
      "r"(parity_a), "r"(bar_b), "r"(parity_b)
      : "memory");
}
// Whether both phases have completed, without waiting (mbarrier.test_wait): probed a block ahead, so the round trip
// overlaps the softmax instead of standing at the head of the next block (Traits::kEarlyProbe).
__device__ __forceinline__ bool mbar_test2(uint32_t bar_a, uint32_t parity_a, uint32_t bar_b, uint32_t parity_b) {
  uint32_t both;
  asm volatile(
      "{\n.reg .pred da, db;\n"
      "mbarrier.test_wait.parity.shared::cta.b64 da, [%1], %2;\n"
      "mbarrier.test_wait.parity.shared::cta.b64 db, [%3], %4;\n"
      "and.pred da, da, db;\n"
      "selp.u32 %0, 1, 0, da;\n}\n"
      : "=r"(both)
      : "r"(bar_a), "r"(parity_a), "r"(bar_b), "r"(parity_b)
      : "memory");
  return both != 0;
}
// 4-D tiled TMA store shared -> global, in the thread's bulk group (rows outside the tensor are dropped).
__device__ __forceinline__ void tma_store_4d(const CUtensorMap* map, uint32_t src, int c0, int c1, int c2, int c3) {
  asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%1, %2, %3, %4}], [%5];\n" ::"l"(
                   reinterpret_cast<uint64_t>(map)),
               "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(src)
               : "memory");
}
// 4-D tiled TMA load global -> shared, completing on `bar` (bytes counted against its expect-tx).
__device__ __forceinline__ void tma_load_4d(uint32_t dst, const CUtensorMap* map, uint32_t bar, int c0, int c1, int c2, int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], "
      "[%6];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
      : "memory");
}
// The GPU's nanosecond clock, the same on every SM (Traits::kDevCtaTimes).
__device__ __forceinline__ unsigned long long globaltimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t));
  return t;
}
// Fetch a TMA descriptor (a __grid_constant__ kernel parameter) into its cache ahead of the first load that names it.
__device__ __forceinline__ void prefetch_tensormap(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs)); }
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs)); }
__device__ __forceinline__ void named_sync(int id, int threads) { asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory"); }
__device__ __forceinline__ void named_arrive(int id, int threads) { asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory"); }

// 2^x on the FMA pipe, for x <= ~0 (a softmax exponent). The SFU's ex2 retires 16 results per clock
// per SM, which at d64 is exactly the tensor cores' rate for the same tile (one exp per 4 x 64 FLOPs), so
// a share of P computed with this polynomial could let the softmax keep up. Measured (perf-log v5): no
// consistent gain -- the SFU was 44% busy, not the limit -- so no instantiation uses it. x = j + f with
// j = round(x) (the 1.5 * 2^23 trick, no conversion unit), 2^f by a degree-3 minimax polynomial on
// [-0.5, 0.5] (relative error 7.5e-5, below bf16's and fp16's rounding of P), times 2^j built in the
// exponent field. x <= -127 (a masked score, -inf) gives j = -127, whose 2^j is +0: P is exactly 0.
__device__ __forceinline__ float exp2_fma(float x) {
  x = fmaxf(x, -127.f);
  const float t = __fadd_rn(x, 12582912.f);  // round(x) in the low mantissa bits
  const float j = __fadd_rn(t, -12582912.f);
  const float f = __fadd_rn(x, -j);
  const float p = fmaf(fmaf(fmaf(0.05517132208f, f, 0.24261054397f), f, 0.69326096773f), f, 0.99992811680f);
  return p * __int_as_float(int((static_cast<uint32_t>(__float_as_int(t)) << 23) + 0x3f800000u));
}

template <DType T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (T == DType::BF16) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  } else {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
}

// Dev probes (Traits::kDevNoEpilogue, kDevNoSoftmax0): keeps registers computed where nothing reads them. ptxas removes
// a wgmma whose accumulators are never read, asm volatile or not (a probe without this ran above the tensor cores' peak,
// s55-3), so the values go to shared memory under a predicate that is false at run time (off: a kernel argument's
// bits ptxas cannot know), 16 bytes an instruction.
template <int N>
__device__ __forceinline__ void dev_keep_alive(const float (&r)[N], bool off, uint32_t smem_at) {
#pragma unroll
  for (int i = 0; i + 4 <= N; i += 4)
    asm volatile("{\n.reg .pred p;\nsetp.ne.u32 p, %0, 0;\n@!p st.shared.v4.f32 [%1], {%2, %3, %4, %5};\n}\n" ::"r"(uint32_t(off)),
                 "r"(smem_at), "f"(r[i]), "f"(r[i + 1]), "f"(r[i + 2]), "f"(r[i + 3]) : "memory");
}

// ---- Compile-time shape of one instantiation ----------------------------------------------------------
// kSparse_: the instantiation for block-sparse masks (schedules in shared memory); the dense one carries
// none of that code, so its producer stays small. kConsumers_: consumer warpgroups of 64 query rows
// each: 3 at d64 dense (FlashAttention-3's choice, 192-row tiles; perf-log v5), else 2.
// kPolyEvery_: every kPolyEvery-th 8-column group of P is exponentiated by exp2_fma instead of the SFU
// (0: none). kTmaStoreO_: the epilogue writes O to a shared staging tile (64 rows per warpgroup, 128-byte
// swizzle) and one thread per warpgroup stores it with TMA, instead of every thread storing to global
// memory (FlashAttention-3's epilogue; d64's and d128's dense instantiations since run s14-1, perf-log v7).
template <int kHeadDim_, int kBlockN_, int kStages_, DType kDType_, bool kSparse_ = false, int kConsumers_ = 2,
          int kPolyEvery_ = 0, int kStoreO_ = 0, bool kTailSplit_ = false>
struct Traits {
  static constexpr int kPolyEvery = kPolyEvery_;
  // dev/sm90_dev.cu's profiling variant: clock64 spans of each tile's phases summed into args.profile (Prof).
  static constexpr bool kProfile = false;
  // A loop block's K/V full barriers probed right after the previous block's products are issued (mbar_test2), the
  // blocking wait run only if they had not completed then: the long-range instantiations (LongRange below) and, with
  // the softmax pinned (v50), d256's dense one at every length (sm90_dev s28-6: 0.3-1.5% faster at all 12 dense and
  // causal problems, 1k-16k; at d128's 128-key kernel 0.5-1% slower).
  static constexpr bool kEarlyProbe = kHeadDim_ == 256 && !kSparse_;
  static constexpr bool kTmaStoreO = kStoreO_ != 0;
  // kStoreO_ == 2: the staging tile is the warpgroup's own 64 rows of the Q buffer (d256, which has no 64 KB
  // to spare): Q is then released after the store has read them, not after the tile's last S.
  static constexpr bool kOStageInQ = kStoreO_ == 2;
  // kStoreO_ == 3: O is staged in the tile's last key block's ring slots -- warpgroup 1's in K_last's, warpgroup 0's in
  // V_last's -- and the slots go back to the producer once the stores have read them (two consumers, dense: d256). Q is
  // then released after the tile's last S, as with direct stores, so the next tile's Q loads during the last P V and the
  // epilogue. The consumer loop is the same as for every other epilogue: a slot's empty barrier counts one arrival
  // more, which the producer gives for every block but a tile's last (it knows which is last when it loads the next),
  // and the stores' owner gives for the last.
  static constexpr bool kOStageInRing = kStoreO_ == 3;
  static_assert(!kOStageInRing || (kConsumers_ == 2 && !kSparse_), "O staged in the ring: two consumers, dense");
  static constexpr bool kSparse = kSparse_;
  // The static order's last round split along the keys (shapes.h, TailSplit; use_split_kernel): instantiations of their
  // own, since the pieces' epilogue costs the kernel 1-3.5% wherever it is compiled in, splitting or not (sm90_dev
  // s23-7: d64 and d128 causal 1k-16k, which never split; most of it the park-and-merge block's presence).
  static constexpr bool kTailSplit = kTailSplit_ && !kSparse_;
  static constexpr DType kDType = kDType_;
  static constexpr bool kBF16 = kDType == DType::BF16;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kConsumers = kConsumers_;
  static_assert(kConsumers == 2 || kConsumers == 3, "consumer warpgroups");
  static constexpr int kBlockM = 64 * kConsumers;  // query rows per tile
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kStages = kStages_;
  // Block-sparse with three consumer warpgroups (d64, 128-row mask blocks): a 192-row tile's warpgroups lie in two
  // mask row blocks -- two of them in one (the pair), the third in the other (the single: warpgroup 2 in even tiles, 0
  // in odd ones) -- whose lists differ. Each list gets its own K/V ring (ring 0 the pair's, ring 1 the single's), so no
  // warpgroup waits on blocks it does not visit, and the warpgroups do not take turns (no ping-pong: the lists may
  // differ in length; three warpgroups without it measured the same as with it, perf-log v24).
  static constexpr bool kTwoRings = kSparse_ && kConsumers_ == 3;
  static constexpr int kRings = kTwoRings ? 2 : 1;
  static constexpr int kRingSlots = kRings * kStages;  // ring r's stage s is slot r * kStages + s
  // Ring `ring`'s position `at` (blocks loaded into it before): its slot (the loaders and the consumers).
  __device__ __forceinline__ static int ring_slot(int ring, int at) { return ring * kStages + at % kStages; }
  // Two rings since session 42 (perf-log v75): the three warpgroups take the dense kernel's turns, products and SFU, the
  // warpgroups of the shorter list taking empty turns after their epilogue, so that every warpgroup takes as many turns
  // in every tile (sm90_dev s42-14, against the free warpgroups before: 4k s = .1 / .25 / .5 +0.8 / +1.4 / +3.4%, 8k +2.5
  // / +4.1 / +4.3%, 16k +3.2 / +4.0 / +4.4%). Turns taken only in tiles whose lists are of about equal length, the others
  // free (a run-time choice per tile), measured no faster than none (s42-14), like d128's SFU turns switched at run time
  // (s33-3).
  static constexpr bool kRingTurns = kTwoRings;
  static constexpr bool kPingPong = !kTwoRings || kRingTurns;
  // O's rescale by the previous block's correction done inside the turn, after S_j is issued and before P_{j-1} V_{j-1}
  // (FlashAttention-3's place), so its FMULs run in the shadow of S_j's wgmmas instead of on the chain between the
  // P V wait and the next turn (perf-log v45: sm90_dev s25-1, +1-4% at every head dim, dense and causal, 2k-16k, and the
  // block-sparse two-warpgroup kernels; at random inputs a warp's running max moves in most blocks up to 4k). The two-ring
  // kernel's warpgroups, without turns before session 42, were 5-10% slower with it; with kRingTurns it is in the turn.
  static constexpr bool kRescaleInTurn = !kTwoRings || kRingTurns;
  // Two rings with fixed roles: warpgroups 0 and 1 always the pair (ring 0), 2 always the single (ring 1), the tile's
  // 64-row groups dealt to them accordingly (rg); no warpgroup changes rings, so there is no tile-end barrier of the
  // three. With the pin below, production since session 27 (perf-log v49); alone, 2-6% slower than rotating roles.
  static constexpr bool kFixedRings = kTwoRings;
  // The single warpgroup's index by shifts (single_wg; perf-log v86): the two-ring kernel's mask blocks are 128 rows, so
  // the two divisions by the mask's block_m at every tile start -- on each consumer warpgroup's way to its first
  // product -- are not needed. sm90_dev s57-10, two rounds of 80 reps, the divisions against production's first copy:
  // 4k s = .1 1.022 / 1.028, .25 1.006 / 1.008, .5 1.004 / 1.004, 8k s = .25 1.003 / 1.003, 16k 1.002 / 1.002.
  static constexpr bool kSingleShift = kTwoRings;
  // A step after the loop's softmax, before the P V wait: 0 none, 1 a warpgroup named barrier (dev), 3 a clock read kept
  // alive by a shared store. ptxas places the softmax's exps after the P V wait (perf-log v24) with 0 and 1 (and with a
  // __syncwarp, s27-1), and before it with 3 (a clock read is an instruction it schedules nothing across, as in the
  // profiled builds), so with 3 a warpgroup's softmax overlaps its own P V instead of waiting for it.
  // - The two-ring kernel, whose warpgroups took no turns before session 42 (kRingTurns), waited there for a P V queued
  //   behind the other warpgroups' products: fixed rings with 3 ran 3-8% faster than session 26's rotating rings at
  //   s = 0.1, 0-6% at s = 0.25, equal at s = 0.5 (v49).
  // - Two ping-pong warpgroups on blocks of <= 128 keys (d128's 128-key kernel, d256's two): 1.5-4% faster from 2k
  //   (d128 dense 16k 3.451 against 3.558 ms, d256 split 16k 3.009 against 3.133), within 1% at 1k, d256 causal 1k 1-2%
  //   slower (sm90_dev s28-1/2; v50) -- which the early probe (kEarlyProbe, v51) more than wins back there.
  // - Not where it measured slower: d64's three ping-pong warpgroups (1-2%), d128's 192-key blocks (1.5-2%), the
  //   block-sparse two-warpgroup kernels (d64 2-4% at s27-2, d128 within 1% either way).
  // (The two-ring kernel with turns (kRingTurns) leaves it out: 1-2.5% slower with it, sm90_dev s42-12.)
  static constexpr int kPinSoftmax = (kTwoRings && !kRingTurns) || (!kSparse_ && kConsumers_ == 2 && kBlockN_ <= 128) ? 3 : 0;
  // Turns at the SFU (perf-log v56): the softmax's exponentials taken in turns round the consumer warpgroups (a second
  // named-barrier ring, 9 + wg, beside the products' ping-pong), after cuDNN's d64 kernel (ncu s32-3: its ping-pong
  // barrier brackets the exps, not the products). At d64 a 64 x 128 block's 64 exps per thread take 512 cycles of a
  // sub-partition's SFU, about what its two products take on the tensor cores, so warpgroups whose exps overlap stall
  // each other (our d64 MUFUs: a quarter of the kernel's stall samples, cuDNN's 7%). The exps are tied to the ring by
  // data (the turn's zero is added to the row's max, the hand-over takes the row sums), so ptxas cannot move them out.
  // sm90_dev s32-4, d64's three warpgroups: dense 2k-16k +1.2-2.4%, causal +0.9-1.7%, 1k within 0.5%; the SFU turns
  // alone (no ping-pong) 5-15% slower; two warpgroups (dense) 1-4% slower, the two-ring kernel's pair 3-5% slower
  // (s32-7, commit a9acaf7; its single's list differs in length, so it cannot join), so only the three-warpgroup dense
  // kernel.
  // (The two-ring kernel takes them with its products' turns since session 42: kRingTurns.)
  static constexpr bool kSfuTurns = (!kSparse_ && kConsumers_ == 3) || kRingTurns;
  // Block-sparse producer threads that read each tile's index: the scheduler's, a Q loader and a K/V loader per ring
  // (perf-log v40). They and every consumer thread arrive on sched_empty.
  static constexpr int kLoaders = kTwoRings ? 2 : 1;
  static constexpr int kThreads = 128 * (1 + kConsumers);
  static constexpr int kPages = kHeadDim / 64;  // 64-column (128-byte) swizzle pages per row
  static_assert(kHeadDim % 64 == 0 && kBlockN % 16 == 0 && kBlockN <= 256, "tile shape");
  static constexpr int kQBytes = kBlockM * kHeadDim * 2;
  // Q buffers (two where shared memory allows: the next tile's Q loads during this one) and the bytes of
  // Q + K/V ring + alignment slack, as the host's shapes.h computes them.
  static constexpr Shape kShape{kHeadDim, kBlockN, kStages, kConsumers, kStoreO_};
  static constexpr int kQStages = kShape.q_stages(kSparse);
  static constexpr int kKVBytes = kBlockN * kHeadDim * 2;
  static constexpr int kOStageBytes = kShape.o_stage_bytes();  // after the K/V ring
  static constexpr int kSmemBytes = kShape.smem_bytes(kSparse);
  static_assert(kSmemBytes <= 232448, "shared memory");
  // Registers per thread after setmaxnreg: 128 x producer + 256 x consumer <= 64K. The scheduler warp
  // builds block-sparse schedules with all lanes: 40 keeps it from spilling there, except at d256, whose
  // consumers need all 240 (their O alone is 128); that producer's few spills stay in L1.
  // Three consumer warpgroups: 128 x 32 + 384 x 160 = 64K, FlashAttention-3's split.
  static constexpr int kProducerRegs = kConsumers == 3 ? 32 : kSparse && kHeadDim_ < 256 ? 40 : 24;
  // The tile's decode (Tile: its query block, head and batch, up to six integer divisions) done once by the producer
  // (the block-sparse scheduler warp) and published beside its index, instead of by every consumer thread at the tile
  // start (perf-log v71, v72). The block-sparse instantiations but d256's (whose 24-register producer was not measured
  // with it): the two-ring kernel 1-2% faster at 8k-16k (sm90_dev s38-6), d128 block-sparse 2-4% at 8k-16k and the d64
  // two-warpgroup one on d64's windows 1-4% (s39-4). The dense producer (start_tile) publishes it too in d64's
  // three-warpgroup instantiation since session 57 (perf-log v85; sm90_dev s57-3, two rounds of 100 reps, paired): causal
  // 1k .981 / .983, 2k .986 / .986, 4k .993 / .993, dense 1k-4k .998-1.001, 8k 1.003 (the warm copy .998-1.001). In the
  // profile it halved the tile start's setup (d64 causal 1k 1206 -> 609 cycles, s38-6, when it measured causal 1k
  // 0.6-1.3% faster and dense 0.5-1% slower). d128 and d256 dense (s49-1): d128 causal 1k-4k 0.3-0.7% faster, 8k-16k
  // 0.1-0.3% slower, d256 dense 1-3.5% slower, so not there. Not with the tail split, whose work codes the consumers
  // decode themselves.
  static constexpr bool kTileInSmem = (kSparse && kHeadDim_ < 256) || (!kSparse_ && kConsumers_ == 3 && !kTailSplit_);
  // The block-sparse K/V loaders take the tile's decode from the scheduler too (perf-log v87), instead of up to four
  // integer divisions between a tile's tile_full wait and its first K load. sm90_dev s57-12, two rounds of 80 reps, the
  // loaders' own decode against production's first copy: the two-ring kernel 4k s = .1 1.031 / 1.032, .25 1.007 / 1.007,
  // .5 1.006 / 1.006, 8k s = .1 1.012 (round 2); d128 4k s = .1 1.023 / 1.031, .25 1.006 / 1.011, .5 .998 / 1.002, 8k-16k
  // 1.001-1.006.
  static constexpr bool kLoaderMhb = kSparse && kTileInSmem;
  static constexpr int kConsumerRegs = kConsumers == 3 ? 160 : kSparse && kHeadDim_ < 256 ? 232 : 240;
  // Two-kernel forms (shapes.h, Rows): the PDL primary lets the dependent launch start once all its CTAs run, the
  // secondary's CTAs wait for the primary's end before they exit. Both instructions do nothing without PDL.
  // - d64 dense's rows (d64_split_rows; perf-log v53): the three-warpgroup dense instantiation, then the two-warpgroup
  //   dense one (kRowsShape).
  // - d128's 128-key dense instantiation below kSplitMinKeys (pair_split; perf-log v54): the static order's whole rounds,
  //   then the last round's pieces on the same shape with the tail split (kTailSplit), which also waits for the
  //   primary's end before its first count (the counts are zeroed ahead of the primary: nothing between the two).
  static constexpr bool kPdlPrimary =
      !kSparse_ && !kTailSplit_ && (kHeadDim_ == 64 ? kConsumers_ == 3 : kHeadDim_ == 128 && kBlockN_ == 128);
  static constexpr bool kPdlSecondary =
      !kSparse_ && (kHeadDim_ == 64 ? kConsumers_ == 2 : kHeadDim_ == 128 && kBlockN_ == 128 && kTailSplit_);
  // The k-steps' shared-memory descriptors made from one per operand and block (wg::desc_plus: a 32-bit add of the
  // step's offset) instead of each from its own address (wg::desc: mask, shift and or per operand and step), and (kUniformIt)
  // the two-ring consumers' ring position, ring and row group broadcast from lane 0 at the tile start, so that ptxas
  // knows them warp-uniform. Session 40's source-level profile (ncu, d64 8k s = .5) found the two-ring loop spending ~100
  // integer instructions a block before its first S wgmma, the descriptors built in vector registers and moved to uniform
  // ones one by one (its ring position is read from shared memory, so ptxas could not prove it uniform). Both together:
  // the two-ring kernel 4-10% faster (sm90_dev s40-3: 16k s = .5 4.660 against 5.213 / 5.190 ms, 8k 1.184 against
  // 1.279 / 1.276; perf-log v73). The ping-pong kernels build their descriptors in uniform registers already, between a
  // turn's wgmmas; there kDescPlus measured 0-2% slower (d64 dense and causal, d128, d256; s40-2/3), so they keep desc().
  static constexpr bool kDescPlus = kTwoRings;
  static constexpr bool kUniformIt = kTwoRings;
  // kUniformWg: the warpgroup index broadcast from lane 0 at the kernel's start (CUTLASS's way of telling ptxas a value is
  // warp-uniform), so that what derives from it -- each S descriptor's Q address, the turns' barrier ids -- may live in
  // uniform registers. sm90_dev, two rounds (s40-5, s41-2): d64 dense and causal (both kernels of the pair) 0-1.2% faster,
  // 1k dense +1.2% both times; d256 dense +0.4-1.4%, causal -0.1 to +0.9% (s41-2); d128 -1.9 to +0.7% and the block-sparse
  // kernels 0.5-2.6% slower, so not there (perf-log v74). Not measured with the tail split.
  static constexpr bool kUniformWg = !kSparse_ && !kTailSplit_ && (kHeadDim_ == 64 || kHeadDim_ == 256);
  // kHalfDiag: S_0's mask, softmax and pack (the prologue's) on only as many of the first block's columns as its rows can
  // see -- none, half or all -- where that block is cut by the diagonal (a causal tile's first block is its diagonal one)
  // or the sequence's end; P's other columns zero, the row max of rows that see none still -inf. 1: by the tile's key end
  // (KeyBlocks::hi; at d64 causal 2 of the 5 whole tiles a head end in a block's first half at 1k, 6 of 10 at 2k); 2: by
  // each warpgroup's own 64 rows (at 1k 7 of a head's 15 warpgroup prologues see nothing of the block, 5 half). Output
  // bit-identical. sm90_dev on d64's three warpgroups (perf-log v77): s47-1, 1 against none: causal 1k +0.5%, 2k +0.8%,
  // 4k +0.4%, 16k +0.1%; s47-2, 1 against none 1k +2.4%, 2k +1.3%, 4k +1%, 16k 0, and 2 against 1 1k +0.9%, 2k +1%, 4k
  // +0.8%, 16k 0. Production: 2 at d64 (three warpgroups). d256 (80-key blocks; 128-row tiles end 16 or 32 keys into a
  // block in 2 of 5) 0.4-0.8% slower with 1 at 1k-4k, with 2 -0.6% at 1k to +0.5% at 16k; d128 (128-key blocks: warpgroup
  // 0 sees half the diagonal block in every causal tile) with 2 2.5-9% slower (s47-4): not there. Not built: S_0
  // itself as an m64 n{kBlockN / 2} product (into acc_s's first half or an array of its own, ptxas serialised every wgmma
  // of the kernel, C7511 / C7512 and spills); P_0 V_0 on half V_0's rows (a branch at the loop's P V issue: 1-5%
  // slower, C7519).
  static constexpr int kHalfDiag = !kSparse_ && kConsumers_ == 3 ? 2 : 0;
  // kSkipDiag (session 51; at d256 for windows with a left edge since v82, causal walking up with kUpward's own end skip):
  // a warpgroup whose 64 rows see no key of the tile's first block (the diagonal one, when the
  // tile's key end lies past its rows' -- at d256 causal 1k warpgroup 0 in 7 of a head's 8 tiles, where 128-row tiles end
  // 16-64 keys into an 80-key block; at d64 7 of a 1k head's 15 warpgroup prologues) leaves that block out: it waits
  // for the block's K and V only to hand their slots back, takes the turns (products' and SFU's) the block's S and
  // softmax would have taken, as empty ones, and starts its prologue at the next block. The block's S and P V -- 5.7% of
  // d256 causal 1k's products, 9% of d64's -- are not issued. No branch round a wgmma (ptxas serialised those: v77's
  // "not built"): the prologue and loop are the same code, only started one block further. The block's V slot goes back
  // after the prologue's S is issued: V_n loads after K_{n-1}, so handing it back first (s51's form 1, commit cf556d2)
  // also waited for V_n before the prologue could start.
  // sm90_dev s51-2 (perf-log v78), paired, none / form 1 against this: d256 causal 1k 1.018 / 1.012, 2k 1.020 / 1.011, 4k
  // 1.007 / 1.009, 16k 1.003 / 1.005; d64 causal 1k 1.016 / 1.007, 2k 1.009 / 1.004, 4k 1.005 / 1.003; dense within 0.4%.
  // On d128's 192-key kernel (where warpgroup 0 skips in some tiles) 8-9% slower, dense as well: not there.
  static constexpr bool kSkipDiag = !kSparse_ && !kTailSplit_ && (kConsumers_ == 3 || kHeadDim_ == 256);
  // Dev-only probes of what K and V's memory traffic costs (sm90_dev's SkipKVOdd, KVHot, AlwaysRescale; session 42,
  // perf-log "what K and V's bytes cost"). Their results are wrong by design; only their times count.
  //  - kDevSkipKVOdd: every K/V load left out in odd CTAs (the slot's full barrier arrived on without bytes): half the
  //    L2 -> SMEM bytes and the DRAM re-reads gone, the upper bound of multicasting K and V to a cluster pair.
  //  - kDevKVHot: every K/V load takes key block 0 of its head: the same L2 -> SMEM bytes and issue, no DRAM reads.
  //  - kDevAlwaysRescale: O rescaled after every block but a tile's first, moved max or not. The two above never move
  //    the max (stale or repeated K), so production skips rescales they do not: time them all with it.
  static constexpr bool kDevSkipKVOdd = false;
  static constexpr bool kDevKVHot = false;
  static constexpr bool kDevAlwaysRescale = false;
  // Dev-only probes of what a tile's boundary costs (session 55; wrong results by design, only their times count):
  //  - kDevNoEpilogue: the epilogue writes nothing (no O / l, no staging, no store, no LSE): what hiding all of it would
  //    give at most, e.g. under the next tile's first products (the joined tile, perf-log v18).
  //  - kDevNoSoftmax0: the prologue's softmax of S_0 left out (P_0 = 0, the row max still -inf): what overlapping it
  //    would give at most.
  static constexpr bool kDevNoEpilogue = false;
  static constexpr bool kDevNoSoftmax0 = false;
  // kDeferStore (perf-log v84): the epilogue stages O / l in the warpgroup's own tile and goes on; the staging stores' proxy
  // fence, the warpgroup barrier and thread 0's TMA store come in the next tile's prologue, once its S_0 is issued, where
  // the warpgroup waits for S_0 anyway (after the loop for the CTA's last tile). Session 55's probe (s55-4) put the whole
  // epilogue at 3.5% of d128 dense 1k; these three were its tail on the path to the next tile's first turn. sm90_dev
  // s55-5, paired: d128's 128-key kernel dense 1k-16k .991-.994, causal 2k-16k .995, causal 1k 1.000-1.002; d64's
  // three-warpgroup pair 1.002-1.009 and the two-ring kernel 1.001-1.014 slower (their SFU turns wait on the flush), so
  // only there. (Its tail-split instantiation has pieces that store no O: not there.)
  static constexpr bool kDeferStore = kHeadDim_ == 128 && kBlockN_ == 128 && !kSparse_;
  // kUpward (session 53, perf-log v82; the Upward mixin below, production for d256 causal: shapes.h use_upward_kernel):
  // dense walks go up from the range's first block, so a causal tile's diagonal block comes last. With the causal
  // order's groups of two heads (shapes.h causal_l2_budget), a head's tiles then start together and read each K/V block
  // at about the same time: d256 causal 1k read 245 MB from DRAM walking down (Q + K + V is 192), 227 walking up (ncu
  // s53-6). A warpgroup whose rows see none of the last block leaves it out (kSkipDiag's idea at the other end; kSkipDiag,
  // which leaves out the first block, is off).
  static constexpr bool kUpward = false;
  // Dev (session 50, sm90_dev's CtaTimes): thread 0 writes its CTA's start and end (%globaltimer, ns) to
  // args.profile[2 c], [2 c + 1]: how evenly the persistent CTAs finish. Session 63: and its SM's %clock64 at the same
  // two points to args.profile[kDevCtaClocks + 2 c], [+ 1], so the SM clock during the launch is their ratio.
  static constexpr bool kDevCtaTimes = false;
  static constexpr int kDevCtaClocks = 2048;
  static constexpr int kSRegs = kBlockN / 2;   // S accumulator floats per thread (m64 x kBlockN / 128)
  static constexpr int kORegs = kHeadDim / 2;  // O accumulator floats per thread
};

// ---- Which key blocks a query block visits ------------------------------------------------------------
// The same rules as the sm80 kernel and the CPU backend (libflash/cpu/block_range.h): the window's key
// range [lo, hi) of the whole query block, walked from its last block down (the blocks cut by the
// diagonal come first). For block-sparse masks the producer's scheduler warp turns the query block's list
// into a schedule in shared memory first (build_schedule): the listed mask blocks as a set (any order, repeats
// counted once, out-of-range indices skipped), split into block_n / kBlockN key blocks, clipped to the
// window, descending. (The d64 windows that run on the block-sparse instantiation, shapes.h use_listed_kernel, have
// no block mask: their schedule lists every block of the range.) Producer and consumers each walk their own KeyBlocks over the same range/schedule.
// kUp (Traits::kUpward, d256 causal since v82): dense walks from the range's first block up, the diagonal blocks last.
// (Under session 16's order of large groups it measured the same, v17; with a head's tiles handed out together it cuts
// d256 causal's DRAM re-reads, v82. Issuing the next tile's S_0 in this tile's last turn: slower, v18.)
// kSmemWalk (the two-ring consumers, 160 registers): the schedule walked by 32-bit shared addresses from its first
// entry to its end, read once -- two live values instead of a generic pointer (two) and a position.
template <int kBlockN, bool kSparse, bool kSmemWalk = false, bool kUp = false>
struct KeyBlocks {
  int lo, hi, cursor, n_lo;
  const int32_t* sched = nullptr;  // block-sparse: [count, n_0, n_1, ...] in shared memory
  int pos = 0;
  uint32_t walk = 0, walk_end = 0;  // kSmemWalk: the next entry's and the end's shared addresses
  // Key blocks n < mask_below or n > mask_above have some (row, key) outside the sequence or the window, so they
  // need the element mask (shapes.h, mask_bounds). Decided once per tile: per block, the same test on the kernel parameters (64-bit
  // window arithmetic, constant-bank loads) was ~10% of the d64 block-sparse loop's stall samples (ncu s17-3).
  int mask_below, mask_above;

  // at_least_one (dense walks, O staged in the ring): a tile that sees no key still visits block 0, wholly masked, so
  // it has a last block's slots to stage its O (zeros) in.
  __device__ KeyBlocks(const FwdParams& p, int q_begin, int q_end, const int32_t* schedule, bool at_least_one = false) {
    const int64_t lo64 = p.window_left >= 0 ? q_begin + p.diag_offset - p.window_left : 0;
    const int64_t hi64 = p.window_right >= 0 ? q_end - 1 + p.diag_offset + p.window_right + 1 : p.seqlen_k;
    lo = int(max(lo64, int64_t(0)));
    hi = int(max(min(hi64, int64_t(p.seqlen_k)), int64_t(0)));
    n_lo = lo / kBlockN;
    cursor = lo < hi ? (hi + kBlockN - 1) / kBlockN - 1 : -1;
    sched = kSparse ? schedule : nullptr;
    if constexpr (kSmemWalk) {
      walk = static_cast<uint32_t>(__cvta_generic_to_shared(schedule)) + 4;
      walk_end = walk + 4 * schedule[0];
    }
    const MaskBounds mb = mask_bounds<kBlockN>(p, q_begin, q_end);
    mask_above = mb.above, mask_below = mb.below;
    if (at_least_one && cursor < 0) cursor = n_lo = 0, mask_below = max(mask_below, 1);
  }
  __device__ __forceinline__ bool needs_mask(int n) const { return n < mask_below || n > mask_above; }
  // Dense walks: whether next() has another block (Traits::kSkipDiag's prologue).
  __device__ __forceinline__ bool has_next() const { return cursor >= n_lo; }
  // A piece of a split tile (Work): only key blocks [n_begin, n_end) of the dense walk.
  __device__ __forceinline__ void clip(int n_begin, int n_end) {
    n_lo = max(n_lo, n_begin);
    cursor = min(cursor, n_end - 1);
  }

  // Next key block (in units of kBlockN), or -1 when done.
  __device__ __forceinline__ int next() {
    if (!kSparse) {
      if constexpr (kUp) return cursor >= n_lo ? n_lo++ : -1;  // (Traits::kUpward: cursor is then the top block)
      return cursor >= n_lo ? cursor-- : -1;
    }
    if constexpr (kSmemWalk) {
      if (walk == walk_end) return -1;
      int n;
      asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(n) : "r"(walk) : "memory");
      walk += 4;
      return n;
    }
    return pos < sched[0] ? sched[1 + pos++] : -1;
  }

  // The scheduler warp (all 32 lanes): the schedule of the mask row block holding query row q_row into `out` (no
  // block: q_row past seqlen_q, a two-ring tile's rows that are all past the end), using `bits` (one bit per mask
  // key block, n_mask_blocks / 32 + 1 words) for the set. The
  // lanes load 32 list entries at a time and compact the visited blocks with a ballot, so a tile's
  // schedule costs a few list loads' latency, not one per entry.
  __device__ void build_schedule(const FwdParams& p, int b, int h, int q_row, int32_t* out, uint32_t* bits,
                                 int lane) const {
    // The readers of this buffer (tile i-2's schedule: the loading lane and the consumers) released it
    // through sched_empty before the caller got here; the warp barrier orders this warp's previous stores
    // (bitmap, entries) before this build's. (When the producer warp also walked the schedule, a tile with
    // an empty key range stored its count with no warp barrier since: racecheck, perf-log v5.)
    __syncwarp();
    int n_out = 0;
    if (lo < hi && q_row < p.seqlen_q) {
      // No block mask (a short-tile problem routed here, shapes.h use_listed_kernel): every block of the key range is
      // listed, so the schedule is the dense walk's.
      const bool every_block = !p.has_block_mask;
      const BlockMaskParams& m = p.block_mask;
      int sub_per = 1;
      if (!every_block) {
        const int n_mask_blocks = int((int64_t(p.seqlen_k) + m.block_n - 1) / m.block_n);
        for (int w = lane; w <= n_mask_blocks / 32; w += 32) bits[w] = 0u;
        __syncwarp();
        const int64_t qb = q_row / m.block_m;
        const int32_t* list = m.kv_indices + b * m.idx_batch_stride + h * m.idx_head_stride + qb * m.idx_qblock_stride;
        // The list's first 32 entries are loaded together with the count, not after it: their address does not depend
        // on the count, and the caller's array holds max_kv_blocks entries per query block (flash.h), so a schedule
        // costs one round trip to memory instead of two (on the critical path at a CTA's start; perf-log v40).
        const int32_t first = lane < m.max_kv_blocks ? list[int64_t(lane) * m.idx_stride] : -1;
        int count = m.kv_num_blocks[b * m.num_batch_stride + h * m.num_head_stride + qb * m.num_qblock_stride];
        count = count < 0 ? 0 : (count > m.max_kv_blocks ? m.max_kv_blocks : count);
        for (int i = lane; i < count; i += 32) {
          const int32_t kb = i < 32 ? first : list[int64_t(i) * m.idx_stride];
          if (kb >= 0 && kb < n_mask_blocks) atomicOr(&bits[kb >> 5], 1u << (kb & 31));
        }
        __syncwarp();
        sub_per = m.block_n / kBlockN;
      }
      for (int base = cursor; base >= n_lo; base -= 32) {  // lane l looks at block base - l: descending
        const int n = base - lane;
        const int kb = n / sub_per;
        const bool listed = n >= n_lo && (every_block || ((bits[kb >> 5] >> (kb & 31)) & 1u));
        const uint32_t ballot = __ballot_sync(0xffffffffu, listed);
        if (listed) out[1 + n_out + __popc(ballot & ((1u << lane) - 1u))] = n;
        n_out += __popc(ballot);
      }
    }
    // The count, stored by lane 0 alone; every lane's tile_full arrive (after this) releases its own
    // stores to the loading lane and the consumers. (Every lane storing it, while the same warp's lanes
    // also walked the schedule, left 7 racecheck warnings on this word in runs s13-6 and s14-1.)
    if (lane == 0) out[0] = n_out;
    __syncwarp();
  }

};

// Work tile x -> (query block, batch*head).
// Causal-like masks (right edge, no left edge): longest first within groups of (batch, head) pairs whose K and V fit
// in L2 together (shapes.h, CausalOrder; launch sizes the groups).
// Otherwise one (batch, head)'s query blocks are consecutive, so CTAs side by side share K and V in L2.
struct Tile {
  int m_block, b, h;
  __device__ Tile(int m, int b_, int h_) : m_block(m), b(b_), h(h_) {}
  __device__ Tile(const Args& a, int x) {
    const FwdParams& p = a.p;
    const int num_bh = p.heads_q * p.batch;
    int bh;
    if (p.window_right >= 0 && p.window_left < 0) {
      CausalOrder{num_bh, a.num_m_blocks, a.l2_group, a.l2_full_groups}.tile(x, m_block, bh);
    } else {
      m_block = a.num_m_blocks - 1 - x % a.num_m_blocks;
      bh = x / a.num_m_blocks;
    }
    h = bh % p.heads_q;
    b = bh / p.heads_q;
  }
};

// Two rings (Traits::kTwoRings): a tile is 1-3 groups of 64 rows from group g, coded as m_block = g | groups << 16
// (ring_rows decodes it), in shapes.h RingOrder's order: the plain one, or with a tail plan (Args::ring_tail_heads) the
// whole tiles first and the launch ending on 128- and 64-row tiles.
__device__ __forceinline__ Tile ring_tile(const Args& a, int x) {
  int bh, g, groups;
  RingOrder{a.p.heads_q * a.p.batch, a.num_m_blocks, a.ring_tail_heads}.tile(x, bh, g, groups);
  return Tile(g | groups << 16, bh / a.p.heads_q, bh % a.p.heads_q);
}
// A two-ring tile's rows [q_begin, q_end): q_end clipped by seqlen_q. (Block-sparse tiles are never shifted.)
__device__ __forceinline__ void ring_rows(const FwdParams& p, int m_block, int& q_begin, int& q_end) {
  q_begin = (m_block & 0xffff) * 64;
  q_end = min(q_begin + (m_block >> 16) * 64, p.seqlen_q);
}

// Static order (dense masks: every tile the same length): the persistent grid's r-th tile of CTA c,
// rounds of gridDim.x tiles walked forwards in even rounds and backwards in odd ones (perf-log v3).
// Causal and block-sparse masks take tiles from a counter in global memory instead (args.tile_counter,
// perf-log v5): tiles of unequal length, and a CTA that finishes a short one takes the next at once.
__device__ __forceinline__ int tile_of(int round) {
  const int g = int(gridDim.x), c = int(blockIdx.x);
  return round * g + ((round & 1) ? g - 1 - c : c);
}

// The dynamic order needs no memset ahead of the launch (one fewer operation in the stream: 0.75 us of the GPU's
// timeline, dev/launch_gap.cu). Its counter (Args::tile_counter) is a 64-bit word in the caller's workspace: the
// launch's epoch (Args::epoch, never 0) in its high half, the tiles taken in its low half. A CTA claims the word for
// this launch before its first take, unless another CTA already did: at once if it holds 0, which every launch leaves
// behind, by a compare-and-swap loop if it holds anything else (a caller's fresh workspace). Every take after a claim
// is an atomicAdd, and a CTA that takes at all takes once more than the tiles it gets, so a launch's takes get the
// relative indices 0 .. T - 1 in order, T known: the last one comes after every claim and every other take (each CTA's
// claim precedes its own take) and resets the word to 0.
//   - block-sparse (the scheduler warp): every tile run takes the next one; the first take is a compare-and-swap 0 ->
//     (epoch, 1), its claim and take at once (take_issue / take_resolve); T = num_tiles, next = gridDim.x + relative.
//   - dense (the producer's thread 0, 24 registers): a CTA's second tile is the static order's (tile_of(1)) and its
//     takes start there, so a consumer thread claims the word at the kernel's start, off the producer's registers, long
//     before the first take; T = num_tiles - gridDim.x, next = 2 gridDim.x + relative.
__device__ __forceinline__ void take_claim(const Args& a) {
  const unsigned long long mine = static_cast<unsigned long long>(a.epoch) << 32;
  unsigned long long seen = atomicCAS(a.tile_counter, 0ull, mine);
  while (seen != 0 && (seen >> 32) != a.epoch) {
    const unsigned long long was = seen;
    if ((seen = atomicCAS(a.tile_counter, was, mine)) == was) break;
  }
}
// The block-sparse scheduler's take in two halves, so the round trip hides behind a schedule's build (issued before it,
// resolved after): take_issue asks and keeps 32 bits of the answer -- the relative index, or kTakeClaim where a first
// take's compare-and-swap found the word not 0 (claimed by another CTA, or not yet for this launch) -- and take_resolve
// returns the next tile.
constexpr uint32_t kTakeClaim = 0xffffffffu;
__device__ __forceinline__ uint32_t take_issue(const Args& a, bool first) {
  if (first) return atomicCAS(a.tile_counter, 0ull, (static_cast<unsigned long long>(a.epoch) << 32) | 1ull) == 0 ? 0u : kTakeClaim;
  return static_cast<uint32_t>(atomicAdd(a.tile_counter, 1ull));
}
// A take's relative index as the next tile, the word reset by the launch's last take.
__device__ __forceinline__ int take_done(const Args& a, uint32_t rel) {
  if (rel == static_cast<uint32_t>(a.num_tiles) - 1u) atomicExch(a.tile_counter, 0ull);
  return int(gridDim.x) + int(rel);
}
__device__ __forceinline__ int take_resolve(const Args& a, uint32_t got) {
  if (got != kTakeClaim) return take_done(a, got);
  take_claim(a);
  return take_done(a, static_cast<uint32_t>(atomicAdd(a.tile_counter, 1ull)));
}

// ---- Work items of the dense kernels: whole tiles and the split last round's pieces (shapes.h, TailSplit) ----------
// What the dense producer hands the consumers through tile_ids is a code: x < num_tiles, tile x run whole; num_tiles + k
// (k = 0, 1) with the tail split, this CTA's piece k; anything else, the end. (The dynamic order never splits, and
// instantiations without Traits::kTailSplit -- kSplits false -- have no pieces: every code >= num_tiles ends.)
template <bool kSplits = true>
__device__ __forceinline__ bool is_piece(const Args& a, int code) {
  return kSplits && a.tail.units > 0 && code >= a.num_tiles && code - a.num_tiles < 2;
}
template <bool kSplits = true>
__device__ __forceinline__ bool is_work(const Args& a, int code) { return code < a.num_tiles || is_piece<kSplits>(a, code); }
// This CTA's i-th item of the static order: the whole rounds' tiles (tile_of), then its pieces of the split round.
template <bool kSplits = true>
__device__ __forceinline__ int static_item(const Args& a, const TailPlan& plan, int i) {
  if (!kSplits || a.tail.units == 0 || i < plan.whole_rounds) return tile_of(i);  // (>= num_tiles past the end)
  return i - plan.whole_rounds < plan.pieces ? a.num_tiles + i - plan.whole_rounds : 0x7fffffff;
}
template <bool kSplits = true>
__device__ __forceinline__ Work decode_work(const Args& a, const TailPlan& plan, int code) {
  return is_piece<kSplits>(a, code) ? plan.piece[code - a.num_tiles] : Work{code, 0, 0, -1};
}

// Two rings (Traits::kTwoRings): the warpgroup (2 or 0) whose 64 rows lie in the other mask row block than the rest of
// the tile's 192 rows from q_begin (mask blocks of 128 rows, which launch requires). kShift (Traits::kSingleShift): by
// shifts, since the blocks are 128 rows and q_begin >= 0 (block-sparse tiles are not shifted), instead of two divisions
// by the mask's block_m at every tile start.
template <bool kShift = false>
__device__ __forceinline__ int single_wg(const FwdParams& p, int q_begin) {
  if constexpr (kShift) return q_begin >> 7 == (q_begin + 64) >> 7 ? 2 : 0;
  return q_begin / p.block_mask.block_m == (q_begin + 64) / p.block_mask.block_m ? 2 : 0;
}

__device__ __forceinline__ void tma_coords(int (&c)[4], const TensorPos& pos, int col, int row, int head, int batch) {
  // Selects, not c[pos.seq] = row: a run-time index would put c in local memory.
  c[0] = col;
#pragma unroll
  for (int i = 1; i < 4; ++i) c[i] = pos.seq == i ? row : pos.head == i ? head : batch;
}

// ---- Profiling (Traits::kProfile, dev only) -----------------------------------------------------------
// Cycles (clock64 of the SM) each consumer warpgroup's thread 0 spends per phase of a tile, summed over tiles
// into args.profile[kPerWg * wg + phase] (consumer phases kWaitTile .. kEpilogue, counts kTiles, kBlocks, then
// the loop's steps kStepWaitKV .. kStepTail summed over its blocks), and the producer's waits into
// args.profile[kPerWg * kConsumers + ...]. Compiled out of production instantiations.
struct Prof {
  enum : int { kWaitTile, kWaitQ, kPrologue, kLoop, kDrain, kEpilogue, kTiles, kBlocks };
  // One loop block: K_j / V_{j-1} full waits, the wait for the turn, the issue, wait<1> (S_j), the copy + mask +
  // softmax, wait<0> (P_{j-1} V_{j-1}), rescale + pack.
  enum : int { kStepWaitKV = 8, kStepTurn, kStepIssue, kStepWaitS, kStepSoftmax, kStepWaitPV, kStepTail };
  // The prologue's two waits, K_0's full barrier and the turn, and the tile's setup before them (from the Q wait's end:
  // the tile's decode, its key range, O zeroed), all taken out of kPrologue. Then (session 43) the CTA's first tile apart
  // -- its wait from the consumers' own start (out of kWaitTile), its loop blocks' K/V waits and its loop blocks --; of
  // the other tiles' wait, the tile_full wait alone; of the loop blocks' K/V waits, K_j's alone (waited for first in the
  // profiled builds); kRingTurns' owed turns after the epilogue, their cycles (out of the next tile's wait) and count.
  enum : int {
    kProWaitK = 16, kProTurn, kProSetup,
    kWaitTileFirst, kStepWaitKVFirst, kBlocksFirst, kWaitTileBar, kStepWaitK, kOwed, kOwedTurns,
    kPerWg
  };
  // The producer's counters, and (written by the consumers' thread 0) Q's load as the tile start sees it: from the
  // producer's issue to the wait's end, summed over the tiles whose Q wait did wait (and their count), and over all.
  enum : int { kProdWaitQSlot, kProdWaitRing, kProdTotal, kQLandedSum, kQLandedCount, kQReadySum };
  // Block-sparse, the scheduler warp's lane 0: from its start to the first schedule's publish, its waits for a free
  // schedule slot, and its builds (list reads included).
  enum : int { kSchedFirst = kQReadySum + 1, kSchedWaitEmpty, kSchedBuild };
  unsigned long long* out;
  long long mark;
  __device__ void lap(int i) {
    const long long now = clock64();
    atomicAdd(out + i, static_cast<unsigned long long>(now - mark));
    mark = now;
  }
  __device__ void add(int i, long long v) { atomicAdd(out + i, static_cast<unsigned long long>(v)); }
};

// ---- The kernel -------------------------------------------------------------------------------------
template <class K>
__global__ void __launch_bounds__(K::kThreads, 1) fwd_kernel(const __grid_constant__ Args args) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  const FwdParams& p = args.p;
  constexpr int kBlockM = K::kBlockM, kBlockN = K::kBlockN, kStages = K::kStages, kPages = K::kPages;
  static_assert(!K::kTileInSmem || K::kSparse || !K::kTailSplit, "the tail split's consumers decode their work codes");
  const float kNegInf = -INFINITY;

  extern __shared__ uint8_t smem_raw[];
  // Barriers: Q full/empty per Q buffer, then per ring stage K full, V full, K empty, V empty. K_j is
  // released as soon as S_j is done, V_j after P_j V_j: the producer refills each as early as it can.
  // Then two more: block-sparse, sched_empty per schedule slot; dense, claimed (the dynamic order's word claimed for the
  // launch, take_claim) and one unused. Two rings (Traits::kTwoRings): ring 1's stages follow ring
  // 0's in every array (slots kStages .. 2 kStages - 1), in the barriers and in shared memory alike.
  constexpr int kSlots = K::kRingSlots;
  __shared__ alignas(8) uint64_t bars[8 + 4 * kSlots];
  // The tile in each tile slot, written by the producer (block-sparse: its scheduler warp) before its
  // tile_full arrive. Tile slots follow the Q buffers for dense masks and the two schedules for block-sparse.
  __shared__ int tile_ids[2];
  [[maybe_unused]] __shared__ int tile_mhb[2][3];  // Traits::kTileInSmem: the tile's m_block, h, b beside its index
  // The profiled builds: when each Q buffer's load was issued (clock64, the producer's), for the tile start's Prof.
  [[maybe_unused]] __shared__ long long q_issued[2];
  // Two rings: each ring's position (blocks loaded into it before) at the start of the tile in each tile slot, written
  // with the schedules by the scheduler warp: a warpgroup changing rings needs the position of its new one.
  [[maybe_unused]] __shared__ int ring_pos[2][2];
  // A split tile's piece (Work): whether this consumer warpgroup's piece finished last (thread 0's count, for the rest).
  [[maybe_unused]] __shared__ int tail_last[3];
  [[maybe_unused]] __shared__ TailPlan tail_plan;  // dense: this CTA's share of the split round (written before __syncthreads)
  // Dense: each consumer warpgroup's current work item code (Work), written by its thread 0 at the tile's start and read
  // back by all its threads at the end, instead of one more register live across the loop: with it the 192-key kernel's
  // consumers spilled 68 bytes and reloaded 7 of them per key block, d256's 44 (ptxas, session 23); without, none. (The
  // warpgroup's barriers order the store before the loads, and the loads before the next tile's store.)
  [[maybe_unused]] __shared__ int wg_code[3];
  // kPinSoftmax 3: where each warp's lane 0 stores its clock read (a word per warp: one word for all threads was a
  // write-write race to racecheck, s27-4).
  [[maybe_unused]] __shared__ uint32_t pin_sink[K::kPinSoftmax == 3 ? K::kThreads / 32 : 1];
  constexpr int kTileSlots = K::kSparse ? 2 : K::kQStages;
  const uint32_t smem = (static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw)) + 1023u) & ~1023u;
  const uint32_t q_smem = smem;
  const uint32_t k_smem0 = q_smem + K::kQStages * K::kQBytes;
  const uint32_t v_smem0 = k_smem0 + kSlots * K::kKVBytes;
  // After the ring: O's staging tile (kTmaStoreO), then, block-sparse only (launch adds the bytes), two
  // schedules of sched_stride ints and the list bitmap.
  const uint32_t o_stage0 = v_smem0 + kSlots * K::kKVBytes;
  int32_t* const sched_base = reinterpret_cast<int32_t*>(smem_raw + (o_stage0 + K::kOStageBytes - static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw))));
  uint32_t* const sched_bits = reinterpret_cast<uint32_t*>(sched_base + 2 * K::kRings * args.sched_stride);
  const uint32_t bar0 = static_cast<uint32_t>(__cvta_generic_to_shared(bars));
  auto q_full = [&](int slot) { return bar0 + 8 * slot; };
  auto tile_full = [&](int slot) { return bar0 + 32 + 8 * (4 * kSlots + slot); };
  auto q_empty = [&](int slot) { return bar0 + 16 + 8 * slot; };
  auto k_full = [&](int s) { return bar0 + 32 + 8 * s; };
  auto v_full = [&](int s) { return bar0 + 32 + 8 * (kSlots + s); };
  auto k_empty = [&](int s) { return bar0 + 32 + 8 * (2 * kSlots + s); };
  auto v_empty = [&](int s) { return bar0 + 32 + 8 * (3 * kSlots + s); };
  auto sched_empty = [&](int slot) { return bar0 + 32 + 8 * (4 * kSlots + 2 + slot); };
  [[maybe_unused]] const uint32_t claimed = bar0 + 32 + 8 * (4 * kSlots + 2);  // dense (sched_empty(0)'s place)

  // kUniformWg (Traits, perf-log v74): the warpgroup index broadcast from lane 0, so that ptxas knows it warp-uniform.
  const int warpgroup = K::kUniformWg ? __shfl_sync(0xffffffffu, int(threadIdx.x / 128), 0) : int(threadIdx.x / 128);
  if (threadIdx.x == 0) {
    for (int slot = 0; slot < K::kQStages; ++slot) {
      mbar_init(q_full(slot), 1);
      mbar_init(q_empty(slot), 128 * K::kConsumers);
    }
    // Every producer lane that stores arrives on tile_full, and every consumer thread (and the loading
    // lane) on q_empty / sched_empty, so the tile index's and schedule's shared stores and loads are
    // ordered thread by thread.
    for (int slot = 0; slot < kTileSlots; ++slot) {
      mbar_init(tile_full(slot), K::kSparse ? 32 : 1);
      if constexpr (K::kSparse) mbar_init(sched_empty(slot), 128 * K::kConsumers + K::kLoaders + 1);
    }
    for (int s = 0; s < kSlots; ++s) {
      // One arrival per consumer warp of the ring: two rings, the pair's warpgroups (ring 0) or the single one (ring 1).
      const uint32_t warps = 4 * (K::kTwoRings ? (s < kStages ? 2 : 1) : K::kConsumers);
      mbar_init(k_full(s), 1);
      mbar_init(v_full(s), 1);
      mbar_init(k_empty(s), warps + (K::kOStageInRing ? 1 : 0));  // (+1: see Traits::kOStageInRing)
      mbar_init(v_empty(s), warps + (K::kOStageInRing ? 1 : 0));
    }
    if constexpr (!K::kSparse) mbar_init(claimed, 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    if constexpr (K::kTailSplit) plan_tail(args.tail, int(gridDim.x), int(blockIdx.x), tail_plan, K::kPdlSecondary);
    // (Every CTA of the persistent grid is resident by now: the dependent's CTAs queue for the SMs this grid leaves.)
    if constexpr (K::kPdlPrimary) asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
  }
  __syncthreads();
  if constexpr (K::kDevCtaTimes)
    if (threadIdx.x == 0) {
      args.profile[2 * blockIdx.x] = globaltimer();
      args.profile[K::kDevCtaClocks + 2 * blockIdx.x] = clock64();
    }

  if (warpgroup == 0) {
    // ================================ producer ================================
    setmaxnreg_dec<K::kProducerRegs>();
    // Key block n of K or V (map, pos, ring base smem0) for (batch b, KV head h_kv) into ring position `at`
    // (slot at % kStages), once the consumers released the slot. Both producers below (dense, block-sparse).
    auto load_kv = [&](const CUtensorMap* map, const TensorPos& pos, uint32_t smem0, uint32_t full, uint32_t empty,
                       int n, int at, int h_kv, int b) {
      {
        const long long t0 = K::kProfile ? clock64() : 0;
        mbar_wait(empty, ((at / kStages) & 1) ^ 1);
        if constexpr (K::kProfile) Prof{args.profile, 0}.add(Prof::kPerWg * K::kConsumers + Prof::kProdWaitRing, clock64() - t0);
      }
      if constexpr (K::kDevSkipKVOdd) {
        if (blockIdx.x & 1) {
          mbar_arrive(full);
          return;
        }
      }
      mbar_arrive_expect_tx(full, K::kKVBytes);
      int c[4];
#pragma unroll
      for (int pg = 0; pg < kPages; ++pg) {
        tma_coords(c, pos, pg * 64, K::kDevKVHot ? 0 : n * kBlockN, h_kv, b);
        tma_load_4d(smem0 + (at % kStages) * K::kKVBytes + pg * kBlockN * 128, map, full, c[0], c[1], c[2], c[3]);
      }
    };
    // The wait for the Q buffer of the tile_iter-th tile (buffer tile_iter % kQStages) to be released, and Q_i's load
    // into it (rows from q_begin of query head h, batch b).
    auto wait_q_slot = [&](int tile_iter) {
      const long long t0 = K::kProfile ? clock64() : 0;
      mbar_wait(q_empty(tile_iter % K::kQStages), ((tile_iter / K::kQStages) & 1) ^ 1);  // consumers are done with it
      if constexpr (K::kProfile) Prof{args.profile, 0}.add(Prof::kPerWg * K::kConsumers + Prof::kProdWaitQSlot, clock64() - t0);
    };
    auto load_q = [&](int tile_iter, int q_begin, int h, int b) {
      const int q_slot = tile_iter % K::kQStages;
      if constexpr (K::kProfile) q_issued[q_slot] = clock64();  // (released to the consumers by the arrive below)
      mbar_arrive_expect_tx(q_full(q_slot), K::kQBytes);
      int c[4];
#pragma unroll
      for (int pg = 0; pg < kPages; ++pg) {
        tma_coords(c, args.q_pos, pg * 64, q_begin, h, b);
        tma_load_4d(q_smem + q_slot * K::kQBytes + pg * kBlockM * 128, &args.tq, q_full(q_slot), c[0], c[1], c[2], c[3]);
      }
    };
    // Dense: with two Q buffers the next tile's Q is loaded while this tile's K/V loads go on, after its kStages-th block:
    // by then the consumers have released that buffer (its tile's last S), so the wait holds back no K/V load. (Loaded
    // after the tile's last K/V instead, it was still landing when the consumers got there: d64 dense 1k 5% slower, d128
    // 1%, d64 block-sparse 1-1.6%; perf-log v32. Block-sparse has a Q loader of its own since v40.)
    [[maybe_unused]] constexpr int kQAhead = K::kQStages == 2 ? kStages - 1 : -1;  // the block index after which it goes out
    if constexpr (K::kSparse) {
      // Block-sparse: warp 1 is the scheduler -- it takes the tiles (the atomic counter), turns each one's
      // list into a schedule in shared memory and publishes both through tile_full, up to two tiles ahead;
      // lane 0 of warp 3 loads Q, lane 0 of warp 0 the scheduled K/V blocks by TMA (two rings: warp 2's lane 0 ring 1's).
      // Building a schedule waits
      // on two dependent global loads (the count, then the list), which in the loader's own sequence held
      // every tile start up (perf-log v19: the producer was busy, not waiting for the ring, 95% of a d64
      // block-sparse run, and the consumers waited 2-5k cycles at each tile start).
      const int lane = threadIdx.x % 32;
      if (threadIdx.x / 32 == 1) {
        int x = int(blockIdx.x);
        [[maybe_unused]] int pos0 = 0, pos1 = 0;  // two rings: their positions (lane 0)
        [[maybe_unused]] const long long t_sched0 = K::kProfile ? clock64() : 0;
        [[maybe_unused]] long long t_mark = t_sched0;
        auto sched_prof = [&](int i) {  // (profiled builds, lane 0)
          if constexpr (K::kProfile) {
            const long long now = clock64();
            if (lane == 0) Prof{args.profile, 0}.add(Prof::kPerWg * K::kConsumers + i, now - t_mark);
            t_mark = now;
          }
        };
        for (int tile_iter = 0;; ++tile_iter) {
          const int slot = tile_iter & 1;
          // Ask for the tile after this one now, so the atomic's latency hides behind the build (its result is read
          // after the build: shuffled at once, it held every CTA's first schedule back by the atomic's round trip).
          // (The dynamic order's take: issued here, resolved after the build.)
          int next = 0;
          uint32_t take = 0;
          if (lane == 0 && x < args.num_tiles) {
            if (args.tile_counter != nullptr)
              take = take_issue(args, tile_iter == 0);
            else
              next = tile_of(tile_iter + 1);
          }
          if (tile_iter > 0) sched_prof(Prof::kSchedBuild);  // (the atomic's issue with the build)
          // Tile tile_iter - 2's users (every consumer thread, the loader) are done with this slot.
          mbar_wait(sched_empty(slot), ((tile_iter >> 1) & 1) ^ 1);
          if (tile_iter > 0) sched_prof(Prof::kSchedWaitEmpty);
          if (x < args.num_tiles) {
            const Tile tile = K::kTwoRings ? ring_tile(args, x) : Tile(args, x);
            int q_begin = tile.m_block * kBlockM - args.q_shift, q_end = min(q_begin + kBlockM, p.seqlen_q);
            if constexpr (K::kTwoRings) ring_rows(p, tile.m_block, q_begin, q_end);
            int32_t* sched = sched_base + slot * K::kRings * args.sched_stride;
            const KeyBlocks<kBlockN, true> blocks(p, max(q_begin, 0), q_end, sched);
            if constexpr (K::kTwoRings) {
              // Ring 0: the pair's list (from its first warpgroup's rows, the real ones if either's are), ring 1: the
              // single warpgroup's. Rows past the tile's end (a tail plan's 128-row tile: its single's) list nothing:
              // build_schedule leaves a row at seqlen_q empty.
              const int single = single_wg<K::kSingleShift>(p, q_begin);
              const int pair_row = q_begin + (single == 2 ? 0 : 64), single_row = q_begin + 64 * single;
              blocks.build_schedule(p, tile.b, tile.h, pair_row < q_end ? pair_row : p.seqlen_q, sched, sched_bits, lane);
              blocks.build_schedule(p, tile.b, tile.h, single_row < q_end ? single_row : p.seqlen_q,
                                    sched + args.sched_stride, sched_bits, lane);
              if (lane == 0) {  // (lane 0 stored both counts)
                ring_pos[slot][0] = pos0, ring_pos[slot][1] = pos1;
                pos0 += sched[0], pos1 += sched[args.sched_stride];
              }
            } else {
              blocks.build_schedule(p, tile.b, tile.h, q_begin, sched, sched_bits, lane);
            }
            if constexpr (K::kTileInSmem)
              if (lane == 0) tile_mhb[slot][0] = tile.m_block, tile_mhb[slot][1] = tile.h, tile_mhb[slot][2] = tile.b;
          }
          if (lane == 0) tile_ids[slot] = x;
          mbar_arrive(tile_full(slot));  // each lane's arrive releases its own stores
          if (tile_iter == 0) sched_prof(Prof::kSchedFirst);
          if (x >= args.num_tiles) break;  // the end marker is published
          if (lane == 0 && args.tile_counter != nullptr) next = take_resolve(args, take);
          next = __shfl_sync(0xffffffffu, next, 0);
          x = next;
        }
      } else if (threadIdx.x == 96) {
        // The Q loader (lane 0 of warp 3): each tile's Q as soon as its buffer is free, so no K/V load waits behind a Q
        // buffer's release (loaded by the K/V loader after a tile's first blocks, v32's way, it was 1-5.5% slower at d64's
        // two rings and up to 4% at d128, where O staged in Q frees the buffer only in the next tile's prologue; v40).
        if (K::kTmaStoreO) prefetch_tensormap(&args.to);
        for (int tile_iter = 0;; ++tile_iter) {
          const int slot = tile_iter & 1;
          // The CTA's first tile is its own (blockIdx.x < the tile count: grid <= tiles), so its Q goes out at once,
          // while the scheduler still builds its schedule.
          int x = int(blockIdx.x);
          if (tile_iter > 0) {
            mbar_wait(tile_full(slot), (tile_iter >> 1) & 1);
            x = tile_ids[slot];
          }
          mbar_arrive(sched_empty(slot));  // the tile index is read
          if (x >= args.num_tiles) break;
          // (Its own decode: the scheduler's, as the K/V loaders take it (kLoaderMhb), measured no faster here -- its Q goes
          // out a tile ahead; sm90_dev s57-13, commit 514b7da.)
          const Tile tile = K::kTwoRings ? ring_tile(args, x) : Tile(args, x);
          wait_q_slot(tile_iter);
          load_q(tile_iter, K::kTwoRings ? (tile.m_block & 0xffff) * 64 : tile.m_block * kBlockM - args.q_shift, tile.h, tile.b);
        }
      } else if (threadIdx.x == 0 || (K::kTwoRings && threadIdx.x == 64)) {
        // The K/V loaders: lane 0 of warp 0 (two rings: ring 0's), and with two rings lane 0 of warp 2 (ring 1's), each
        // walking its own ring's schedule, so a ring whose warpgroups are ahead never waits behind the other ring's wait
        // for a free slot (one thread interleaving both rings was 1-2% slower: perf-log v40).
        [[maybe_unused]] const int ring = K::kTwoRings ? threadIdx.x / 64 : 0;
        int it = 0;  // position in this thread's K/V ring, continued across tiles
        // The first K/V loads wait for the first schedule, so their descriptors can be fetched meanwhile. (The early start
        // -- this, the first Q at once, a schedule's list loaded with its count, the tile atomic's result read after the
        // build -- measured 2-3% faster at d128 4k s = 0.1, 1% at d64, the same from 8k on: perf-log v40.)
        prefetch_tensormap(&args.tk);
        prefetch_tensormap(&args.tv);
        [[maybe_unused]] const long long t_prod0 = K::kProfile ? clock64() : 0;
        for (int tile_iter = 0;; ++tile_iter) {
          const int slot = tile_iter & 1;
          mbar_wait(tile_full(slot), (tile_iter >> 1) & 1);
          const int x = tile_ids[slot];
          if (x >= args.num_tiles) {
            if constexpr (K::kProfile)
              if (threadIdx.x == 0) Prof{args.profile, 0}.add(Prof::kPerWg * K::kConsumers + Prof::kProdTotal, clock64() - t_prod0);
            break;
          }
          // (Traits::kLoaderMhb: the scheduler's decode, read before this thread's sched_empty arrive below.)
          const Tile tile = K::kLoaderMhb ? Tile(tile_mhb[slot][0], tile_mhb[slot][2], tile_mhb[slot][1]) : Tile(args, x);
          const int q_begin = tile.m_block * kBlockM - args.q_shift;  // (two rings: not used; m_block is ring_tile's code)
          const int h_kv = tile.h / p.head_ratio;
          // V_j trails K_j by one block, as in the dense producer below (see there why).
          if constexpr (K::kTwoRings) {
            auto load_ring = [&](bool v, int n, int at) {  // (this ring's slots from ring * kStages on)
              const int sl = K::ring_slot(ring, at);
              const uint32_t ring0 = ring * kStages * K::kKVBytes;
              if (v) load_kv(&args.tv, args.v_pos, v_smem0 + ring0, v_full(sl), v_empty(sl), n, at, h_kv, tile.b);
              else load_kv(&args.tk, args.k_pos, k_smem0 + ring0, k_full(sl), k_empty(sl), n, at, h_kv, tile.b);
            };
            // This thread's ring's schedule, read directly (not through KeyBlocks: the producer has 32 registers here).
            const int32_t* sr = sched_base + (slot * 2 + ring) * args.sched_stride;
            const int c = sr[0];
            for (int j = 0; j < c; ++j) {
              load_ring(false, sr[1 + j], it + j);
              if (j > 0) load_ring(true, sr[j], it + j - 1);
            }
            const int last = c > 0 ? sr[c] : -1;
            mbar_arrive(sched_empty(slot));  // the schedule is read
            if (last >= 0) load_ring(true, last, it + c - 1);
            it += c;
          } else {
            KeyBlocks<kBlockN, true> blocks(p, max(q_begin, 0), min(q_begin + kBlockM, p.seqlen_q), sched_base + slot * args.sched_stride);
            int v_pending = -1, v_at = 0;
            for (int n = blocks.next(); n >= 0; n = blocks.next(), ++it) {
              load_kv(&args.tk, args.k_pos, k_smem0, k_full(it % kStages), k_empty(it % kStages), n, it, h_kv, tile.b);
              if (v_pending >= 0) load_kv(&args.tv, args.v_pos, v_smem0, v_full(v_at % kStages), v_empty(v_at % kStages), v_pending, v_at, h_kv, tile.b);
              v_pending = n;
              v_at = it;
            }
            mbar_arrive(sched_empty(slot));  // the schedule is read
            if (v_pending >= 0) load_kv(&args.tv, args.v_pos, v_smem0, v_full(v_at % kStages), v_empty(v_at % kStages), v_pending, v_at, h_kv, tile.b);
          }
        }
      }
    } else {
      // Dense and window masks: thread 0 alone takes the tiles (static order, or the counter for causal-like
      // masks) and issues every TMA load and its barrier operations (measured faster at d64 than the
      // whole warp).
      if (threadIdx.x == 0) {
        int it = 0;  // position in the K/V ring, continued across tiles
        [[maybe_unused]] const long long t_prod0 = K::kProfile ? clock64() : 0;
        // A tile's start: once its Q buffer is free, its index to the consumers (through the Q slot's tile_full), then
        // Q_i by TMA; no tile left: the end marker in its place, as if it were a tile.
        // (x: a work item's code, Work.)
        auto start_tile = [&](int tile_iter, int x) {
          const int q_slot = tile_iter % K::kQStages;
          wait_q_slot(tile_iter);
          tile_ids[q_slot] = x;
          if constexpr (K::kTileInSmem)  // (d64's three warpgroups: Traits::kTileInSmem)
            if (is_work<false>(args, x)) {
              const Tile tile(args, x);
              tile_mhb[q_slot][0] = tile.m_block, tile_mhb[q_slot][1] = tile.h, tile_mhb[q_slot][2] = tile.b;
            }
          mbar_arrive(tile_full(q_slot));
          if (is_work<K::kTailSplit>(args, x)) {
            const Tile tile(args, decode_work<K::kTailSplit>(args, tail_plan, x).x);
            load_q(tile_iter, tile.m_block * kBlockM - args.q_shift, tile.h, tile.b);
          }
        };
        // The first tile of either order (a split tail needs more tiles than CTAs), or a pair's secondary's first piece.
        int x = int(blockIdx.x);
        if constexpr (K::kPdlSecondary && K::kTailSplit)
          if (args.tail.pieces_only) x = static_item<true>(args, tail_plan, 0);
        start_tile(0, x);
        for (int tile_iter = 0; is_work<K::kTailSplit>(args, x); ++tile_iter) {
          const Work w = decode_work<K::kTailSplit>(args, tail_plan, x);
          const Tile tile(args, w.x);
          const int q_begin = tile.m_block * kBlockM - args.q_shift;  // < 0 in the first tile when shifted
          const int h_kv = tile.h / p.head_ratio;
          KeyBlocks<kBlockN, false, false, K::kUpward> blocks(p, max(q_begin, 0), min(q_begin + kBlockM, p.seqlen_q), nullptr,
                                                             K::kOStageInRing);
          if (w.slot >= 0) blocks.clip(w.n_begin, w.n_end);
          // The next tile, asked for now so the atomic's latency hides behind this tile's K/V loads. The dynamic order
          // (take_claim): a CTA's second tile is the static order's (tile_of(1), round 1 backwards: the longest first
          // tiles meet the shortest second ones), and its takes start at its second tile, once a consumer thread has
          // claimed the word for the launch (`claimed`, long done by then), numbering the tiles from 2 x gridDim.x.
          const int next = args.tile_counter == nullptr ? static_item<K::kTailSplit>(args, tail_plan, tile_iter + 1)
                           : tile_iter == 0             ? tile_of(1)
                                                        : (mbar_wait(claimed, 0), 2 * int(gridDim.x) + int(static_cast<uint32_t>(atomicAdd(args.tile_counter, 1ull))));
          // V_j is consumed one turn after K_j (P_j V_j is issued with S_{j+1}), so V loads trail K loads by
          // one block: K_{j+1} never waits behind V_j's slot.
          auto load_v = [&](int n, int at) {
            load_kv(&args.tv, args.v_pos, v_smem0, v_full(at % kStages), v_empty(at % kStages), n, at, h_kv, tile.b);
          };
          int v_pending = -1, v_at = 0, j = 0;
          for (int n = blocks.next(); n >= 0; n = blocks.next(), ++it, ++j) {
            load_kv(&args.tk, args.k_pos, k_smem0, k_full(it % kStages), k_empty(it % kStages), n, it, h_kv, tile.b);
            if (v_pending >= 0) {
              load_v(v_pending, v_at);
              if constexpr (K::kOStageInRing) {
                // Block j-1 was not the tile's last: its slots' extra arrivals (Traits::kOStageInRing), each after this
                // thread's own wait for the slot's previous phase, so they count toward block j-1's.
                mbar_arrive(k_empty(v_at % kStages));
                mbar_arrive(v_empty(v_at % kStages));
              }
            }
            v_pending = n;
            v_at = it;
            if (j == kQAhead) start_tile(tile_iter + 1, next);
          }
          if (v_pending >= 0) load_v(v_pending, v_at);
          if (j <= kQAhead || kQAhead < 0) start_tile(tile_iter + 1, next);  // (not started in the loop)
          // The launch's last take (relative index num_tiles - gridDim.x - 1) resets the word (take_claim).
          if (args.tile_counter != nullptr && next == args.num_tiles + int(gridDim.x) - 1) atomicExch(args.tile_counter, 0ull);
          x = next;
        }
        if constexpr (K::kProfile) Prof{args.profile, 0}.add(Prof::kPerWg * K::kConsumers + Prof::kProdTotal, clock64() - t_prod0);
      }
    }
  } else {
    // ================================ consumers ================================
    // Dense, dynamic order: the word claimed for this launch (take_claim) by a consumer thread, before its warpgroup
    // takes its registers (the claim's 64-bit values inside the consumers' or the producer's register budget made
    // ptxas spill: the producer's 24, the d128 192-key consumers' 240), and before the CTA's first take, if it takes at
    // all: its second tile (tile_of(1), static) exists. (Its warpgroup waits for its first Q and K meanwhile.)
    if constexpr (!K::kSparse)
      if (threadIdx.x == 128 && args.tile_counter != nullptr && tile_of(1) < args.num_tiles) {
        take_claim(args);
        mbar_arrive(claimed);
      }
    setmaxnreg_inc<K::kConsumerRegs>();
    const int wg = warpgroup - 1;  // 0 or 1: rows [64*wg, 64*wg + 64) of the query tile
    const int tid = threadIdx.x % 128, warp = tid / 32, lane = tid % 32;
    const int g = lane / 4, t = lane % 4;  // this thread holds rows g and g+8 of its warp's 16, columns 2t, 2t+1
    const int row_in_wg = warp * 16 + g;   // + 8*r
    const float scale_log2 = p.scale_log2;
    // Ping-pong: named barrier 1 + wg is "wg may issue its matrix products". Warpgroup 0 goes first.
    // Turns go round the warpgroups: wg syncs on barrier 1 + wg and hands over on the next one's.
    if constexpr (K::kPingPong)
      if (wg == K::kConsumers - 1) named_arrive(1, 256);
    // A turn at the tensor cores.
    auto take_turn = [&]() {
      if constexpr (K::kPingPong) named_sync(1 + wg, 256);
    };
    auto pass_turn = [&]() {
      if constexpr (K::kPingPong) named_arrive(1 + (wg + 1) % K::kConsumers, 256);
    };
    // Turns at the SFU (Traits::kSfuTurns): barrier 9 + wg is "wg may run its exponentials"; warpgroup 0 goes first.
    if constexpr (K::kSfuTurns)
      if (wg == K::kConsumers - 1) named_arrive(9, 256);

    int it = 0, tile_iter = 0;
    // Two rings: this tile's ring (with rotating roles, dev: warpgroup 1 always in the pair, 0 and 2 changing rings from
    // tile to tile; with fixed roles, production, 0 and 1 always ring 0 and 2 ring 1). Its number
    // also rides in bit 30 of `it` (slot_of, phase_of), so the loop's live values stay those of one ring. (With
    // kFixedRings, production, each warpgroup keeps to one ring and the tile's rows are dealt to them: perf-log v49.)
    int ring = 0;
    // The 64-row group of the tile this warpgroup computes: its own index, but with fixed rings (kFixedRings) the single's
    // group for warpgroup 2 and the pair's two for 0 and 1.
    int rg = wg;
    auto slot_of = [](int i) {
      if constexpr (K::kTwoRings) return K::ring_slot(i >> 30, i & 0x3fffffff);
      else return i % kStages;
    };
    auto phase_of = [](int i) -> uint32_t {
      if constexpr (K::kTwoRings) return ((i & 0x3fffffff) / kStages) & 1;
      else return (i / kStages) & 1;
    };
    // O staged in Q with two Q buffers (d128 block-sparse): the previous tile's Q buffer is released in this
    // tile's prologue, once its O store has surely read it, instead of thread 0 waiting for that read at the
    // end of the epilogue (which held its warpgroup's next turn; the next Q is in the other buffer anyway).
    constexpr bool kDeferQRelease = K::kOStageInQ && K::kQStages == 2;
    // Traits::kDeferStore where it applies: a staging tile of the warpgroup's own, no pieces of a split tile. (O staged in
    // Q, d128 block-sparse, deferred with its Q buffer's release after the next tile's first softmax: 4-6% slower, s55-8,
    // commit 70af399.)
    constexpr bool kDeferO = K::kDeferStore && K::kTmaStoreO && !K::kOStageInQ && !K::kOStageInRing && !K::kTailSplit &&
                             !K::kDevNoEpilogue;
    // kDeferO: the staged tile's store, pending until flush_o (its rows' first row, head and batch; row -1: a box wholly
    // before row 0, -2: nothing staged).
    [[maybe_unused]] int o_pend_row = -2, o_h = 0, o_b = 0;
    [[maybe_unused]] const uint32_t o_stage_own = o_stage0 + wg * 64 * K::kHeadDim * 2;
    // Thread 0's TMA store of the warpgroup's 64 staged rows from query row `row`, pages `page` bytes apart, as one group.
    [[maybe_unused]] auto store_o_rows = [&](uint32_t stage, uint32_t page, int row, int h, int b) {
      int c[4];
#pragma unroll
      for (int pg = 0; pg < K::kPages; ++pg) {
        tma_coords(c, args.o_pos, pg * 64, row, h, b);
        tma_store_4d(&args.to, stage + pg * page, c[0], c[1], c[2], c[3]);
      }
      wg::bulk_commit();
    };
    auto flush_o = [&]() {
      if constexpr (kDeferO) {
        if (o_pend_row == -2) return;  // nothing staged since the last flush
        // Every thread's staging stores made visible to the TMA unit, then thread 0 stores the 64 rows (o_pend_row -1: the
        // box lay wholly before row 0, nothing to store).
        wg::fence_proxy_async();
        named_sync(4 + wg, 128);
        if (tid == 0 && o_pend_row != -1) store_o_rows(o_stage_own, 64 * 128, o_pend_row, o_h, o_b);
        o_pend_row = -2;
      }
    };
    static_assert(!K::kDevNoEpilogue || (!K::kOStageInQ && !K::kOStageInRing), "the probe keeps no staging releases");
    static_assert(!K::kDevNoSoftmax0 || !K::kSfuTurns, "the probe would leave an SFU turn untaken");
    bool q_release_pending = false;
    Prof prof{K::kProfile ? args.profile + Prof::kPerWg * wg : nullptr, K::kProfile ? clock64() : 0};
    // The loop's steps, timed with the 32-bit clock into registers and added once per tile (an atomic per step
    // would be most of what it measures).
    [[maybe_unused]] uint32_t step_mark = 0, step_sum[7] = {}, step_k = 0;
    auto step = [&](int i) {
      if constexpr (K::kProfile) {
        const uint32_t now = static_cast<uint32_t>(clock());
        step_sum[i - Prof::kStepWaitKV] += now - step_mark;
        step_mark = now;
      }
    };
    auto lap = [&](int phase) {
      if constexpr (K::kProfile)
        if (tid == 0) prof.lap(phase);
    };
    for (;; ++tile_iter) {
      const int q_slot = tile_iter % K::kQStages;
      const uint32_t q_phase = (tile_iter / K::kQStages) & 1;
      const int t_slot = tile_iter % kTileSlots;
      [[maybe_unused]] const long long tf0 = K::kProfile ? clock64() : 0;
      mbar_wait(tile_full(t_slot), (tile_iter / kTileSlots) & 1);  // the tile's index (and block-sparse schedule) are written
      if constexpr (K::kProfile)
        if (tid == 0 && tile_iter > 0) prof.add(Prof::kWaitTileBar, clock64() - tf0);
      const int x = tile_ids[t_slot];  // a work item's code (Work)
      [[maybe_unused]] int mhb[3] = {0, 0, 0};
      if constexpr (K::kTileInSmem) mhb[0] = tile_mhb[t_slot][0], mhb[1] = tile_mhb[t_slot][1], mhb[2] = tile_mhb[t_slot][2];
      if (!is_work<K::kTailSplit>(args, x)) break;
      lap(tile_iter == 0 ? Prof::kWaitTileFirst : Prof::kWaitTile);
      [[maybe_unused]] const long long q_wait0 = K::kProfile ? clock64() : 0;
      mbar_wait(q_full(q_slot), q_phase);  // Q_i has landed
      if constexpr (K::kProfile)
        if (tid == 0) {
          // From the load's issue to the end of this wait: its latency where the wait waited (more than a probe's
          // round trip), else how early it had landed.
          const long long now = clock64(), since_issue = now - q_issued[q_slot];
          unsigned long long* pp = args.profile + Prof::kPerWg * K::kConsumers;
          if (now - q_wait0 > 256) {
            atomicAdd(pp + Prof::kQLandedSum, static_cast<unsigned long long>(since_issue));
            atomicAdd(pp + Prof::kQLandedCount, 1ull);
          }
          atomicAdd(pp + Prof::kQReadySum, static_cast<unsigned long long>(since_issue));
        }
      lap(Prof::kWaitQ);
      const Work work = decode_work<K::kTailSplit>(args, tail_plan, x);
      if (K::kTailSplit && tid == 0) wg_code[wg] = x;
      const Tile tile = K::kTileInSmem ? Tile(mhb[0], mhb[2], mhb[1]) : Tile(args, work.x);
      // The tile's rows [q_begin, q_begin + kBlockM), of which [max(q_begin, 0), q_end) are real: rows past
      // seqlen_q in the last tile, or rows before 0 in the first one when the tiles are shifted
      // (args.q_shift). Q's TMA box reads zeros there and O's TMA store drops them. (No q_first variable:
      // one more value live across the loop made d256's consumers spill, 24 -> 52 bytes.)
      int q_begin = tile.m_block * kBlockM - args.q_shift;
      int q_end = min(q_begin + kBlockM, p.seqlen_q);
      if constexpr (K::kTwoRings) {
        ring_rows(p, tile.m_block, q_begin, q_end);
        const int single = single_wg<K::kSingleShift>(p, q_begin);
        if constexpr (K::kFixedRings) {
          ring = wg == 2 ? 1 : 0;
          rg = wg == 2 ? single : single == 0 ? wg + 1 : wg;
        } else {
          ring = wg == single ? 1 : 0;
        }
        it = ring_pos[t_slot][ring] | ring << 30;
        if constexpr (K::kUniformIt) {  // the same in every lane, said so to ptxas by a broadcast (perf-log v73)
          it = __shfl_sync(0xffffffffu, it, 0);
          ring = __shfl_sync(0xffffffffu, ring, 0);
          rg = __shfl_sync(0xffffffffu, rg, 0);
        }
      }
      // kRingTurns: the empty turns this warpgroup owes after its epilogue (its list against the other ring's: both
      // lengths read before the schedule is released), and whether the first is a product turn alone (an empty list:
      // no block's turns at all).
      [[maybe_unused]] int owed_turns = 0;
      [[maybe_unused]] bool owed_lone = false;
      if constexpr (K::kRingTurns) {
        const int32_t* s0 = sched_base + (tile_iter & 1) * K::kRings * args.sched_stride;
        const int c0 = s0[0], c1 = s0[args.sched_stride];
        const int c_own = ring == 0 ? c0 : c1, c_max = max(c0, c1);
        owed_turns = c_max - c_own;
        owed_lone = c_own == 0 && c_max > 0;
      }
      KeyBlocks<kBlockN, K::kSparse, K::kTwoRings, K::kUpward> blocks(p, max(q_begin, 0), q_end,
                                            sched_base + ((tile_iter & 1) * K::kRings + ring) * args.sched_stride,
                                            K::kOStageInRing);
      if (work.slot >= 0) blocks.clip(work.n_begin, work.n_end);
      // Traits::kUpward: a warpgroup whose rows see none of the walk's last block (the diagonal one; at d256 causal 1k
      // warpgroup 0 in 7 of a head's 8 tiles) leaves it out, kSkipDiag's idea at the other end: its walk stops a block
      // early, and after the drain it hands the block's slots back and takes the turn its last P V would have taken (its
      // S_j took the turn of the left-out block's S with P_{j-1} V_{j-1}, as the drain's). Under masks with a right edge
      // only the first warpgroup's rows can end a block earlier than the second's.
      // The key end (exclusive) this warpgroup's rows can see at most: their last row's right edge.
      [[maybe_unused]] auto wg_key_end = [&]() {
        const int64_t last_row = min(q_begin + rg * 64 + 63, q_end - 1);
        const int64_t hi = p.window_right >= 0 ? last_row + p.diag_offset + p.window_right + 1 : p.seqlen_k;
        return min(hi, int64_t(p.seqlen_k));
      };
      [[maybe_unused]] bool skip_top = false;
      if constexpr (K::kUpward && !K::kSparse) {
        const int64_t key_end = wg_key_end();
        if (blocks.cursor > blocks.n_lo && key_end <= int64_t(blocks.cursor) * kBlockN) {
          skip_top = true;
          blocks.cursor -= 1;
        }
      }

      float acc_o[K::kORegs];
#pragma unroll
      for (int i = 0; i < K::kORegs; ++i) acc_o[i] = 0.f;
      float row_max[2] = {kNegInf, kNegInf}, row_sum[2] = {0.f, 0.f};
      float acc_s[K::kSRegs];
      uint32_t p_frag[kBlockN / 16][4];  // P_{j-1} in the input dtype, the A operand of the next P V

      const uint32_t q_wg = q_smem + q_slot * K::kQBytes + rg * 64 * 128;  // this warpgroup's 64 rows of page 0
      // S = Q K_j^T: head_dim / 16 k-steps; step kk is 32 bytes into the 128-byte rows of page kk / 4.
      auto issue_s = [&](int s) {
        const uint32_t k_s = k_smem0 + s * K::kKVBytes;
        [[maybe_unused]] const uint64_t da0 = wg::desc(q_wg, 16), db0 = wg::desc(k_s, 16);  // kDescPlus
#pragma unroll
        for (int kk = 0; kk < K::kHeadDim / 16; ++kk)
        {
          const uint32_t oa = (kk / 4) * kBlockM * 128 + (kk % 4) * 32, ob = (kk / 4) * kBlockN * 128 + (kk % 4) * 32;
          const uint64_t da = K::kDescPlus ? wg::desc_plus(da0, oa) : wg::desc(q_wg + oa, 16);
          const uint64_t db = K::kDescPlus ? wg::desc_plus(db0, ob) : wg::desc(k_s + ob, 16);
          if (kk == 0) wg::SS<kBlockN, 0, 0, K::kDType>::zero(acc_s, da, db);
          else wg::SS<kBlockN, 0, 0, K::kDType>::mma(acc_s, da, db, 1);
        }
        wg::commit();
      };
      // O += P V_j: kBlockN / 16 k-steps; step kc is 16 rows = 2048 bytes into every page of V, pages
      // (the N direction) kBlockN * 128 bytes apart.
      auto issue_pv = [&](int s) {
        const uint32_t v_s = v_smem0 + s * K::kKVBytes;
        [[maybe_unused]] const uint64_t dv0 = wg::desc(v_s, kBlockN * 128);  // kDescPlus
#pragma unroll
        for (int kc = 0; kc < kBlockN / 16; ++kc)
          wg::RS<K::kHeadDim, 1, K::kDType>::mma(
              acc_o, p_frag[kc], K::kDescPlus ? wg::desc_plus(dv0, kc * 2048) : wg::desc(v_s + kc * 2048, kBlockN * 128), 1);
        wg::commit();
      };
      // Element mask, only where the block crosses the sequence end or a window edge. (Deciding that per
      // warpgroup's 64 rows instead made d64's dense path 4-8% slower: perf-log v12, commit 2beb5a7.)
      // (cols: the block's first cols columns only, the others unused -- kHalfDiag's prologue; likewise softmax and pack_p.
      // A constant at every call, so each inlined copy has its own trip counts.)
      auto mask = [&](float (&sv)[K::kSRegs], int n, int cols) {
        if (!blocks.needs_mask(n)) return;
        const int64_t col0 = int64_t(n) * kBlockN + 2 * t;
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int64_t diag = q_begin + rg * 64 + row_in_wg + 8 * r + p.diag_offset;
          const int64_t lo = p.window_left >= 0 ? diag - p.window_left : 0;
          int64_t hi = p.window_right >= 0 ? diag + p.window_right + 1 : p.seqlen_k;
          hi = hi > p.seqlen_k ? p.seqlen_k : hi;
          const int lo_rel = int(max(min(lo - col0, int64_t(kBlockN)), int64_t(-1)));
          const int hi_rel = int(max(min(hi - col0, int64_t(kBlockN)), int64_t(-1)));
          // With no left window edge (causal-like masks, the sequence end) only the right compare can cut: half the
          // instructions per element (perf-log v28: causal 1k +3-4% at d64, +2.5% at d128).
          if (p.window_left < 0) {
#pragma unroll
            for (int i = 0; i < cols / 8; ++i)
#pragma unroll
              for (int e = 0; e < 2; ++e)
                if (8 * i + e >= hi_rel) sv[4 * i + 2 * r + e] = kNegInf;
          } else {
#pragma unroll
            for (int i = 0; i < cols / 8; ++i)
#pragma unroll
              for (int e = 0; e < 2; ++e) {
                const int col = 8 * i + e;
                if (col < lo_rel || col >= hi_rel) sv[4 * i + 2 * r + e] = kNegInf;
              }
          }
        }
      };
      // Online softmax of S_j (base 2, the scale folded into one FFMA); a row lives in the 4 lanes of a
      // quad. Overwrites sv with P_j (fp32) and writes the O correction exp2((m - m') * scale_log2) to corr; returns whether
      // any row of the warp needs it (past the first blocks the running max rarely moves, and when it moved
      // in no row the correction is exactly 1: the O rescale is skipped, bit for bit the same).
      auto softmax = [&](float (&sv)[K::kSRegs], bool first, float (&corr)[2], int cols) {
        float max_new[2];
        bool max_moved = false;
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          float m = kNegInf;
#pragma unroll
          for (int i = 0; i < cols / 8; ++i) m = fmaxf(m, fmaxf(sv[4 * i + 2 * r], sv[4 * i + 2 * r + 1]));
          m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
          m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
          max_new[r] = fmaxf(row_max[r], m);
          max_moved |= max_new[r] != row_max[r];
        }
        const bool rescale = !first && (K::kDevAlwaysRescale || __any_sync(0xffffffffu, max_moved));
        // kSfuTurns: this warpgroup's turn at the SFU; `zero` (0, opaque to the compiler) holds its exps behind the wait.
        float zero = 0.f;
        if constexpr (K::kSfuTurns) asm volatile("bar.sync %1, 256;\n\tmov.b32 %0, 0;\n" : "=f"(zero) : "r"(9 + wg) : "memory");
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          // A row with nothing visible yet keeps max -inf: subtract 0 so exp2(-inf - -inf) is never NaN.
          float max_scaled = max_new[r] == kNegInf ? 0.f : max_new[r] * scale_log2;
          if constexpr (K::kSfuTurns) max_scaled += zero;
          float sum = 0.f;
#pragma unroll
          for (int i = 0; i < cols / 8; ++i) {
            constexpr int kEvery = K::kPolyEvery > 0 ? K::kPolyEvery : 1;  // (no % by zero when off)
            const bool fma_pipe = K::kPolyEvery > 0 && i % kEvery == kEvery - 1;
            const float x0 = sv[4 * i + 2 * r] * scale_log2 - max_scaled;
            const float x1 = sv[4 * i + 2 * r + 1] * scale_log2 - max_scaled;
            const float p0 = fma_pipe ? exp2_fma(x0) : exp2f(x0);
            const float p1 = fma_pipe ? exp2_fma(x1) : exp2f(x1);
            sum += p0 + p1;
            sv[4 * i + 2 * r] = p0;
            sv[4 * i + 2 * r + 1] = p1;
          }
          corr[r] = rescale ? exp2f(row_max[r] * scale_log2 - max_scaled) : 1.f;
          row_sum[r] = row_sum[r] * corr[r] + sum;
          row_max[r] = max_new[r];
        }
        // The hand-over waits for both rows' sums, i.e. for every exp of the block.
        if constexpr (K::kSfuTurns)
          asm volatile("bar.arrive %0, 256;\n" ::"r"(9 + (wg + 1) % K::kConsumers), "f"(row_sum[0]), "f"(row_sum[1]) : "memory");
        return rescale;
      };

      // P in the input dtype: the accumulator of n8 tiles 2c and 2c+1 is the A fragment of k16 step c,
      // {row g cols 2t | row g+8 cols 2t | row g cols 8+2t | row g+8 cols 8+2t}.
      auto pack_p = [&](const float (&sv)[K::kSRegs], uint32_t (&pf)[kBlockN / 16][4], int cols) {
#pragma unroll
        for (int i = 0; i < cols / 8; ++i)
#pragma unroll
          for (int r = 0; r < 2; ++r) pf[i / 2][(i % 2) * 2 + r] = pack2<K::kDType>(sv[4 * i + 2 * r], sv[4 * i + 2 * r + 1]);
#pragma unroll
        for (int i = cols / 8; i < kBlockN / 8; ++i)  // (the columns not written above are zeros)
#pragma unroll
          for (int r = 0; r < 2; ++r) pf[i / 2][(i % 2) * 2 + r] = 0u;
      };
      // Q_i's buffer and the slot's tile index (and schedule) back to the producer. Every thread arrives
      // (q_empty and sched_empty count them all), so each thread's own loads are ordered before the
      // producer's next stores there -- racecheck does not follow them through a __syncwarp and one lane's
      // arrive.
      auto release_q = [&]() { mbar_arrive(q_empty(q_slot)); };
      auto release_sched = [&]() {
        if constexpr (K::kSparse) mbar_arrive(sched_empty(t_slot));
      };
      auto release_prev_q = [&]() {  // kDeferQRelease: the previous tile's buffer, once its store has read it
        if constexpr (kDeferQRelease)
          if (q_release_pending) {
            if (tid == 0) wg::bulk_wait_read();
            mbar_arrive(q_empty(q_slot ^ 1));
            q_release_pending = false;
          }
      };
      [[maybe_unused]] int s_last = 0;  // O staged in the ring: the last block's slot
      int n = blocks.next();
      if (n >= 0) {
        // kHalfDiag: how many of this first block's (the diagonal one's) columns the rows can see at most -- the tile's
        // (1) or this warpgroup's 64 rows' (2): S_0's mask, softmax and pack then take none, half or all of them.
        // The columns of block nb this warpgroup's rows can see at most.
        [[maybe_unused]] auto wg_vis = [&](int nb) {
          return int(max(min(wg_key_end() - int64_t(nb) * kBlockN, int64_t(kBlockN)), int64_t(0)));
        };
        int vis = kBlockN;
        if constexpr (K::kHalfDiag == 1) vis = blocks.hi - n * kBlockN;
        if constexpr (K::kHalfDiag == 2 || K::kSkipDiag) vis = wg_vis(n);
        [[maybe_unused]] int skip_v = -1;  // kSkipDiag: the left-out block's V slot, handed back after S_0's issue
        [[maybe_unused]] uint32_t skip_v_phase = 0;
        if constexpr (K::kSkipDiag && !K::kSparse) {
          // Traits::kSkipDiag: none of block n is visible here, and the walk has a block after it.
          if (vis <= 0 && blocks.has_next()) {
            const int s0 = slot_of(it);
            const uint32_t ph0 = phase_of(it);
            // The slots go back only once their fill has landed: the full wait orders this warpgroup's arrivals after
            // the other's for the slot's previous fill (an empty barrier counts arrivals, not whose).
            mbar_wait(k_full(s0), ph0);
            __syncwarp();
            if (lane == 0) mbar_arrive(k_empty(s0));
            skip_v = s0, skip_v_phase = ph0;
            take_turn();  // the turn S_n would have taken
            pass_turn();
            if constexpr (K::kSfuTurns)  // and the SFU turn of its softmax
              asm volatile("bar.sync %0, 256;\n\tbar.arrive %1, 256;\n" ::"r"(9 + wg), "r"(9 + (wg + 1) % K::kConsumers)
                           : "memory");
            ++it;
            n = blocks.next();
            vis = wg_vis(n);
          }
        }
        // Prologue: S_0 and its softmax.
        int s_prev = slot_of(it);
        uint32_t phase_prev = phase_of(it);
        lap(Prof::kProSetup);
        mbar_wait(k_full(s_prev), phase_prev);
        lap(Prof::kProWaitK);
        take_turn();
        lap(Prof::kProTurn);
        wg::fence();
        issue_s(s_prev);
        pass_turn();
        release_prev_q();  // (while S_0 runs)
        flush_o();         // (kDeferO: the previous tile's O store, while S_0 runs)
        if constexpr (K::kSkipDiag)
          if (skip_v >= 0) {
            mbar_wait(v_full(skip_v), skip_v_phase);
            __syncwarp();
            if (lane == 0) mbar_arrive(v_empty(skip_v));
          }
        wg::wait<0>();
        wg::fence_regs(acc_s);
        __syncwarp();
        if (lane == 0) mbar_arrive(k_empty(s_prev));  // S_0 done: K_0's slot may be refilled
        if constexpr (K::kDevNoSoftmax0) {
          dev_keep_alive(acc_s, p.scale != 12345.f, q_smem);  // (probe) S_0 computed all the same
          pack_p(acc_s, p_frag, 0);                           // P_0 = 0
        } else {
          float corr[2];
          if (K::kHalfDiag && vis <= 0) {  // nothing visible: P_0 = 0, the row max stays -inf (the SFU turn still taken)
            softmax(acc_s, true, corr, 0);
            pack_p(acc_s, p_frag, 0);
          } else if (K::kHalfDiag && vis <= kBlockN / 2) {
            mask(acc_s, n, kBlockN / 2);
            softmax(acc_s, true, corr, kBlockN / 2);
            pack_p(acc_s, p_frag, kBlockN / 2);
          } else {
            mask(acc_s, n, kBlockN);
            softmax(acc_s, true, corr, kBlockN);
            pack_p(acc_s, p_frag, kBlockN);
          }
        }
        ++it;
        lap(Prof::kPrologue);
        [[maybe_unused]] const int it_first = it;
        // Steady state: issue S_j and P_{j-1} V_{j-1} in one turn of the tensor cores (O rescaled by P_{j-1}'s
        // correction between the two: kRescaleInTurn), then the softmax of S_j, then wait for P_{j-1} V_{j-1} and pack
        // P_j. (ptxas places the softmax after that wait unless a clock read pins it before (kPinSoftmax: the two-ring
        // kernel, v49, and the two-warpgroup dense kernels of <= 128-key blocks, v50), where it overlaps the P V. The
        // two-ring kernel, without turns, rescales O right after the wait.)
        if constexpr (K::kProfile) step_mark = static_cast<uint32_t>(clock());
        [[maybe_unused]] bool landed = false;  // kEarlyProbe: this block's K and V_{j-1} had landed at the last probe
        // kRescaleInTurn: the correction of P_{j-1}'s softmax, applied to O just before P_{j-1} V_{j-1} is issued.
        [[maybe_unused]] bool rescale_prev = false;
        [[maybe_unused]] float corr_prev[2] = {1.f, 1.f};
        auto rescale_o = [&](const float (&c)[2]) {
#pragma unroll
          for (int i = 0; i < K::kHeadDim / 8; ++i)
#pragma unroll
            for (int r = 0; r < 2; ++r) {
              acc_o[4 * i + 2 * r] *= c[r];
              acc_o[4 * i + 2 * r + 1] *= c[r];
            }
        };
        for (n = blocks.next(); n >= 0; n = blocks.next(), ++it) {
          const int s = slot_of(it);
          const uint32_t phase = phase_of(it);
          if constexpr (K::kProfile) {
            const uint32_t t0 = static_cast<uint32_t>(clock());
            mbar_wait(k_full(s), phase);
            step_k += static_cast<uint32_t>(clock()) - t0;
          }
          if (!(K::kEarlyProbe && landed)) mbar_wait2(k_full(s), phase, v_full(s_prev), phase_prev);  // K_j and V_{j-1} have landed
          step(Prof::kStepWaitKV);
          take_turn();
          step(Prof::kStepTurn);
          wg::fence();
          issue_s(s);
          if constexpr (K::kRescaleInTurn) {
            if (rescale_prev) rescale_o(corr_prev);
            wg::fence();  // O's registers were written since the last fence
          }
          issue_pv(s_prev);
          pass_turn();
          // The next block's K (the ring's next position: if this tile has no next block, the probe is not used) and V_j.
          if constexpr (K::kEarlyProbe) landed = mbar_test2(k_full(slot_of(it + 1)), phase_of(it + 1), v_full(s), phase);
          step(Prof::kStepIssue);
          wg::wait<1>();  // S_j is ready; P_{j-1} V_{j-1} may still run
          step(Prof::kStepWaitS);
          __syncwarp();
          if (lane == 0) mbar_arrive(k_empty(s));  // K_j's slot may be refilled
          // While P_{j-1} V_{j-1} is in flight: the softmax works on a copy of S and keeps P in fp32; the
          // bf16 packing waits for wait<0>. Writing the accumulator registers or packing P here made ptxas
          // serialise the wgmmas (C7513; perf-log).
          float sv[K::kSRegs];
#pragma unroll
          for (int i = 0; i < K::kSRegs; ++i) sv[i] = acc_s[i];
          mask(sv, n, kBlockN);
          float corr[2];
          const bool rescale = softmax(sv, false, corr, kBlockN);
          if constexpr (K::kPinSoftmax == 1) named_sync(4 + wg, 128);
          if constexpr (K::kPinSoftmax == 3) {
            const uint32_t now = static_cast<uint32_t>(clock());
            // Predicated rather than branched, so the read stays where it is in every lane.
            asm volatile("{\n.reg .pred p;\nsetp.eq.u32 p, %2, 0;\n@p st.shared.u32 [%0], %1;\n}\n" ::"r"(
                             static_cast<uint32_t>(__cvta_generic_to_shared(&pin_sink[threadIdx.x / 32]))),
                         "r"(now), "r"(lane));
          }
          step(Prof::kStepSoftmax);
          wg::wait<0>();
          step(Prof::kStepWaitPV);
          wg::fence_regs(acc_o);
          wg::fence_regs(p_frag);
          __syncwarp();
          if (lane == 0) mbar_arrive(v_empty(s_prev));  // this warp no longer reads V_{j-1}
          if constexpr (K::kRescaleInTurn) {
            rescale_prev = rescale;
            corr_prev[0] = corr[0], corr_prev[1] = corr[1];
          } else if (rescale) {
            rescale_o(corr);
          }
          pack_p(sv, p_frag, kBlockN);  // P_j, the A operand of the next turn's P V
          s_prev = s;
          phase_prev = phase;
          step(Prof::kStepTail);
        }
        // Every S of this tile is done, so Q_i (and the block-sparse schedule) are no longer read: release
        // them now, and the producer loads the next tile's Q while the last P V and the epilogue run
        // (with one Q buffer -- d128, d256 -- that load was otherwise exposed at every tile boundary).
        lap(Prof::kLoop);
        if constexpr (K::kProfile)
          if (tid == 0) {
            prof.add(Prof::kBlocks, it - it_first + 1);
            if (tile_iter == 0) prof.add(Prof::kBlocksFirst, it - it_first), prof.add(Prof::kStepWaitKVFirst, step_sum[0]);
            prof.add(Prof::kStepWaitK, step_k), step_k = 0;
            for (int i = 0; i < 7; ++i) prof.add(Prof::kStepWaitKV + i, step_sum[i]), step_sum[i] = 0;
          }
        if constexpr (!K::kOStageInQ) release_q();
        release_sched();
        // Drain: the last P V.
        if constexpr (K::kRescaleInTurn)
          if (rescale_prev) rescale_o(corr_prev);
        mbar_wait(v_full(s_prev), phase_prev);
        take_turn();
        wg::fence();
        issue_pv(s_prev);
        pass_turn();
        wg::wait<0>();
        wg::fence_regs(acc_o);
        wg::fence_regs(p_frag);
        __syncwarp();
        if (lane == 0) mbar_arrive(v_empty(s_prev));
        if constexpr (K::kOStageInRing) {
          // Warpgroup 0 stages its O in V_last's slot: warpgroup 1 tells it when its last P V no longer reads it. (K_last's
          // needs no such word: warpgroup 0 passed the turn on to warpgroup 1's drain after its last S was done.)
          if (wg == 1) named_arrive(7, 256);
          s_last = s_prev;
        }
        if constexpr (K::kUpward && !K::kSparse)
          if (skip_top) {
            // The left-out block (ring position it): its K and V slots back once filled, and its P V's turn, empty.
            const int s = slot_of(it);
            const uint32_t ph = phase_of(it);
            mbar_wait(k_full(s), ph);
            __syncwarp();
            if (lane == 0) mbar_arrive(k_empty(s));
            mbar_wait(v_full(s), ph);
            __syncwarp();
            if (lane == 0) mbar_arrive(v_empty(s));
            take_turn();
            pass_turn();
            if constexpr (K::kOStageInRing) s_last = s;  // the tile's last block: where this warpgroup stages its O
            ++it;
          }
        lap(Prof::kDrain);
      } else {
        if constexpr (!K::kOStageInQ) release_q();  // no key block: nothing read Q_i
        release_sched();
        release_prev_q();
        flush_o();
      }

      // Two rings: a warpgroup that changes rings (0 and 2 do at every tile) must not wait on its new ring's full barriers
      // while that ring's previous users still hold blocks there. An mbarrier wait tells phases apart by parity only, so
      // a warpgroup two or more phases ahead of a slot would take a stale phase for its block (the first form, without
      // this barrier, hung at s = 0.25 in run s21-1). So every warpgroup finishes this tile's blocks -- its last P V,
      // every K and V released -- before any starts the next tile's: then each slot is at most one phase behind.
      // (Barrier 8: 1-3 are the one-ring kernels' turns, 4-6 the staging tiles, 7 d256's O in the ring. Sharing id 1
      // with a 256-thread turn, a dev variant faulted: illegal instruction, run s21-6.)
      if constexpr (K::kTwoRings && !K::kFixedRings) named_sync(8, 384);

      // A piece of a split tile (shapes.h, TailSplit): this warpgroup's partial O, row max and row sum go to the piece's
      // slot; the tile's last piece to finish (per warpgroup: each counts its own 64 rows) merges every piece's partial
      // into its registers and goes on to the epilogue as a whole tile would, the others skip writing O and LSE.
      // Written before the count (each thread's stores, a fence, the warpgroup's barrier, then thread 0's atomic), read
      // after it (the atomic, the barrier, a fence, then the loads, from L2: ld.global.cg), as CUDA's threadfence
      // reduction does. The slots hold thread tid's floats at float4 j in [j][tid] order, so the accesses coalesce.
      bool write_out = true;
      const int x_end = K::kTailSplit ? *static_cast<volatile int*>(&wg_code[wg]) : 0;  // x, read back
      if (K::kTailSplit && is_piece(args, x_end)) {
        const Work w = decode_work<K::kTailSplit>(args, tail_plan, x_end);
        constexpr int kF4 = K::kORegs / 4 + 1;  // float4s per thread: O, then (m_0, m_1, l_0, l_1)
        auto slot_at = [&](int slot) {
          return reinterpret_cast<float4*>(args.tail_part) + (int64_t(slot) * K::kConsumers + wg) * kF4 * 128 + tid;
        };
        {
          float4* dst = slot_at(w.slot);
#pragma unroll
          for (int j = 0; j < K::kORegs / 4; ++j)
            __stcg(dst + j * 128, make_float4(acc_o[4 * j], acc_o[4 * j + 1], acc_o[4 * j + 2], acc_o[4 * j + 3]));
          __stcg(dst + (kF4 - 1) * 128, make_float4(row_max[0], row_max[1], row_sum[0], row_sum[1]));
        }
        __threadfence();
        named_sync(4 + wg, 128);
        const int g = int(gridDim.x), t = w.x - args.tail.whole;
        const int c_first = args.tail.cta_of(int64_t(t) * args.tail.blocks, g);
        const int c_last = args.tail.cta_of(int64_t(t + 1) * args.tail.blocks - 1, g);
        if (tid == 0) {
          // A pair's secondary (Rows::pieces): the counts were zeroed ahead of the primary; waiting for the primary's
          // end orders that before this count whatever PDL lets overlap. (At once when the primary has ended, or when
          // the launch had no PDL.)
          if constexpr (K::kPdlSecondary) asm volatile("griddepcontrol.wait;\n" ::: "memory");
          tail_last[wg] = atomicAdd(args.tail_count + t * K::kConsumers + wg, 1) == c_last - c_first;
        }
        named_sync(4 + wg, 128);
        write_out = tail_last[wg] != 0;
        if (write_out) {
          // Every piece's partial, this one's too (read back), merged in CTA order: the result does not depend on which
          // piece finished last. From O = 0, m = -inf, l = 0 the first merge is exact (factors 0 and 1).
          __threadfence();
#pragma unroll
          for (int i = 0; i < K::kORegs; ++i) acc_o[i] = 0.f;
          row_max[0] = row_max[1] = kNegInf;
          row_sum[0] = row_sum[1] = 0.f;
          for (int c = c_first; c <= c_last; ++c) {
            const float4* src = slot_at(tail_slot(args.tail, g, c, t));
            const float4 ml = __ldcg(src + (kF4 - 1) * 128);
            const float m_other[2] = {ml.x, ml.y}, l_other[2] = {ml.z, ml.w};
            float a[2], b[2];  // the two partials' factors to the common max, as the online softmax's correction
#pragma unroll
            for (int r = 0; r < 2; ++r) {
              const float m = fmaxf(row_max[r], m_other[r]);
              const float m_scaled = m == kNegInf ? 0.f : m * scale_log2;
              a[r] = exp2f(row_max[r] * scale_log2 - m_scaled);
              b[r] = exp2f(m_other[r] * scale_log2 - m_scaled);
              row_sum[r] = row_sum[r] * a[r] + l_other[r] * b[r];
              row_max[r] = m;
            }
#pragma unroll
            for (int j = 0; j < K::kORegs / 4; ++j) {
              const float4 o = __ldcg(src + j * 128);
              acc_o[4 * j] = acc_o[4 * j] * a[0] + o.x * b[0];
              acc_o[4 * j + 1] = acc_o[4 * j + 1] * a[0] + o.y * b[0];
              acc_o[4 * j + 2] = acc_o[4 * j + 2] * a[1] + o.z * b[1];
              acc_o[4 * j + 3] = acc_o[4 * j + 3] * a[1] + o.w * b[1];
            }
          }
        }
      }

      // Epilogue: O /= l, straight from the accumulators (a quad writes 16 contiguous bytes per row
      // per n8 tile) or through the staging tile and a TMA store; LSE = m * scale + ln(l), or -inf for a
      // row that saw no key.
      if constexpr (K::kDevNoEpilogue) {  // (probe) nothing written; O and the row statistics computed all the same
        write_out = false;
        dev_keep_alive(acc_o, p.scale != 12345.f, q_smem);
        const float stats[4] = {row_max[0], row_max[1], row_sum[0], row_sum[1]};
        dev_keep_alive(stats, p.scale != 12345.f, q_smem);
      }
      const float scale = fabsf(p.scale);
      // This warpgroup's staging tile: kHeadDim / 64 pages of 64 rows x 128 bytes, swizzled as TMA reads it
      // -- its own tile after the ring, or its own rows of the Q buffer, whose pages are kBlockM rows apart.
      // With O staged in the ring: warpgroup 1's in the last K slot, warpgroup 0's in the last V slot (each 64 x d, in
      // 64-row pages, within the slot's block_n x d); every tile has a last block (KeyBlocks' at_least_one). (A tile
      // with no block storing its zeros directly instead -- a run-time choice of epilogue -- made the loop spill:
      // perf-log v36.)
      const uint32_t o_stage = K::kOStageInRing ? (wg == 1 ? k_smem0 : v_smem0) + s_last * K::kKVBytes
                               : K::kOStageInQ ? q_wg : o_stage_own;
      constexpr uint32_t kOPage = K::kOStageInQ ? kBlockM * 128 : 64 * 128;
      if constexpr (K::kOStageInRing) {
        if (wg == 0) named_sync(7, 256);
      } else if constexpr (K::kTmaStoreO && !K::kOStageInQ && !K::kDevNoEpilogue) {
        // The previous tile's store must have read the staging tile before it is written again.
        if (tid == 0) wg::bulk_wait_read();
        named_sync(4 + wg, 128);
      }
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float sum = row_sum[r];
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        sum += __shfl_xor_sync(0xffffffffu, sum, 2);
        const float inv = sum > 0.f ? 1.f / sum : 0.f;
        const int row = rg * 64 + row_in_wg + 8 * r;
        if (K::kTmaStoreO && write_out) {
          // Element (row, 8i + 2t) of the warpgroup's 64 rows: page i / 8, 16-byte chunk (i % 8) ^ (row % 8).
          const int wrow = row_in_wg + 8 * r;
#pragma unroll
          for (int i = 0; i < K::kHeadDim / 8; ++i)
            asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(o_stage + (i / 8) * kOPage + wrow * 128 + (((i % 8) ^ (wrow % 8)) << 4) + 4 * t),
                         "r"(pack2<K::kDType>(acc_o[4 * i + 2 * r] * inv, acc_o[4 * i + 2 * r + 1] * inv)));
        }
        if (write_out && q_begin + row >= 0 && q_begin + row < q_end) {
          if constexpr (!K::kTmaStoreO) {
            using T = std::conditional_t<K::kBF16, __nv_bfloat16, __half>;
            T* o_row = static_cast<T*>(p.o) + tile.b * p.o_batch_stride + tile.h * p.o_head_stride +
                       int64_t(q_begin + row) * p.o_row_stride + 2 * t;
#pragma unroll
            for (int i = 0; i < K::kHeadDim / 8; ++i)
              *reinterpret_cast<uint32_t*>(o_row + 8 * i) = pack2<K::kDType>(acc_o[4 * i + 2 * r] * inv, acc_o[4 * i + 2 * r + 1] * inv);
          }
          if (p.lse != nullptr && t == 0)
            p.lse[tile.b * p.lse_batch_stride + tile.h * p.lse_head_stride + int64_t(q_begin + row) * p.lse_row_stride] =
                sum > 0.f ? row_max[r] * scale + logf(sum) : kNegInf;
        }
      }
      if constexpr (kDeferO) {
        // The store waits for the next tile's prologue (flush_o); only staged rows need one.
        if (write_out) o_pend_row = q_begin + rg * 64 + 64 > 0 ? q_begin + rg * 64 : -1, o_h = tile.h, o_b = tile.b;
      } else if constexpr (K::kTmaStoreO && !K::kDevNoEpilogue) {
        // Every thread's shared stores, made visible to the TMA unit (async proxy), then one thread stores
        // the warpgroup's 64 rows page by page (rows past seqlen_q fall outside the map and are dropped).
        wg::fence_proxy_async();
        named_sync(4 + wg, 128);
        // (A box wholly before row 0: nothing to store; two rings: nor one wholly past the tile's end, whose rows are
        // another tile's.)
        if (tid == 0 && write_out && q_begin + rg * 64 + 64 > 0 && (!K::kTwoRings || q_begin + rg * 64 < q_end)) {
          store_o_rows(o_stage, kOPage, q_begin + rg * 64, tile.h, tile.b);
          if constexpr (K::kOStageInQ && !kDeferQRelease) wg::bulk_wait_read();  // the store has read these Q rows
        }
        // Staged in Q: every thread's arrive comes after its own staging stores (and the fence above), thread
        // 0's after the store has read them; then the producer may load the next Q there. (Deferred to the
        // next tile's prologue with two Q buffers.)
        if constexpr (kDeferQRelease) q_release_pending = true;
        else if constexpr (K::kOStageInQ) release_q();
        if constexpr (K::kOStageInRing) {
          // The slot's last arrival, once the store has read it (the stores' owner, thread 0).
          if (tid == 0) {
            wg::bulk_wait_read();
            mbar_arrive(wg == 1 ? k_empty(s_last) : v_empty(s_last));
          }
        }
      }
      lap(Prof::kEpilogue);
      if constexpr (K::kRingTurns) {
        // A block's turns are a product turn then an SFU turn, and a tile ends with the drain's product turn: owe them
        // in that shape (P (S P)^k for an empty list, (S P)^k after a shorter one).
        if (owed_lone) {
          take_turn();
          pass_turn();
        }
        for (int k = 0; k < owed_turns; ++k) {
          if constexpr (K::kSfuTurns)
            asm volatile("bar.sync %0, 256;\n\tbar.arrive %1, 256;\n" ::"r"(9 + wg), "r"(9 + (wg + 1) % K::kConsumers) : "memory");
          take_turn();
          pass_turn();
        }
        if constexpr (K::kProfile)
          if (tid == 0) prof.add(Prof::kOwedTurns, owed_turns + (owed_lone ? 1 : 0));
        lap(Prof::kOwed);
      }
      if constexpr (K::kProfile)
        if (tid == 0) prof.add(Prof::kTiles, 1);
    }
    flush_o();  // (kDeferO: the CTA's last tile's store)
    if constexpr (K::kTmaStoreO)
      if (tid == 0) wg::bulk_wait();  // the last stores complete before the CTA's shared memory goes
  }
  // (The ping-pong barrier's last hand-over is never taken; hardware barriers need no reset at exit.)
  // A PDL secondary (Traits::kPdlSecondary) ends no earlier than the kernel it was launched behind, so whatever follows
  // in the stream sees both kernels' outputs. (At once in a launch without PDL.)
  if constexpr (K::kPdlSecondary)
    if (threadIdx.x == 0) asm volatile("griddepcontrol.wait;\n" ::: "memory");
  if constexpr (K::kDevCtaTimes) {
    __syncthreads();
    if (threadIdx.x == 0) {
      args.profile[2 * blockIdx.x + 1] = globaltimer();
      args.profile[K::kDevCtaClocks + 2 * blockIdx.x + 1] = clock64();
    }
  }
#endif
}

// ---- Host side ----------------------------------------------------------------------------------------
// Choices that production always makes, switchable so dev/sm90_dev.cu can time both in one run.
struct LaunchOptions {
  bool align_end = true;    // tiles end at seqlen_q under right-edged masks (args.q_shift)
  unsigned long long* profile = nullptr;  // Traits::kProfile: 8 x (consumers + 1) zeroed counters (Prof)
  // The causal order's groups: their K and V within this many MB of L2 (0: a third of the device's L2, half at d64), and a last
  // group of at least tail_grids x grid tiles (0: shapes.h causal_tail_grids).
  int l2_budget_mb = 0;
  double tail_grids = 0;
  bool tail_split = true;   // the static order's last round split into pieces where it pays (shapes.h, TailSplit)
  Rows rows;                // the query rows this launch covers and its part in a PDL pair (shapes.h, Rows)
  bool pdl_attr = true;     // a PDL secondary launched with programmatic stream serialisation (dev: false, plainly)
  bool plain_ring_tail = false;  // two rings: no tail plan (ring_tile; shapes.h ring_tail_plan)
};
template <class K>
int32_t launch(const FwdParams& p, LaunchOptions opt = {}) {
  Args args{};
  args.p = p;
  if (int32_t st = encode_tensor_map(&args.tq, &args.q_pos, p.q, p.dtype, p.head_dim, p.seqlen_q, p.heads_q, p.batch,
                                     p.q_row_stride, p.q_head_stride, p.q_batch_stride, K::kBlockM, "q");
      st != FLASH_OK)
    return st;
  if (int32_t st = encode_tensor_map(&args.tk, &args.k_pos, p.k, p.dtype, p.head_dim, p.seqlen_k, p.heads_kv, p.batch,
                                     p.k_row_stride, p.k_head_stride, p.k_batch_stride, K::kBlockN, "k");
      st != FLASH_OK)
    return st;
  if (int32_t st = encode_tensor_map(&args.tv, &args.v_pos, p.v, p.dtype, p.head_dim, p.seqlen_k, p.heads_kv, p.batch,
                                     p.v_row_stride, p.v_head_stride, p.v_batch_stride, K::kBlockN, "v");
      st != FLASH_OK)
    return st;
  if constexpr (K::kTmaStoreO)
    if (int32_t st = encode_tensor_map(&args.to, &args.o_pos, p.o, p.dtype, p.head_dim, p.seqlen_q, p.heads_q, p.batch,
                                       p.o_row_stride, p.o_head_stride, p.o_batch_stride, 64, "o");
        st != FLASH_OK)
      return st;
  // A part of the query rows (shapes.h, Rows; d64 dense's two-kernel form): tiles from row rows.begin (a negative shift),
  // static order and no mask edges (dense problems only), no tail split.
  const bool part = opt.rows.begin != 0 || opt.rows.end >= 0;
  const int64_t row_end = opt.rows.end >= 0 ? opt.rows.end : p.seqlen_q;
  if (part && (opt.rows.begin < 0 || opt.rows.begin % 64 != 0 || opt.rows.begin >= row_end || row_end > p.seqlen_q ||
               !tail_split_applies(p)))
    return fail(FLASH_ERROR_INTERNAL, "sm90: query rows [", opt.rows.begin, ", ", row_end, ") of ", p.seqlen_q,
                " cannot be a launch of their own");
  // A pair over the static order's tiles (shapes.h, Rows::pieces): dense problems, all rows, a workspace for the pieces.
  const bool pair = opt.rows.pieces.units > 0;
  if (pair && (part || !tail_split_applies(p) || p.workspace == nullptr || K::kConsumers != 2 ||
               (opt.rows.pdl == Rows::kPdlPrimary ? !K::kPdlPrimary : !(opt.rows.pdl == Rows::kPdlSecondary && K::kTailSplit))))
    return fail(FLASH_ERROR_INTERNAL, "sm90: this instantiation cannot run its part of a split tail");
  args.num_m_blocks = int32_t((row_end - opt.rows.begin + K::kBlockM - 1) / K::kBlockM);
  // Masks with a right edge (causal-like, windows): a row's key range grows with the row, so the tiles are
  // aligned to end at seqlen_q and the partial one comes first, where it has the fewest keys (d64's 192-row
  // tiles at 1k: 27 key blocks per head instead of 32). Block-sparse tiles stay aligned to the mask's blocks.
  // The shift is whole warpgroups' 64 rows, so each warpgroup's O box lies either wholly before row 0 (not
  // stored) or wholly at or after it: with a 13-row shift (a TMA store box starting at row -13) the GPU sweep
  // failed with a CUDA error on the H100 (run s15-1), while Q's loads from boxes starting before row 0 read
  // zeros as documented and whole-warpgroup shifts pass every test (runs s15-2/3).
  args.profile = opt.profile;
  args.q_shift = part ? -opt.rows.begin
                : opt.align_end && !p.has_block_mask && p.window_right >= 0 ? (args.num_m_blocks * K::kBlockM - p.seqlen_q) / 64 * 64 : 0;
  const int64_t tiles = int64_t{args.num_m_blocks} * p.heads_q * p.batch;
  if (tiles > 0x7fffffff) return fail(FLASH_ERROR_UNSUPPORTED, "sm90: ", tiles, " query blocks exceed 2^31-1");
  args.num_tiles = static_cast<int32_t>(tiles);

  int64_t smem_bytes = K::kSmemBytes;
  // The block-sparse instantiation also runs problems without a block mask (shapes.h, use_listed_kernel); the dense
  // one has no schedules.
  if (p.has_block_mask && !K::kSparse) return fail(FLASH_ERROR_INTERNAL, "sm90: a block mask needs the block-sparse instantiation");
  if (K::kTwoRings && !(p.has_block_mask && p.block_mask.block_m == 128))
    return fail(FLASH_ERROR_INTERNAL, "sm90: the two-ring instantiation needs a block mask of 128-row blocks");
  if (K::kSparse) {
    args.sched_stride = static_cast<int32_t>(sparse_sched_stride(p.seqlen_k, K::kBlockN));
    smem_bytes += sparse_extra_bytes(p.seqlen_k, K::kBlockN, p.has_block_mask ? p.block_mask.block_n : K::kBlockN, K::kRings);  // supports() bounded it
  }
  if (dynamic_tiles(p.has_block_mask, p.window_left, p.window_right) && p.workspace != nullptr) {
    // The tile counter: a 64-bit word at the workspace's first 8-byte boundary, which the kernel claims for this
    // launch's epoch (take_claim), so nothing zeroes it in the stream ahead of the kernel.
    const uintptr_t at = (reinterpret_cast<uintptr_t>(p.workspace) + 7) & ~uintptr_t{7};
    args.tile_counter = reinterpret_cast<unsigned long long*>(at);
    args.epoch = next_tile_epoch();
  }
  auto* kernel = fwd_kernel<K>;
  if (const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem_bytes));
      e != cudaSuccess)
    return cuda::status_from(e, "cudaFuncSetAttribute(sm90 fwd, MaxDynamicSharedMemorySize)");
  int grid = persistent_grid(tiles, cuda::persistent_ctas(p.device_id));
  // Two rings: end the launch on smaller tiles where the whole ones would leave a few CTAs a round behind (ring_tile).
  args.ring_tail_heads = 0;
  if constexpr (K::kTwoRings)
    if (!opt.plain_ring_tail && std::getenv("LIBFLASH_SM90_RING_TAIL_PLAIN") == nullptr)  // (A/B probe, session 67)
      args.ring_tail_heads = ring_tail_plan(p.seqlen_q, int64_t(p.heads_q) * p.batch, grid);
  // The tail split (shapes.h, TailSplit): dense instantiations, the static order, and a workspace of the size
  // flash_fwd_workspace_size gives (sm90.cpp, workspace); without one (sm90_dev's run_static) the last round runs whole.
  // A pair's primary or secondary (Rows::pieces) takes the pair's plan, made for the same grid (sm90.cpp, pair_split):
  // the primary runs the tiles before its pieces, the secondary only the pieces, and merges them.
  args.tail = TailSplit{args.num_tiles, 0, 0};
  TailSplit t{};
  if (pair) {
    t = opt.rows.pieces;
    if (args.tile_counter != nullptr || t.whole != tiles - tiles % grid || t.units != (tiles - t.whole) * int64_t{t.blocks} ||
        (opt.rows.pdl == Rows::kPdlSecondary && t.blocks != (int64_t(p.seqlen_k) + K::kBlockN - 1) / K::kBlockN))
      return fail(FLASH_ERROR_INTERNAL, "sm90: a split tail planned for another grid or key block");
    if (int64_t(p.workspace_size) < tail_workspace_bytes(t, grid, K::kHeadDim, K::kConsumers))
      return fail(FLASH_ERROR_INTERNAL, "sm90: the workspace is too small for the split tail's pieces");
  } else if (K::kTailSplit && opt.tail_split && !part && tail_split_applies(p) && args.tile_counter == nullptr && p.workspace != nullptr) {
    t = tail_split_for(p, K::kShape, grid);
    if (int64_t(p.workspace_size) < tail_workspace_bytes(t, grid, K::kHeadDim, K::kConsumers)) t = TailSplit{};
  }
  // Dense problems with no tail of their own run their rounds on the fewest CTAs that keep their count (shapes.h,
  // balanced_grid). The tail split and the pair keep one CTA per SM: their plans are made for it.
  if (t.units == 0 && !pair && !part && opt.rows.pdl == Rows::kNoPdl && !K::kSparse && args.tile_counter == nullptr &&
      tail_split_applies(p))
    grid = balanced_grid(tiles, grid);
  {
    // The causal order's groups (shapes.h, CausalOrder): K and V of a group within a third of L2 (d64: half; +1.5-2%
    // at 2k-16k over a third in runs s18-3 and s18-5, where d128 and d256 measured the same or up to 4% slower with
    // half), and a last group of at least 2 x grid tiles (causal +16% d256 1k, +2-5% d64, +2-7% d128; perf-log v30), 1 x
    // at d256 1k (shapes.h causal_tail_grids, perf-log v79); groups of two heads at d256 1k walking upwards (shapes.h
    // causal_l2_budget, perf-log v82).
    const int64_t kv_bytes = int64_t(p.seqlen_k) * p.head_dim * 2 * 2 / p.head_ratio;
    const int64_t l2 = std::max<int64_t>(cuda::l2_cache_bytes(p.device_id), 1 << 20);
    const int64_t budget = opt.l2_budget_mb > 0 ? int64_t(opt.l2_budget_mb) << 20
                                                : causal_l2_budget(p.head_dim, args.num_m_blocks, K::kUpward, kv_bytes, l2);
    const double tail_grids = opt.tail_grids > 0 ? opt.tail_grids : causal_tail_grids(p.head_dim, args.num_m_blocks);
    const CausalOrder order = causal_order(int64_t(p.heads_q) * p.batch, args.num_m_blocks, grid, kv_bytes, budget, tail_grids);
    args.l2_group = order.group;
    args.l2_full_groups = order.full_groups;
  }
  if (t.units > 0) {
    const uintptr_t base = (reinterpret_cast<uintptr_t>(p.workspace) + kTailAlign - 1) & ~uintptr_t(kTailAlign - 1);
    args.tail_count = reinterpret_cast<int32_t*>(base);
    // The counts start from zero: zeroed here, ahead of the kernel that runs the pieces or, for a pair, ahead of its
    // primary, so nothing stands between the two kernels. (Zeroed by the primary's CTA 0 instead, the loop renumbered
    // the whole d128 kernel's PTX, or made d256's consumers spill.)
    if (opt.rows.pdl != Rows::kPdlSecondary)
      if (const cudaError_t e = cudaMemsetAsync(args.tail_count, 0, size_t(tiles - t.whole) * K::kConsumers * 4,
                                                static_cast<cudaStream_t>(p.stream));
          e != cudaSuccess)
        return cuda::status_from(e, "cudaMemsetAsync(sm90 tail counters)");
    if (pair && opt.rows.pdl == Rows::kPdlPrimary) {
      args.num_tiles = t.whole;
    } else {
      args.tail = t;
      args.tail.pieces_only = pair;
      args.tail_part = reinterpret_cast<float*>(base + tail_count_bytes(grid, K::kConsumers));
    }
  }
  if (opt.rows.pdl == Rows::kPdlSecondary && opt.pdl_attr) {
    // Behind the primary with programmatic stream serialisation (shapes.h, Rows); else the plain launch below.
    if (launch_pdl_secondary(kernel, dim3(unsigned(grid)), dim3(unsigned(K::kThreads)), size_t(smem_bytes),
                             static_cast<cudaStream_t>(p.stream), args))
      return cuda::check_launch("sm90 fwd kernel (PDL)");
  }
  kernel<<<grid, K::kThreads, size_t(smem_bytes), static_cast<cudaStream_t>(p.stream)>>>(args);
  return cuda::check_launch("sm90 fwd kernel");
}

// Traits::kUpward on a production instantiation (kSkipDiag off: it leaves out the first block, the upward walk's last).
template <class T>
struct Upward : T {
  static constexpr bool kUpward = true;
  static constexpr bool kSkipDiag = false;
};

template <int kHeadDim, bool kSparse, DType kDType>
int32_t launch_fwd(const FwdParams& p, const Rows& rows);
template <DType kDType>
int32_t launch_fwd_rows(const FwdParams& p, const Rows& rows);
template <DType kDType>
int32_t launch_fwd_two_rings(const FwdParams& p);
template <DType kDType>
int32_t launch_fwd_sparse_turns(const FwdParams& p);
template <DType kDType, bool kSplit>
int32_t launch_fwd_long(const FwdParams& p);
template <int kHeadDim, DType kDType>
int32_t launch_fwd_split(const FwdParams& p, const Rows& rows);
template <int kHeadDim, DType kDType>
int32_t launch_fwd_up(const FwdParams& p);

// The instantiations for long key ranges (>= 8192 keys: the d128 192-key ones; d256's, split or not, by its Traits
// default since v51) probe a block's K/V barriers a block early (Traits::kEarlyProbe; perf-log v44): sm90_dev s24-2, against the same kernels
// without it, d128 dense 8k +0.9%, 16k +1.3%, causal 8k +1.3%, 16k +1%, d256 dense 8k +0.9-1.1%, 16k +1.2%; on the
// shorter ranges' kernels it measured -1.5 to +0.7% (d64, d128 and d256 1k-16k) and the d64 two-ring kernel 4-7% slower.
template <class T>
struct LongRange : T {
  static constexpr bool kEarlyProbe = true;
};
// An instantiation whose consumer warpgroups take turns at the SFU (Traits::kSfuTurns) where its Traits do not: d128's
// block-sparse one for long lists (shapes.h, sfu_turns_by_length; perf-log v59). Chosen per launch by the host: the
// turns switched at run time in one instantiation -- predicated barriers or a branch round them -- lost their gain
// (sm90_dev s33-3/4: 2-5% slower than compiled in, slower than none).
template <class T>
struct SfuTurnsOn : T {
  static constexpr bool kSfuTurns = true;
};

}  // namespace flash::sm90

// One line per .cu file: FLASH_SM90_INSTANTIATE(128, false, BF16) -- head dim, block-sparse instantiation
// or not, dtype; the tile shape comes from shapes.h. `rows`: the query rows it runs (shapes.h, Rows; all by default).
#define FLASH_SM90_INSTANTIATE(D, SPARSE, DTYPE)                                                           \
  template <>                                                                                            \
  int32_t flash::sm90::launch_fwd<D, SPARSE, flash::DType::DTYPE>(const flash::FwdParams& p,             \
                                                                  const flash::sm90::Rows& rows) {       \
    constexpr flash::sm90::Shape s = flash::sm90::shape_for(D, SPARSE);                                  \
    flash::sm90::LaunchOptions opt;                                                                      \
    opt.rows = rows;                                                                                     \
    return launch<flash::sm90::Traits<D, s.block_n, s.stages, flash::DType::DTYPE, SPARSE, s.consumers, 0, s.store_o>>(p, opt); \
  }
// The causal walk upwards (shapes.h, use_upward_kernel): FLASH_SM90_INSTANTIATE_UP(256, BF16).
#define FLASH_SM90_INSTANTIATE_UP(D, DTYPE)                                                              \
  template <>                                                                                            \
  int32_t flash::sm90::launch_fwd_up<D, flash::DType::DTYPE>(const flash::FwdParams& p) {                 \
    constexpr flash::sm90::Shape s = flash::sm90::shape_for(D);                                          \
    return launch<flash::sm90::Upward<                                                                   \
        flash::sm90::Traits<D, s.block_n, s.stages, flash::DType::DTYPE, false, s.consumers, 0, s.store_o>>>(p, {}); \
  }
// d64 dense's second kernel (shapes.h, kRowsShape, d64_split_rows): FLASH_SM90_INSTANTIATE_ROWS(BF16).
#define FLASH_SM90_INSTANTIATE_ROWS(DTYPE)                                                               \
  template <>                                                                                            \
  int32_t flash::sm90::launch_fwd_rows<flash::DType::DTYPE>(const flash::FwdParams& p, const flash::sm90::Rows& rows) { \
    constexpr flash::sm90::Shape s = flash::sm90::kRowsShape;                                            \
    flash::sm90::LaunchOptions opt;                                                                      \
    opt.rows = rows;                                                                                     \
    return launch<flash::sm90::Traits<s.head_dim, s.block_n, s.stages, flash::DType::DTYPE, false, s.consumers, 0, s.store_o>>(p, opt); \
  }
// The d64 block-sparse two-ring instantiation (shapes.h, kTwoRingShape): FLASH_SM90_INSTANTIATE_TWO_RINGS(BF16).
#define FLASH_SM90_INSTANTIATE_TWO_RINGS(DTYPE)                                                          \
  template <>                                                                                            \
  int32_t flash::sm90::launch_fwd_two_rings<flash::DType::DTYPE>(const flash::FwdParams& p) {           \
    constexpr flash::sm90::Shape s = flash::sm90::kTwoRingShape;                                         \
    return launch<flash::sm90::Traits<s.head_dim, s.block_n, s.stages, flash::DType::DTYPE, true, s.consumers, 0, s.store_o>>(p); \
  }
// d128 block-sparse with the SFU turns (SfuTurnsOn; shapes.h, sfu_turns_by_length): FLASH_SM90_INSTANTIATE_SPARSE_TURNS(BF16).
#define FLASH_SM90_INSTANTIATE_SPARSE_TURNS(DTYPE)                                                       \
  template <>                                                                                            \
  int32_t flash::sm90::launch_fwd_sparse_turns<flash::DType::DTYPE>(const flash::FwdParams& p) {        \
    constexpr flash::sm90::Shape s = flash::sm90::shape_for(128, true);                                  \
    return launch<flash::sm90::SfuTurnsOn<flash::sm90::Traits<s.head_dim, s.block_n, s.stages, flash::DType::DTYPE, true, \
                                                               s.consumers, 0, s.store_o>>>(p);           \
  }
// The d128 long-key-range instantiations (shapes.h, kLongShape), with the tail split or without:
// FLASH_SM90_INSTANTIATE_LONG(BF16, true).
#define FLASH_SM90_INSTANTIATE_LONG(DTYPE, SPLIT)                                                        \
  template <>                                                                                            \
  int32_t flash::sm90::launch_fwd_long<flash::DType::DTYPE, SPLIT>(const flash::FwdParams& p) {          \
    constexpr flash::sm90::Shape s = flash::sm90::kLongShape;                                            \
    return launch<flash::sm90::LongRange<flash::sm90::Traits<s.head_dim, s.block_n, s.stages, flash::DType::DTYPE, false,  \
                                                             s.consumers, 0, s.store_o, SPLIT>>>(p);      \
  }
// A dense instantiation with the tail split: d256 from 8192 keys (shapes.h, use_split_kernel), d128's pieces behind its
// whole rounds (pair_split): FLASH_SM90_INSTANTIATE_SPLIT(256, BF16). d256 probes early (its Traits default, as
// LongRange's), d128's 128-key blocks do not (its pieces 0.8% faster at 4k without, sm90_dev s31-2).
#define FLASH_SM90_INSTANTIATE_SPLIT(D, DTYPE)                                                           \
  template <>                                                                                            \
  int32_t flash::sm90::launch_fwd_split<D, flash::DType::DTYPE>(const flash::FwdParams& p,                \
                                                                 const flash::sm90::Rows& rows) {        \
    constexpr flash::sm90::Shape s = flash::sm90::shape_for(D);                                          \
    flash::sm90::LaunchOptions opt;                                                                      \
    opt.rows = rows;                                                                                     \
    return launch<flash::sm90::Traits<D, s.block_n, s.stages, flash::DType::DTYPE, false, s.consumers, 0, s.store_o, true>>(p, opt); \
  }
