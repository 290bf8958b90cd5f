// libflash/cuda/ptx/plan.h -- the host-side pieces every CUDA kernel family's plan uses (no CUDA headers):
// what a plan reads of the device, the one switch from a call's dtype to a compiled one, and the switch
// from a plan's row of an instantiation table to compile-time template arguments.
//
// The pattern (sm80/fwd/fwd.cpp, sm80/bwd/bwd.cpp): plan(params, device) picks the variant -- which
// instantiation, its tiles, its shared memory, its workspace -- and says why when none fits; supports(),
// workspace() and run() all call it, so the three can never disagree. run() then turns the plan into a
// call of one instantiation with with_dtype() and with_index().
#pragma once
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <type_traits>
#include <utility>

#include "../../params.h"
#include "../runtime.h"

namespace flash::cuda {

// What a plan reads of the device (three cudaDeviceGetAttribute queries, cheap enough for every call).
struct DeviceLimits {
  int compute_capability = 0;          // major * 10 + minor, e.g. 90
  int64_t smem_per_block_optin = 0;    // dynamic shared memory one block may opt in to, bytes
  int64_t smem_per_sm = 0;             // shared memory of one SM, bytes
};
inline DeviceLimits device_limits(int device_id) {
  return {compute_capability(device_id), shared_mem_per_block_optin(device_id), shared_mem_per_sm(device_id)};
}

// The one switch from a call's dtype to typed code: f(std::integral_constant<DType, T>{}) for the 16-bit
// dtypes the tensor-core kernels compile (a plan refuses the others before anything is launched).
template <class F>
int32_t with_dtype(DType t, F&& f) {
  switch (t) {
    case DType::FP16: return f(std::integral_constant<DType, DType::FP16>{});
    case DType::BF16: return f(std::integral_constant<DType, DType::BF16>{});
    default: return FLASH_ERROR_INTERNAL;
  }
}

// cp.async (and TMA) move 16-byte chunks: every row start must be 16-byte aligned, so the base pointer must be and
// every stride in use (extent > 1) a multiple of 8 elements of a 16-bit dtype.
inline bool aligned16(const void* ptr, std::initializer_list<std::pair<int64_t, int64_t>> stride_extent) {
  if (reinterpret_cast<uintptr_t>(ptr) % 16 != 0) return false;
  for (const auto& [stride, extent] : stride_extent)
    if (extent > 1 && stride % 8 != 0) return false;
  return true;
}

namespace detail {
template <class F, int... I>
int32_t with_index(int index, F&& f, std::integer_sequence<int, I...>) {
  int32_t status = FLASH_ERROR_INTERNAL;
  (void)((index == I ? (status = f(std::integral_constant<int, I>{}), true) : false) || ...);
  return status;
}
}  // namespace detail

// f(std::integral_constant<int, index>{}) for a runtime index in [0, N): a plan names a row of a constexpr
// table, and the row's fields become template arguments. FLASH_ERROR_INTERNAL for an index out of range.
template <int N, class F>
int32_t with_index(int index, F&& f) {
  return detail::with_index(index, f, std::make_integer_sequence<int, N>{});
}

}  // namespace flash::cuda
