// libflash/cuda/ptx/wgmma.cuh -- what the sm_90a kernels (the sm90 forward, the sm90 backward) share around
// wgmma: shared-memory matrix descriptors, the fence / commit / wait of the asynchronous pipeline, the
// register fences that keep the compiler off in-flight operands, and the bulk-copy groups. The wgmma
// instructions themselves are in the generated wgmma_ops.h (gen_wgmma.py).
#pragma once
#include <cstdint>

#include "wgmma_ops.h"

namespace flash::wg {

// Shared-memory matrix descriptor, 128-byte swizzle (PTX ISA "matrix descriptor"): start address >> 4,
// leading byte offset (bits 16-29), stride byte offset (bits 32-45) = 1024 (8 rows of 128 bytes), swizzle
// mode 1 in bits 62-63; every 8-row atom starts 1024-byte aligned (base offset 0). K-major: the k16 step
// is +32 bytes inside a 128-byte row, the next 64 columns the next page (leading offset unused).
// MN-major (a transposed operand): rows are k, the leading offset is the distance between 64-element
// pages along M/N, the k16 step is +2048 bytes (16 rows).
__device__ __forceinline__ uint64_t desc(uint32_t addr, uint32_t lead) {
  return uint64_t((addr & 0x3FFFF) >> 4) | (uint64_t((lead & 0x3FFFF) >> 4) << 16) | (uint64_t(1024 >> 4) << 32) |
         (uint64_t(1) << 62);
}

// The descriptor of the operand `bytes` (a multiple of 16) after the one d describes, with the same offsets and swizzle:
// only the start address field (bits 0-13, address >> 4) moves. Shared addresses stay under 256 KB, so the field
// never carries into the bits above it and a 32-bit add of bytes >> 4 to the low word is exact -- where desc() of the
// summed address re-masks and re-shifts it (three integer instructions per operand and k-step; docs/kernels.md).
__device__ __forceinline__ uint64_t desc_plus(uint64_t d, uint32_t bytes) {
  return (d & 0xFFFFFFFF00000000ull) | uint32_t(uint32_t(d) + (bytes >> 4));
}

__device__ __forceinline__ void fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>  // wait until at most N committed wgmma groups of this warpgroup are pending
__device__ __forceinline__ void wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

// Registers an asynchronous wgmma reads or writes must not be touched by the compiler in between (CUTLASS's
// warpgroup_fence_operand): this empty asm "redefines" them at a point no code moves across, so after
// wait() every use is ordered after the wait.
template <int R>
__device__ __forceinline__ void fence_regs(float (&r)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int R>
__device__ __forceinline__ void fence_regs(uint32_t (&r)[R][2]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+r"(r[i][0]), "+r"(r[i][1])::"memory");
}
template <int R>
__device__ __forceinline__ void fence_regs(uint32_t (&r)[R][4]) {
#pragma unroll
  for (int i = 0; i < R; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) asm volatile("" : "+r"(r[i][j])::"memory");
}

// Generic-proxy shared stores (st.shared, cp.async) before the tensor cores or TMA read them.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// The bulk-copy groups (TMA stores): commit, wait until their shared-memory reads are done, wait until complete.
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory"); }
__device__ __forceinline__ void bulk_wait() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }

}  // namespace flash::wg
