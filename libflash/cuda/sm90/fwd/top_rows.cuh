// libflash/cuda/sm90/fwd/top_rows.cuh -- d64 causal's first rows (plan.cpp, d64_causal_top_rows): the rows
// of a head's partial 192-row tile, as a view of the caller's problem (plan.h, rows_view), on the sm80 forward's body
// with 64 x 64 tiles on 4 warps (16 rows a warp). Those rows see one key block, so a CTA is a few microseconds of load
// latency; launched behind the three-warpgroup kernel with programmatic stream serialisation, its CTAs start on the SMs
// that kernel's tail leaves instead of behind its end. Compiled for sm_90a only, beside the sm90 kernels.
#pragma once
#include "../../sm80/fwd/fwd_kernel.cuh"
#include "../../pdl.cuh"

namespace flash::sm90 {

template <DType kDType>
using TopRowsTraits = sm80::Traits<64, 64, 64, 4, 1, kDType>;

// A PDL secondary: each CTA ends no earlier than the kernel it was launched behind (griddepcontrol.wait, a no-op
// without PDL), so whatever follows in the stream sees both kernels' outputs.
template <class K>
__global__ void __launch_bounds__(K::kThreads) top_rows_kernel(const __grid_constant__ FwdParams p) {
  sm80::fwd_body<K, false>(p);
  if (threadIdx.x == 0) asm volatile("griddepcontrol.wait;\n" ::: "memory");
}

template <DType kDType>
int32_t launch_top_rows(const FwdParams& p) {
  using K = TopRowsTraits<kDType>;
  static_assert(K::kSmemBytes <= 48 * 1024, "no dynamic shared memory opt-in");
  const int64_t ctas = int64_t{(p.seqlen_q + K::kBlockM - 1) / K::kBlockM} * p.heads_q * p.batch;
  if (ctas > 0x7fffffff) return fail(FLASH_ERROR_UNSUPPORTED, "sm90 top rows: ", ctas, " query blocks exceed one launch");
  const dim3 grid{unsigned(ctas)}, block{unsigned(K::kThreads)};
  const auto stream = static_cast<cudaStream_t>(p.stream);
  if (cuda::launch_pdl_secondary(top_rows_kernel<K>, grid, block, size_t(K::kSmemBytes), stream, p))
    return cuda::check_launch("sm90 top rows kernel (PDL)");
  top_rows_kernel<K><<<grid, block, size_t(K::kSmemBytes), stream>>>(p);
  return cuda::check_launch("sm90 top rows kernel");
}

}  // namespace flash::sm90

