// capi/tensor_checks.h -- the checks every entry point makes of one flash_tensor's own fields (pointer, ndim,
// dtype, alignment, device, shape, strides, span) and of an output's strides, shared by validate.cpp (flash_fwd,
// flash_bwd) and validate_kvcache.cpp (flash_fwd_kvcache, flash_combine) so every entry point refuses the same inputs
// with the same words. `name` is a const char* or a std::string.
#pragma once
#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "../flash.h"
#include "../libflash/error.h"

namespace flash {

inline constexpr int64_t kMaxInt32 = std::numeric_limits<int32_t>::max();

inline int64_t esize(int32_t dtype) { return dtype == FLASH_DTYPE_FP32 ? 4 : 2; }

inline bool valid_dtype(int32_t t) { return t == FLASH_DTYPE_FP32 || t == FLASH_DTYPE_FP16 || t == FLASH_DTYPE_BF16; }

inline const char* dtype_name(int32_t t) {
  switch (t) {
    case FLASH_DTYPE_FP32: return "fp32";
    case FLASH_DTYPE_FP16: return "fp16";
    case FLASH_DTYPE_BF16: return "bf16";
    default: return "unknown";
  }
}

inline std::string device_name(const flash_tensor& t) {
  if (t.device_type == FLASH_DEVICE_CPU) return "cpu";
  if (t.device_type == FLASH_DEVICE_CUDA) return "cuda:" + std::to_string(t.device_id);
  return "device_type " + std::to_string(t.device_type);
}

// Largest element offset reachable in t plus one (the span in elements), or -1 on int64 overflow.
inline int64_t span_elements(const flash_tensor& t) {
  int64_t last = 0;
  for (int i = 0; i < t.ndim; ++i) {
    const int64_t extent = t.shape[i] - 1;
    if (extent > 0 && t.strides[i] > (std::numeric_limits<int64_t>::max() - last) / extent) return -1;
    last += extent * t.strides[i];
  }
  return last + 1;
}

// Checks one tensor's own fields: pointer, ndim, dtype, device, shape and strides.
template <class Name>
int32_t check_tensor(const flash_tensor& t, const Name& name, int ndim, bool contiguous_last) {
  if (t.data == nullptr) return fail(FLASH_ERROR_NULL_POINTER, name, ".data is NULL");
  if (t.ndim != ndim) return fail(FLASH_ERROR_BAD_SHAPE, name, ".ndim is ", t.ndim, " but must be ", ndim);
  if (!valid_dtype(t.dtype)) return fail(FLASH_ERROR_UNSUPPORTED_DTYPE, name, ".dtype is ", t.dtype, ", not a FLASH_DTYPE_* value");
  // Every backend loads elements as their type (vector loads on the GPU): a pointer between elements is a caller's
  // bug (a byte offset taken for an element offset), undefined behaviour on the CPU and a fault on the GPU.
  if (const uintptr_t a = reinterpret_cast<uintptr_t>(t.data); a % (t.dtype == FLASH_DTYPE_FP32 ? 4 : 2) != 0)
    return fail(FLASH_ERROR_INVALID_ARGUMENT, name, ".data is not aligned to its ", dtype_name(t.dtype), " elements (",
                t.dtype == FLASH_DTYPE_FP32 ? 4 : 2, " bytes)");
  if (t.device_type != FLASH_DEVICE_CPU && t.device_type != FLASH_DEVICE_CUDA)
    return fail(FLASH_ERROR_INVALID_ARGUMENT, name, ".device_type is ", t.device_type, ", not a FLASH_DEVICE_* value");
  if (t.device_id < 0) return fail(FLASH_ERROR_INVALID_ARGUMENT, name, ".device_id is ", t.device_id, " but must be >= 0");
  if (t.device_type == FLASH_DEVICE_CPU && t.device_id != 0)
    return fail(FLASH_ERROR_INVALID_ARGUMENT, name, ".device_id is ", t.device_id,
                " but the CPU is device 0 (a CPU tensor's device_id must be 0)");
  int64_t elements = 1;
  for (int i = 0; i < ndim; ++i) {
    if (t.shape[i] <= 0) return fail(FLASH_ERROR_BAD_SHAPE, name, ".shape[", i, "] is ", t.shape[i], " but must be positive");
    if (t.shape[i] > kMaxInt32)
      return fail(FLASH_ERROR_BAD_SHAPE, name, ".shape[", i, "] is ", t.shape[i], ", larger than 2^31-1");
    if (elements > std::numeric_limits<int64_t>::max() / t.shape[i])
      return fail(FLASH_ERROR_BAD_SHAPE, name, " has more than 2^63 elements");
    elements *= t.shape[i];
    if (t.strides[i] < 0) return fail(FLASH_ERROR_BAD_STRIDE, name, ".strides[", i, "] is ", t.strides[i], " but must be >= 0");
  }
  if (contiguous_last && t.strides[ndim - 1] != 1 && t.shape[ndim - 1] > 1)
    return fail(FLASH_ERROR_BAD_STRIDE, name, ".strides[", ndim - 1, "] is ", t.strides[ndim - 1],
                " but the last dimension must be contiguous (stride 1)");
  const int64_t span = span_elements(t);
  if (span < 0 || span > std::numeric_limits<int64_t>::max() / esize(t.dtype))
    return fail(FLASH_ERROR_BAD_STRIDE, name, " spans more than 2^63 bytes with these strides");
  return FLASH_OK;
}

// An output must not have two indices that map to one address (e.g. a stride of 0): the result would
// depend on the order of writes. Sort dims by stride; each must step past everything inside it.
template <class Name>
int32_t check_no_self_overlap(const flash_tensor& t, const Name& name) {
  std::vector<int> dims;
  for (int i = 0; i < t.ndim; ++i)
    if (t.shape[i] > 1) dims.push_back(i);
  std::sort(dims.begin(), dims.end(), [&](int a, int b) { return t.strides[a] < t.strides[b]; });
  int64_t inner_span = 1;  // elements covered by the dims already placed
  for (int d : dims) {
    if (t.strides[d] < inner_span)
      return fail(FLASH_ERROR_BAD_STRIDE, name, ".strides[", d, "] is ", t.strides[d],
                  ", so distinct output elements would share memory (needs >= ", inner_span, ")");
    inner_span = t.strides[d] * (t.shape[d] - 1) + inner_span;
  }
  return FLASH_OK;
}

}  // namespace flash
