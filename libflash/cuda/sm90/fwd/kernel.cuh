// libflash/cuda/sm90/fwd/kernel.cuh -- the Hopper forward kernel (FLASH_ALGO_SM90): warp-specialised, TMA-fed,
// wgmma-computed FlashAttention, FlashAttention-3's schedule written in inline PTX. A CTA has a producer warpgroup
// (producer.cuh: TMA loads, tile scheduling) and two or three consumer warpgroups (mainloop.cuh: Algorithm 1 on 64 query
// rows each; epilogue.cuh), and stays resident: a persistent grid of at most one CTA per SM takes the tiles in the order
// tile_scheduler.cuh defines. How it works: docs/kernels.md "sm90 forward".
#pragma once
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "epilogue.cuh"
#include "producer.cuh"
#include "traits.h"

namespace flash::sm90 {

template <class K>
__global__ void __launch_bounds__(K::kThreads, 1) fwd_kernel(const __grid_constant__ Args args) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using S = Smem<K>;
  extern __shared__ uint8_t smem_raw[];
  __shared__ alignas(8) uint64_t bars[S::kBarriers];
  __shared__ int tile_ids[2];
  [[maybe_unused]] __shared__ int tile_mhb[2][3];
  [[maybe_unused]] __shared__ int tile_seq[K::kVarlen ? 6 : 1][4];
  [[maybe_unused]] __shared__ int ring_pos[2][2];
  [[maybe_unused]] __shared__ int tail_last[3];
  [[maybe_unused]] __shared__ TailPlan tail_plan;
  [[maybe_unused]] __shared__ int wg_code[3];
  [[maybe_unused]] __shared__ uint32_t pin_sink[K::kPinSoftmax ? K::kThreads / 32 : 1];
  // Dynamic shared memory, from a 1024-byte boundary (the swizzle atoms): Q buffers, K ring, V ring, O's staging tile,
  // then (block-sparse) the schedules and the list bitmap.
  const uint32_t smem = (static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw)) + 1023u) & ~1023u;
  S sm;
  sm.q = smem;
  sm.k0 = sm.q + K::kQStages * K::kQBytes;
  sm.v0 = sm.k0 + S::kSlots * K::kKVBytes;
  sm.o_stage0 = sm.v0 + S::kSlots * K::kKVBytes;
  sm.sched_base = reinterpret_cast<int32_t*>(
      smem_raw + (sm.o_stage0 + K::kOStageBytes - static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw))));
  sm.sched_bits = reinterpret_cast<uint32_t*>(sm.sched_base + 2 * K::kRings * args.sched_stride);
  sm.bar0 = static_cast<uint32_t>(__cvta_generic_to_shared(bars));
  sm.tile_ids = tile_ids, sm.tile_mhb = tile_mhb, sm.tile_seq = tile_seq, sm.ring_pos = ring_pos, sm.tail_last = tail_last;
  sm.tail_plan = &tail_plan, sm.wg_code = wg_code, sm.pin_sink = pin_sink;

  // The warpgroup index broadcast from lane 0 where that lets ptxas keep what derives from it in uniform registers.
  const int warpgroup = K::kUniformWg ? __shfl_sync(0xffffffffu, int(threadIdx.x / 128), 0) : int(threadIdx.x / 128);
  if (threadIdx.x == 0) {
    for (int slot = 0; slot < K::kQStages; ++slot) {
      ptx::mbar_init(sm.q_full(slot), 1);
      ptx::mbar_init(sm.q_empty(slot), 128 * K::kConsumers);
    }
    // Every producer lane that stores arrives on tile_full, and every consumer thread (and the loading lanes) on q_empty /
    // sched_empty, so the hand-over's shared stores and loads are ordered thread by thread.
    for (int slot = 0; slot < S::kTileSlots; ++slot) {
      ptx::mbar_init(sm.tile_full(slot), K::kSparse ? 32 : 1);
      if constexpr (K::kSparse) ptx::mbar_init(sm.sched_empty(slot), 128 * K::kConsumers + K::kLoaders + 1);
    }
    for (int s = 0; s < S::kSlots; ++s) {
      // One arrival per consumer warp of the ring (two rings: the pair's warpgroups on ring 0, the single on ring 1), and
      // with O staged in the ring one more (Traits::kOStageInRing).
      const uint32_t warps = 4 * (K::kTwoRings ? (s < K::kStages ? 2 : 1) : K::kConsumers);
      ptx::mbar_init(sm.k_full(s), 1);
      ptx::mbar_init(sm.v_full(s), 1);
      ptx::mbar_init(sm.k_empty(s), warps + (K::kOStageInRing ? 1 : 0));
      ptx::mbar_init(sm.v_empty(s), warps + (K::kOStageInRing ? 1 : 0));
    }
    if constexpr (!K::kSparse) ptx::mbar_init(sm.claimed(), 1);
    ptx::mbar_fence_init();
    if constexpr (K::kTailSplit) plan_tail(args.tail, int(gridDim.x), int(blockIdx.x), tail_plan, K::kPdlSecondary);
    // (Every CTA of the persistent grid is resident by now: the dependent's CTAs queue for the SMs this grid leaves.)
    if constexpr (K::kPdlPrimary) ptx::launch_dependents();
  }
  __syncthreads();

  if (warpgroup == 0) {
    Producer<K>{args, sm}.run();
  } else {
    // Dense, dynamic order: the counter claimed for this launch (take_claim) by a consumer thread before its warpgroup
    // takes its registers, and before the CTA's first take, if it takes at all (its second tile, tile_of(1), exists).
    if constexpr (!K::kSparse)
      if (threadIdx.x == 128 && args.tile_counter != nullptr && tile_of(1) < args.num_tiles) {
        take_claim(args);
        ptx::mbar_arrive(sm.claimed());
      }
    ptx::setmaxnreg_inc<K::kConsumerRegs>();
    Consumer<K>(args, sm, warpgroup).run();
  }
  // (The ping-pong barrier's last hand-over is never taken; hardware barriers need no reset at exit.)
  // A PDL secondary ends no earlier than the kernel it was launched behind, so whatever follows in the stream sees both
  // kernels' outputs.
  if constexpr (K::kPdlSecondary)
    if (threadIdx.x == 0) ptx::wait_dependency();
#endif
}

}  // namespace flash::sm90
