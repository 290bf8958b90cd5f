// libflash/cuda/ptx/hopper.cuh -- the sm_90a synchronisation and copy instructions the Hopper kernels use, as inline PTX:
// mbarriers (the producer/consumer hand-over of shared buffers), TMA tensor loads and stores (cp.async.bulk.tensor),
// named barriers (warpgroup turns), register reallocation (setmaxnreg) and programmatic dependent launch.
// The wgmma instructions and their descriptors are in wgmma.cuh.
#pragma once
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "../../params.h"

namespace flash::ptx {

// ---- mbarrier ------------------------------------------------------------------------------------------
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count));
}
// Makes the initialised barriers visible to the async proxy (TMA) and the other threads.
__device__ __forceinline__ void mbar_fence_init() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
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
// Both phases complete: the two probes are issued back to back, so their round trips overlap.
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
// overlaps the softmax instead of standing at the head of the next block.
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

// ---- TMA -----------------------------------------------------------------------------------------------
// 4-D tiled TMA store shared -> global, in the thread's bulk group (rows outside the tensor are dropped).
__device__ __forceinline__ void tma_store_4d(const CUtensorMap* map, uint32_t src, int c0, int c1, int c2, int c3) {
  asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%1, %2, %3, %4}], [%5];\n" ::"l"(
                   reinterpret_cast<uint64_t>(map)),
               "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(src)
               : "memory");
}
// 4-D tiled TMA load global -> shared, completing on `bar` (bytes counted against its expect-tx).
__device__ __forceinline__ void tma_load_4d(uint32_t dst, const CUtensorMap* map, uint32_t bar, int c0, int c1, int c2,
                                            int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], "
      "[%6];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
      : "memory");
}
// dst[0, bytes / 4) += the floats at src (shared -> global, the adds at L2), in the thread's bulk group; bytes a
// multiple of 16, both addresses 16-byte aligned.
__device__ __forceinline__ void bulk_reduce_add_f32(float* dst, uint32_t src, uint32_t bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(
                   reinterpret_cast<uint64_t>(dst)),
               "r"(src), "r"(bytes)
               : "memory");
}
// Fetch a TMA descriptor (a __grid_constant__ kernel parameter) into its cache ahead of the first load that names it.
__device__ __forceinline__ void prefetch_tensormap(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

// ---- Registers, named barriers, programmatic dependent launch ----------------------------------------------
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs)); }
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs)); }
__device__ __forceinline__ void named_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
// Sync on barrier `wait_id`, then arrive on `next_id` (256 threads each): an empty turn.
__device__ __forceinline__ void named_sync_arrive(int wait_id, int next_id) {
  asm volatile("bar.sync %0, 256;\n\tbar.arrive %1, 256;\n" ::"r"(wait_id), "r"(next_id) : "memory");
}
// PDL: let the dependent launch start (every CTA of this grid is running), and wait for the grid this one depends on.
__device__ __forceinline__ void launch_dependents() { asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory"); }
__device__ __forceinline__ void wait_dependency() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }

// Two floats as one 32-bit pair of the input dtype (the A fragment of a wgmma, an O store).
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

}  // namespace flash::ptx
