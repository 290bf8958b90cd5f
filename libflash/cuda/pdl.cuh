// libflash/cuda/pdl.cuh -- the launch of a programmatic-dependent-launch secondary, shared by the Hopper forward's
// two-kernel forms (sm90/fwd: plan.h, Launch::Pdl; launch.cuh, top_rows.cuh) and the KV-cache family's split combine
// (sm80/kvcache/combine.cu).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

namespace flash::cuda {

// Launches `kernel` with programmatic stream serialisation, so that its CTAs may start while the stream's previous
// kernel (a PDL primary, which executes griddepcontrol.launch_dependents) still runs. Returns false, the launch error
// cleared, when the runtime refuses the attribute: the caller then launches plainly -- the same result, the two
// kernels one after the other.
template <class... Params, class... Args>
bool launch_pdl_secondary(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem_bytes, cudaStream_t stream,
                          const Args&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem_bytes;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  if (cudaLaunchKernelEx(&cfg, kernel, args...) == cudaSuccess) return true;
  (void)cudaGetLastError();
  return false;
}

}  // namespace flash::cuda
