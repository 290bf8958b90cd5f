// capi/tensor_checks.h -- the checks every entry point makes of one flash_tensor's own fields (pointer, ndim,
// dtype, alignment, device, shape, strides, span) and of an output's strides, shared by validate.cpp (flash_fwd,
// flash_bwd) and validate_kvcache.cpp (flash_fwd_kvcache, flash_combine) so every entry point refuses the same inputs
// with the same words, and the overlap rule (class Arrays) every entry point applies to the arrays it reads and writes.
// `name` is a const char* or a std::string.
#pragma once
#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
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

// Largest element offset reachable in t plus one (the span in elements), or -1 when that does not fit in int64. Every
// step is overflow-checked, the final "+ 1" too: a stride of INT64_MAX over two elements puts the last offset at exactly
// INT64_MAX, whose span INT64_MAX + 1 is signed overflow (undefined behaviour), not a number to compare.
inline int64_t span_elements(const flash_tensor& t) {
  int64_t last = 0;
  for (int i = 0; i < t.ndim; ++i) {
    const int64_t extent = t.shape[i] - 1;
    if (extent <= 0) continue;
    int64_t step = 0;
    if (__builtin_mul_overflow(extent, t.strides[i], &step) || __builtin_add_overflow(last, step, &last)) return -1;
  }
  int64_t span = 0;
  if (__builtin_add_overflow(last, int64_t{1}, &span)) return -1;
  return span;
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

// The arrays one call reads and writes, as byte ranges on a device, so that every array it writes can be
// checked against every array it reads and every other array it writes: a written array overlapping one
// the call reads would be read after it was overwritten (a block mask validated, then read again as
// garbage; a cache_seqlens entry checked, then overwritten by the workspace's partial results), and two written
// arrays overlapping would race. Every entry point lists its arrays here -- flash_fwd and flash_bwd (validate.cpp:
// tensors, the block mask's index arrays, the varlen arrays, the workspace), flash_fwd_kvcache (validate_kvcache.cpp:
// q, the caches, k_new, v_new, o, lse, the index arrays, the workspace) and flash_combine (the parts, o, lse) -- and
// calls check_disjoint() once, after each array's own fields were checked (check_tensor: its span fits in 2^63 bytes).
class Arrays {
 public:
  template <class Name>
  void read(const flash_tensor& t, const Name& name) { add(reads_, t, name); }
  template <class Name>
  void write(const flash_tensor& t, const Name& name) { add(writes_, t, name); }
  // An int32 index array of `ndim` dimensions (shape and element strides given) at `data` on a device: `status`
  // (FLASH_ERROR_BAD_MASK for a block mask's) if its span does not fit in 2^63 bytes. NULL: nothing read.
  int32_t read_int32(const void* data, int ndim, const int64_t* shape, const int64_t* strides, int32_t device_type,
                     int32_t device_id, const char* name, int32_t status) {
    if (data == nullptr) return FLASH_OK;
    int64_t last = 0;
    for (int i = 0; i < ndim; ++i) {
      const int64_t extent = shape[i] - 1;
      if (extent > 0 && strides[i] > (std::numeric_limits<int64_t>::max() / 4 - last) / extent)
        return fail(status, name, " spans more than 2^63 bytes with these strides");
      if (extent > 0) last += extent * strides[i];
    }
    add_bytes(reads_, data, static_cast<uint64_t>(last + 1) * 4, device_type, device_id, name);
    return FLASH_OK;
  }
  // Raw bytes the call may write (the caller's workspace).
  void write_bytes(const void* data, uint64_t bytes, int32_t device_type, int32_t device_id, const char* name) {
    if (data != nullptr && bytes > 0) add_bytes(writes_, data, bytes, device_type, device_id, name);
  }
  // FLASH_ERROR_INVALID_ARGUMENT naming the first written array that overlaps an array read or another array
  // written ("o overlaps block_mask->kv_indices in memory").
  int32_t check_disjoint() const {
    for (size_t i = 0; i < writes_.size(); ++i) {
      for (const Range& r : reads_)
        if (writes_[i].overlaps(r)) return fail(FLASH_ERROR_INVALID_ARGUMENT, writes_[i].name, " overlaps ", r.name, " in memory");
      for (size_t j = 0; j < i; ++j)
        if (writes_[i].overlaps(writes_[j]))
          return fail(FLASH_ERROR_INVALID_ARGUMENT, writes_[i].name, " overlaps ", writes_[j].name, " in memory");
    }
    return FLASH_OK;
  }

 private:
  struct Range {
    uintptr_t lo, hi;  // [lo, hi)
    int32_t device_type, device_id;
    std::string name;
    bool overlaps(const Range& o) const {
      return device_type == o.device_type && device_id == o.device_id && lo < o.hi && o.lo < hi;
    }
  };
  static void add_bytes(std::vector<Range>& to, const void* data, uint64_t bytes, int32_t device_type, int32_t device_id,
                        std::string name) {
    const uintptr_t lo = reinterpret_cast<uintptr_t>(data);
    // A range past the end of the address space is clipped there (it still overlaps whatever it reaches).
    const uintptr_t hi = bytes > std::numeric_limits<uintptr_t>::max() - lo ? std::numeric_limits<uintptr_t>::max()
                                                                             : lo + static_cast<uintptr_t>(bytes);
    to.push_back({lo, hi, device_type, device_id, std::move(name)});
  }
  // A tensor whose own fields were checked (check_tensor: its span fits in 2^63 bytes). NULL data: not an array of
  // the call (an optional output left out).
  template <class Name>
  static void add(std::vector<Range>& to, const flash_tensor& t, const Name& name) {
    if (t.data == nullptr) return;
    add_bytes(to, t.data, static_cast<uint64_t>(span_elements(t)) * static_cast<uint64_t>(esize(t.dtype)), t.device_type,
              t.device_id, std::string(name));
  }
  std::vector<Range> reads_, writes_;
};

}  // namespace flash
