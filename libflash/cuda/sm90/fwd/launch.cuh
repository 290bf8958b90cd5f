// libflash/cuda/sm90/fwd/launch.cuh -- the host side of one Hopper forward launch: the kernel's arguments from the plan's
// Launch (plan.cpp decided everything; nothing is re-derived here), tensor maps, the split's counters, and the launch
// itself (behind the previous kernel with programmatic stream serialisation where the plan pairs two kernels).
// One instantiation per variant and dtype: FLASH_SM90_FWD_INSTANTIATE(kD128, BF16) (generate_kernels.py).
#pragma once
#include <cuda_runtime.h>

#include "../../../error.h"
#include "../../runtime.h"
#include "kernel.cuh"
#include "../../pdl.cuh"
#include "top_rows.cuh"

namespace flash::sm90 {

template <Variant V, DType T>
int32_t launch_fwd(const FwdParams& whole, const Launch& l);

template <class K>
int32_t launch(const FwdParams& whole, const Launch& l) {
  if (l.variant != K::kVariant) return fail(FLASH_ERROR_INTERNAL, "sm90: a launch planned for another kernel");
  const FwdParams p = rows_view(whole, l.row_begin, l.row_end);
  if (p.varlen && !K::kVarlen) return fail(FLASH_ERROR_INTERNAL, "sm90: a varlen launch planned for a dense-only kernel");
  Args args{};
  args.p = p;
  // A varlen call's maps describe the packed tensors: total rows, batch extent 1 (the kernel adds each sequence's first
  // row to its coordinates and uses batch index 0).
  const int64_t rows_q = p.varlen ? p.total_q : p.seqlen_q, rows_k = p.varlen ? p.total_k : p.seqlen_k;
  const int64_t batch = p.varlen ? 1 : p.batch;
  if (int32_t st = encode_tensor_map(&args.tq, &args.q_pos, p.q, p.dtype, p.head_dim, rows_q, p.heads_q, batch,
                                     p.q_row_stride, p.q_head_stride, p.q_batch_stride, K::kBlockM, "q");
      st != FLASH_OK)
    return st;
  if (int32_t st = encode_tensor_map(&args.tk, &args.k_pos, p.k, p.dtype, p.head_dim, rows_k, p.heads_kv, batch,
                                     p.k_row_stride, p.k_head_stride, p.k_batch_stride, K::kBlockN, "k");
      st != FLASH_OK)
    return st;
  if (int32_t st = encode_tensor_map(&args.tv, &args.v_pos, p.v, p.dtype, p.head_dim, rows_k, p.heads_kv, batch,
                                     p.v_row_stride, p.v_head_stride, p.v_batch_stride, K::kBlockN, "v");
      st != FLASH_OK)
    return st;
  if constexpr (K::kTmaStoreO)
    if (int32_t st = encode_tensor_map(&args.to, &args.o_pos, p.o, p.dtype, p.head_dim, rows_q, p.heads_q, batch,
                                       p.o_row_stride, p.o_head_stride, p.o_batch_stride, 64, "o");
        st != FLASH_OK)
      return st;
  const int64_t tiles = int64_t{l.num_m_blocks} * p.heads_q * p.batch;
  args.num_m_blocks = l.num_m_blocks;
  args.num_tiles = l.num_tiles;
  args.q_shift = l.q_shift;
  args.sched_stride = l.sched_stride;
  args.ring_tail_heads = l.ring_tail_heads;
  args.l2_group = l.causal.group;
  args.l2_full_groups = l.causal.full_groups;
  args.tail = TailSplit{int32_t(tiles), 0, 0};
  const auto stream = static_cast<cudaStream_t>(p.stream);
  if (l.dynamic && p.workspace != nullptr) {
    // The counter: a 64-bit word at the workspace's first 8-byte boundary, claimed for this launch's epoch by the kernel
    // (tile_scheduler.cuh, take_claim), so nothing zeroes it in the stream ahead of the kernel.
    args.tile_counter = reinterpret_cast<unsigned long long*>((reinterpret_cast<uintptr_t>(p.workspace) + 7) & ~uintptr_t{7});
    args.epoch = next_tile_epoch();
  }
  if (l.tail_role != Launch::kNoTail) {
    if (p.workspace == nullptr || int64_t(p.workspace_size) < tail_workspace_bytes(l.tail, l.grid, K::kHeadDim, K::kConsumers))
      return fail(FLASH_ERROR_INTERNAL, "sm90: the workspace is smaller than the plan's split needs");
    const uintptr_t base = (reinterpret_cast<uintptr_t>(p.workspace) + kTailAlign - 1) & ~uintptr_t(kTailAlign - 1);
    args.tail_count = reinterpret_cast<int32_t*>(base);
    // The counts start from zero: zeroed here, ahead of the kernel that runs the pieces or, for a pair, ahead of its
    // primary, so nothing stands between the two kernels.
    if (l.tail_role != Launch::kPieces)
      if (const cudaError_t e = cudaMemsetAsync(args.tail_count, 0, size_t(tiles - l.tail.whole) * K::kConsumers * 4, stream);
          e != cudaSuccess)
        return cuda::status_from(e, "cudaMemsetAsync(sm90 tail counters)");
    if (l.tail_role != Launch::kRounds) {
      args.tail = l.tail;
      args.tail.pieces_only = l.tail_role == Launch::kPieces;
      args.tail_part = reinterpret_cast<float*>(base + tail_count_bytes(l.grid, K::kConsumers));
    }
  }
  auto* kernel = fwd_kernel<K>;
  if (const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(l.smem_bytes));
      e != cudaSuccess)
    return cuda::status_from(e, "cudaFuncSetAttribute(sm90 fwd, MaxDynamicSharedMemorySize)");
  if (l.pdl == Launch::kSecondary &&
      cuda::launch_pdl_secondary(kernel, dim3(unsigned(l.grid)), dim3(unsigned(K::kThreads)), size_t(l.smem_bytes), stream, args))
    return cuda::check_launch("sm90 fwd kernel (PDL)");
  kernel<<<l.grid, K::kThreads, size_t(l.smem_bytes), stream>>>(args);
  return cuda::check_launch("sm90 fwd kernel");
}

}  // namespace flash::sm90

namespace flash::sm90 {
template <Variant V, DType T>
int32_t launch_variant(const FwdParams& p, const Launch& l) {
  if constexpr (V == Variant::kD64TopRows) return launch_top_rows<T>(rows_view(p, l.row_begin, l.row_end));
  else if constexpr (has_varlen_mode(V))
    return p.varlen ? launch<Traits<V, T, true>>(p, l) : launch<Traits<V, T>>(p, l);  // (a kernel each: Traits::kVarlen)
  else return launch<Traits<V, T>>(p, l);
}
}  // namespace flash::sm90

#define FLASH_SM90_FWD_INSTANTIATE(VARIANT, DTYPE)                                                                   \
  template <>                                                                                                        \
  int32_t flash::sm90::launch_fwd<flash::sm90::Variant::VARIANT, flash::DType::DTYPE>(const flash::FwdParams& p,     \
                                                                                    const flash::sm90::Launch& l) { \
    return launch_variant<flash::sm90::Variant::VARIANT, flash::DType::DTYPE>(p, l);                                \
  }
