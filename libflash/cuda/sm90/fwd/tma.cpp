// libflash/cuda/sm90/fwd/tma.cpp -- tensor maps for the Hopper forward's TMA loads and stores, and the dynamic order's
// launch epochs.
//
// cuTensorMapEncodeTiled is a driver function; it is reached through the runtime's driver entry
// point (cudaGetDriverEntryPointByVersion), so libflash still links no libcuda and loads on machines
// without a driver. The map views a [batch, seq, heads, head_dim] tensor with arbitrary element
// strides as 4-D: head_dim innermost, then seq, heads and batch in increasing order of stride (TMA
// walks dimensions outward; sorting keeps every layout the validator accepts expressible). A box is
// {64 columns, box_rows rows, 1, 1}: 128 bytes per row, which TMA's 128-byte swizzle requires.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <mutex>
#include <random>

#include "../../../../flash.h"
#include "../../../error.h"
#include "args.h"

namespace flash::sm90 {

uint32_t next_tile_epoch() {
  static std::atomic<uint32_t> next{[] {
    uint32_t seed = 0x9e3779b9u;
    try {
      seed ^= std::random_device{}();
    } catch (...) {  // (no entropy source: the clock's bits)
    }
    return seed ^ static_cast<uint32_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  }()};
  uint32_t e = 0;
  do e = next.fetch_add(1u, std::memory_order_relaxed);
  while (e < 0x10000u || e >= 0xffff0000u);
  return e;
}

namespace {

PFN_cuTensorMapEncodeTiled_v12000 encode_fn(std::string* why) {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = nullptr;
  static std::string error;
  static std::once_flag once;
  std::call_once(once, [] {
    void* ptr = nullptr;
    cudaDriverEntryPointQueryResult found{};
    const cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000, cudaEnableDefault, &found);
    if (e != cudaSuccess || found != cudaDriverEntryPointSuccess || ptr == nullptr)
      error = std::string("the driver has no cuTensorMapEncodeTiled (") + cudaGetErrorString(e) + ")";
    else
      fn = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(ptr);
  });
  if (fn == nullptr && why != nullptr) *why = error;
  return fn;
}

}  // namespace

int32_t encode_tensor_map(CUtensorMap* map, TensorPos* pos, const void* base, DType dtype, int head_dim, int64_t seq,
                          int64_t heads, int64_t batch, int64_t row_stride, int64_t head_stride, int64_t batch_stride,
                          int box_rows, const char* name) {
  std::string why;
  const auto encode = encode_fn(&why);
  if (encode == nullptr) return fail(FLASH_ERROR_CUDA, "sm90: ", why);
  const int64_t esize = 2;
  // (role, extent, stride in bytes). An axis of extent 1 never steps: give it the largest stride so it
  // sorts last and its (possibly unaligned or zero) stride never reaches TMA.
  struct Axis {
    int role;  // 0 seq, 1 head, 2 batch
    int64_t extent, stride;
  };
  std::array<Axis, 3> ax = {Axis{0, seq, row_stride * esize}, Axis{1, heads, head_stride * esize},
                            Axis{2, batch, batch_stride * esize}};
  int64_t biggest = head_dim * esize;
  for (const Axis& a : ax)
    if (a.extent > 1) biggest = std::max(biggest, a.stride * a.extent);
  biggest = (biggest + 15) / 16 * 16;
  for (Axis& a : ax)
    if (a.extent <= 1) a.stride = biggest;
  std::stable_sort(ax.begin(), ax.end(), [](const Axis& a, const Axis& b) { return a.stride < b.stride; });

  cuuint64_t dims[4] = {cuuint64_t(head_dim), 0, 0, 0};
  cuuint64_t strides[3];
  cuuint32_t box[4] = {64, 1, 1, 1};
  cuuint32_t elem_strides[4] = {1, 1, 1, 1};
  for (int i = 0; i < 3; ++i) {
    dims[i + 1] = cuuint64_t(std::max<int64_t>(ax[i].extent, 1));
    strides[i] = cuuint64_t(ax[i].stride);
    int32_t* slot = ax[i].role == 0 ? &pos->seq : ax[i].role == 1 ? &pos->head : &pos->batch;
    *slot = i + 1;
    if (ax[i].role == 0) box[i + 1] = cuuint32_t(box_rows);
  }
  const CUresult r = encode(map, dtype == DType::BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 4,
                            const_cast<void*>(base), dims, strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                            CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    return fail(FLASH_ERROR_UNSUPPORTED, "sm90: TMA cannot describe tensor ", name, " (cuTensorMapEncodeTiled error ", int(r),
                "; strides in bytes ", strides[0], ", ", strides[1], ", ", strides[2], ")");
  return FLASH_OK;
}

}  // namespace flash::sm90
