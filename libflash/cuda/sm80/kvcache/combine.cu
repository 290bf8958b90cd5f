// libflash/cuda/sm80/kvcache/combine.cu -- merging partial attention results (O_p, LSE_p) of the same queries:
// the split-KV combine of flash_fwd_kvcache and flash_combine on CUDA tensors. One warp per output row:
//
//   M = max_p LSE_p,  w_p = exp(LSE_p - M),  O = sum_p w_p O_p / sum_p w_p,  LSE = M + log(sum_p w_p)
//
// in fp32 (the CPU path uses double). A part with LSE = -inf adds nothing; a row where every part is -inf gets
// O = 0, LSE = -inf; a NaN LSE makes the row NaN. The parts are read twice (LSE for M, then O), so a lane
// keeps no per-part state and any number of parts fits.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "../../../error.h"
#include "../../pdl.cuh"
#include "../../ptx/hopper.cuh"
#include "../../runtime.h"
#include "plan.h"

namespace flash::sm80::kvcache {
namespace {

constexpr int kRowsPerCta = 4;  // one warp a row
constexpr int kMaxLaneElems = 256 / 32;

template <DType T> struct Storage;
template <> struct Storage<DType::FP32> { using type = float; };
template <> struct Storage<DType::FP16> { using type = __half; };
template <> struct Storage<DType::BF16> { using type = __nv_bfloat16; };
template <DType T>
__device__ __forceinline__ float load(const void* base, int64_t i) {
  return float(static_cast<const typename Storage<T>::type*>(base)[i]);
}

// Element strides of one part (or of the output).
struct PartView {
  const void* o;
  const float* lse;
  int64_t o_batch, o_row, o_head, lse_batch, lse_head, lse_row;
};

// The split-KV workspace: part s at a fixed stride from part 0.
struct StridedParts {
  PartView first;
  int64_t o_part_stride, lse_part_stride;
  __device__ __forceinline__ PartView operator[](int s) const {
    PartView v = first;
    v.o = static_cast<const float*>(first.o) + s * o_part_stride;
    v.lse = first.lse + s * lse_part_stride;
    return v;
  }
};
// flash_combine: each part its own tensors (descriptors in the kernel's parameter space, 16 KB at most).
struct ListedParts {
  PartView part[kMaxCombineParts];
  __device__ __forceinline__ const PartView& operator[](int s) const { return part[s]; }
};

struct Output {
  void* o;
  float* lse;  // null: not written
  int64_t o_batch, o_row, o_head, lse_batch, lse_head, lse_row;
  int32_t batch, seqlen, heads, head_dim, num_parts;
};

template <class Parts, DType kIn, DType kOut>
__global__ void __launch_bounds__(32 * kRowsPerCta) combine_kernel(const __grid_constant__ Output out,
                                                                   const __grid_constant__ Parts parts) {
  // The split combine is a PDL secondary on sm_90 (launch below): its CTAs start while the attention kernel runs and
  // wait here until that kernel has finished and its partials are visible. Elsewhere (flash_combine, sm_80) a no-op.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  ptx::wait_dependency();
#endif
  const int lane = threadIdx.x % 32;
  const int64_t row = int64_t(blockIdx.x) * kRowsPerCta + threadIdx.x / 32;
  if (row >= int64_t(out.batch) * out.seqlen * out.heads) return;
  const int h = int(row % out.heads), i = int(row / out.heads % out.seqlen), b = int(row / out.heads / out.seqlen);
  const int n = out.num_parts, d = out.head_dim;

  float m = -INFINITY;
  bool nan = false;
  for (int s = lane; s < n; s += 32) {
    const PartView v = parts[s];
    const float l = v.lse[b * v.lse_batch + h * v.lse_head + i * v.lse_row];
    nan |= l != l;
    m = fmaxf(m, l);
  }
  for (int x = 16; x > 0; x /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, x));
  nan = __any_sync(0xffffffffu, nan);

  float acc[kMaxLaneElems] = {};
  float sum = 0.f;
  if (!nan && m != -INFINITY) {
    for (int s = 0; s < n; ++s) {
      const PartView v = parts[s];
      const float l = v.lse[b * v.lse_batch + h * v.lse_head + i * v.lse_row];
      if (l == -INFINITY) continue;
      const float w = expf(l - m);
      sum += w;
      const int64_t base = b * v.o_batch + i * v.o_row + h * v.o_head;
#pragma unroll
      for (int x = 0; x < kMaxLaneElems; ++x)
        if (lane + 32 * x < d) acc[x] += w * load<kIn>(v.o, base + lane + 32 * x);
    }
  }
  using TOut = typename Storage<kOut>::type;
  TOut* o = static_cast<TOut*>(out.o) + b * out.o_batch + i * out.o_row + h * out.o_head;
  const float inv = sum > 0.f ? 1.f / sum : 0.f;
#pragma unroll
  for (int x = 0; x < kMaxLaneElems; ++x)
    if (lane + 32 * x < d) o[lane + 32 * x] = TOut(nan ? NAN : acc[x] * inv);
  if (out.lse != nullptr && lane == 0)
    out.lse[b * out.lse_batch + h * out.lse_head + i * out.lse_row] = nan ? NAN : sum > 0.f ? m + logf(sum) : -INFINITY;
}

// The split combine (StridedParts, the workspace's partials) is launched as a programmatic dependent of the stream's
// previous kernel, the split attention kernel, which lets its dependents start early: the combine's launch and CTA
// start overlap the attention kernel's last CTAs instead of following them (one launch gap less a decode call, where
// the two kernels take ~25 us in all). flash_combine (ListedParts) follows whatever the caller ran: a plain launch.
template <class Parts, DType kIn, DType kOut>
int32_t launch(const Output& out, const Parts& parts, void* stream) {
  constexpr bool kPdl = std::is_same_v<Parts, StridedParts>;
  const int64_t rows = int64_t(out.batch) * out.seqlen * out.heads;
  if (rows == 0) return FLASH_OK;
  const int64_t ctas = (rows + kRowsPerCta - 1) / kRowsPerCta;
  if (ctas > 0x7fffffff) return fail(FLASH_ERROR_UNSUPPORTED, "combine: ", rows, " rows exceed one launch");
  auto* kernel = combine_kernel<Parts, kIn, kOut>;
  const auto s = static_cast<cudaStream_t>(stream);
  if (!kPdl || !cuda::launch_pdl_secondary(kernel, dim3(unsigned(ctas)), dim3(32 * kRowsPerCta), 0, s, out, parts))
    kernel<<<unsigned(ctas), 32 * kRowsPerCta, 0, s>>>(out, parts);
  return cuda::check_launch("kvcache combine kernel");
}

}  // namespace

int32_t launch_split_combine(const KernelParams& k, DType dtype, void* stream) {
  Output out{k.o,
             k.lse,
             k.o_batch_stride,
             k.o_row_stride,
             k.o_head_stride,
             k.lse_batch_stride,
             k.lse_head_stride,
             k.lse_row_stride,
             k.batch,
             k.seqlen_new,
             k.heads_q,
             k.head_dim,
             k.num_splits};
  // Workspace layout (plan.h): [split][batch][heads_q][seqlen_new][head_dim].
  const int64_t d = k.head_dim, sn = k.seqlen_new, hq = k.heads_q;
  StridedParts parts{{k.o_part, k.lse_part, hq * sn * d, d, sn * d, hq * sn, sn, 1},
                     int64_t(k.batch) * hq * sn * d,
                     int64_t(k.batch) * hq * sn};
  if (dtype == DType::BF16) return launch<StridedParts, DType::FP32, DType::BF16>(out, parts, stream);
  return launch<StridedParts, DType::FP32, DType::FP16>(out, parts, stream);
}

int32_t launch_combine(const CombineParams& p) {
  if (p.num_parts > kMaxCombineParts || p.head_dim > 32 * kMaxLaneElems) return FLASH_ERROR_INTERNAL;  // supports_combine
  Output out{p.o,
             p.lse,
             p.o_batch_stride,
             p.o_row_stride,
             p.o_head_stride,
             p.lse_batch_stride,
             p.lse_head_stride,
             p.lse_row_stride,
             p.batch,
             p.seqlen,
             p.heads,
             p.head_dim,
             p.num_parts};
  ListedParts parts{};
  for (int s = 0; s < p.num_parts; ++s) {
    const CombinePart& x = p.parts[s];
    parts.part[s] = {x.o, x.lse, x.o_batch_stride, x.o_row_stride, x.o_head_stride,
                     x.lse_batch_stride, x.lse_head_stride, x.lse_row_stride};
  }
  const auto go = [&](auto in) -> int32_t {
    constexpr DType kIn = decltype(in)::value;
    switch (p.o_dtype) {
      case DType::FP32: return launch<ListedParts, kIn, DType::FP32>(out, parts, p.stream);
      case DType::FP16: return launch<ListedParts, kIn, DType::FP16>(out, parts, p.stream);
      case DType::BF16: return launch<ListedParts, kIn, DType::BF16>(out, parts, p.stream);
    }
    return FLASH_ERROR_INTERNAL;
  };
  switch (p.part_dtype) {
    case DType::FP32: return go(std::integral_constant<DType, DType::FP32>{});
    case DType::FP16: return go(std::integral_constant<DType, DType::FP16>{});
    case DType::BF16: return go(std::integral_constant<DType, DType::BF16>{});
  }
  return FLASH_ERROR_INTERNAL;
}

}  // namespace flash::sm80::kvcache
