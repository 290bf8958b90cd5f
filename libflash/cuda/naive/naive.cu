// libflash/cuda/naive/naive.cu -- standard (materialised) attention on the GPU: the baseline that the
// FlashAttention paper compares against and that fa-bench times flash against.
//
//   S = scale * Q K^T      cuBLAS (cublasGemmStridedBatchedEx), fp16/bf16 in, fp32 accumulate, S stored fp32
//   P = softmax(S + mask)  one CTA per row; writes P in the input dtype (as standard attention does) and LSE
//   O = P V                cuBLAS, fp32 accumulate, O stored in the input dtype
//
// The backward (bottom of this file) materialises S, dP (fp32), P and dS (input dtype) per head the same
// way: 5 cuBLAS GEMMs and one row kernel, GQA sums in fp32, deterministic (no atomics anywhere).
//
// S and P are written in full to device memory (the workspace): N x N per head, which is the point of
// the baseline. S is kept in fp32 (not the input dtype): the GEMM accumulates in fp32 anyway, and
// rounding scores to 16 bits before the exponential costs accuracy (a bf16 score of magnitude 20 is off
// by up to 0.06, i.e. 6% in exp()); fp32 S costs 2 more bytes per element of memory traffic.
//
// Heads are processed in chunks: one chunk is up to kChunkBudget bytes of S + P (at least one whole head,
// whatever its size), so memory is bounded by the chunk, not by batch * heads. A chunk is a run of kv
// heads of one batch entry and one position r inside the GQA group: query heads hk * head_ratio + r for
// hk in [hk0, hk0 + c). Their Q/O pointers are then evenly spaced (head_ratio * head stride) and so are
// K/V's (head stride), which is what a strided-batched GEMM needs; batch strides are handled by the
// loop. Row strides become cuBLAS leading dimensions (they must be >= head_dim and fit an int).
//
// Workspace layout (base rounded up to 256 bytes):
//   [cuBLAS workspace, kCublasWorkspace bytes][S: c * seqlen_q * ld fp32][P: c * seqlen_q * ld dtype]
// with ld = seqlen_k rounded up to 8, so every row of S and P is 32-byte aligned (vector access) and
// leading dimensions suit the tensor cores.
//
// Mask: query i sees key j iff window_visible(i, j) (params.h) and, with a block mask, key block j /
// block_n is listed for query block i / block_m of (b, h). Device-resident block masks cannot be
// validated on the host, so entries outside [0, num key blocks) and counts outside [0, max_kv_blocks]
// are ignored / clamped rather than read out of bounds. A row with no visible key gets P = 0,
// LSE = -inf, and so O = 0.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <string>

#include "../../../flash.h"
#include "../../algorithm.h"
#include "../../error.h"
#include "../runtime.h"
#include "cublas_dl.h"

namespace flash {
namespace cuda {
namespace naive {
namespace {

constexpr size_t kAlign = 256;
constexpr size_t kCublasWorkspace = size_t{32} << 20;  // NVIDIA's recommendation for Hopper
constexpr unsigned __int128 kChunkBudget = (unsigned __int128)1 << 30;  // bytes of S + P per chunk (>= 1 head)
constexpr int kMaxChunkHeads = 65535;                                   // gridDim.y
constexpr int kSoftmaxThreads = 256;
constexpr int64_t kMaxBitmapWords = 8 * 1024;  // 32 KiB of shared memory: block masks up to 262144 key blocks

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// The cuBLAS leading dimension for a [rows, head_dim] matrix of row stride `stride`. With a single row the
// stride is never used, so any value is accepted (a caller may well pass 0 there).
int64_t lead_dim(int64_t stride, int64_t rows, int64_t head_dim) {
  return rows == 1 && (stride < head_dim || stride > INT_MAX) ? head_dim : stride;
}
int64_t ld_of(const FwdParams& p) { return round_up(p.seqlen_k, 8); }
int64_t key_blocks(const FwdParams& p) { return p.has_block_mask ? (int64_t{p.seqlen_k} + p.block_mask.block_n - 1) / p.block_mask.block_n : 0; }

// Bytes of S + P for one head, exactly (128-bit: seqlen_q * ld * 6 can exceed 2^64 in principle).
unsigned __int128 head_bytes(const FwdParams& p) {
  return (unsigned __int128)(uint64_t)p.seqlen_q * (uint64_t)ld_of(p) * (sizeof(float) + dtype_size(p.dtype));
}

// kv heads per chunk: as many as fit the budget (at least 1), spread evenly over the chunks.
int chunk_heads(const FwdParams& p) {
  const unsigned __int128 per = head_bytes(p);
  unsigned __int128 fit = per == 0 ? 1 : kChunkBudget / per;
  const int64_t cap = std::min<int64_t>(p.heads_kv, kMaxChunkHeads);
  const int64_t maxc = std::max<int64_t>(1, std::min<int64_t>(cap, fit > (unsigned __int128)cap ? cap : (int64_t)fit));
  const int64_t chunks = (p.heads_kv + maxc - 1) / maxc;
  return static_cast<int>((p.heads_kv + chunks - 1) / chunks);
}

struct Layout {
  size_t total;       // bytes the caller must provide (including alignment slack); SIZE_MAX if it overflows
  size_t s_offset;    // from the aligned base
  size_t p_offset;
};

Layout layout(const FwdParams& p) {
  const unsigned __int128 elems = (unsigned __int128)(uint64_t)chunk_heads(p) * (uint64_t)p.seqlen_q * (uint64_t)ld_of(p);
  const unsigned __int128 s_bytes = elems * sizeof(float);
  const unsigned __int128 p_bytes = elems * dtype_size(p.dtype);
  const unsigned __int128 s_off = kCublasWorkspace;
  const unsigned __int128 p_off = s_off + (s_bytes + kAlign - 1) / kAlign * kAlign;
  const unsigned __int128 total = kAlign + p_off + p_bytes;
  // Anything past half the address space cannot be allocated: report SIZE_MAX, which the allocator
  // turns into FLASH_ERROR_OUT_OF_MEMORY (and a caller's workspace into WORKSPACE_TOO_SMALL).
  if (total > (unsigned __int128)(SIZE_MAX / 2)) return {SIZE_MAX, 0, 0};
  return {static_cast<size_t>(total), static_cast<size_t>(s_off), static_cast<size_t>(p_off)};
}

// ---- Softmax kernel --------------------------------------------------------------------------------

// float -> the 16 bits of T, round to nearest even.
template <class T> __device__ __forceinline__ unsigned int bits16(float x);
template <> __device__ __forceinline__ unsigned int bits16<__half>(float x) { return __half_as_ushort(__float2half_rn(x)); }
template <> __device__ __forceinline__ unsigned int bits16<__nv_bfloat16>(float x) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(x));
}

// Four consecutive elements of P in one 8-byte store (dst is 8-byte aligned: rows are 32-byte aligned).
template <class T>
__device__ __forceinline__ void store4(T* dst, const float (&x)[4]) {
  uint2 w;
  w.x = bits16<T>(x[0]) | (bits16<T>(x[1]) << 16);
  w.y = bits16<T>(x[2]) | (bits16<T>(x[3]) << 16);
  *reinterpret_cast<uint2*>(dst) = w;
}

// Merges (m2, l2) into (m, l): the running max and the sum of exp(x - max).
__device__ __forceinline__ void merge(float& m, float& l, float m2, float l2) {
  const float mx = fmaxf(m, m2);
  if (mx == -INFINITY) return;  // both empty
  l = l * __expf(m - mx) + l2 * __expf(m2 - mx);
  m = mx;
}

struct ChunkArgs {
  const float* s;
  void* pmat;
  int64_t ld;        // elements between rows of S and of P
  int64_t batch;     // b of this chunk
  int64_t h0;        // query head of blockIdx.y == 0
  int64_t h_step;    // query heads between consecutive blockIdx.y (head_ratio)
};

// The mask of one row: query i of head h of batch entry `batch` sees key j iff j is in [lo, hi] (the
// window, clamped to [0, seqlen_k)) and, with a block mask, key block j / block_n is set in `bitmap` (shared
// memory of (key blocks + 31) / 32 words, filled by the whole CTA: every thread must call row_mask).
template <bool kBlockMask>
struct RowMask {
  int64_t lo, hi;
  int block_n;
  const unsigned int* bitmap;
  __device__ __forceinline__ bool visible(int64_t j) const {
    if (j < lo || j > hi) return false;
    if constexpr (kBlockMask) {
      const int64_t kb = j / block_n;
      return (bitmap[kb >> 5] >> (kb & 31)) & 1u;
    }
    return true;
  }
};

template <bool kBlockMask>
__device__ RowMask<kBlockMask> row_mask(const FwdParams& p, int64_t batch, int64_t h, int64_t i, unsigned int* bitmap) {
  const int64_t sk = p.seqlen_k;
  const int64_t diag = i + p.diag_offset;
  RowMask<kBlockMask> m;
  m.lo = p.window_left >= 0 ? max(diag - (int64_t)p.window_left, (int64_t)0) : 0;
  m.hi = p.window_right >= 0 ? min(diag + (int64_t)p.window_right, sk - 1) : sk - 1;
  m.block_n = 1;
  m.bitmap = bitmap;
  if constexpr (kBlockMask) {
    const BlockMaskParams& bm = p.block_mask;
    m.block_n = bm.block_n;
    const int64_t nkb = (sk + bm.block_n - 1) / bm.block_n;
    const int64_t words = (nkb + 31) / 32;
    for (int64_t w = threadIdx.x; w < words; w += blockDim.x) bitmap[w] = 0u;
    __syncthreads();
    const int64_t qb = i / bm.block_m;
    int32_t n = bm.kv_num_blocks[batch * bm.num_batch_stride + h * bm.num_head_stride + qb * bm.num_qblock_stride];
    n = min(max(n, 0), bm.max_kv_blocks);
    const int32_t* list = bm.kv_indices + batch * bm.idx_batch_stride + h * bm.idx_head_stride + qb * bm.idx_qblock_stride;
    for (int32_t t = threadIdx.x; t < n; t += blockDim.x) {
      const int32_t kb = list[(int64_t)t * bm.idx_stride];
      if (kb >= 0 && kb < nkb) atomicOr(&bitmap[kb >> 5], 1u << (kb & 31));
    }
    __syncthreads();
  }
  return m;
}

// One CTA per (row i = blockIdx.x, head y = blockIdx.y). Reads S twice (online max/sum, then normalise).
template <class T, bool kBlockMask>
__global__ void __launch_bounds__(kSoftmaxThreads) softmax_rows(const FwdParams p, const ChunkArgs a) {
  extern __shared__ unsigned int bitmap[];  // key blocks listed for this row's query block (block mask only)
  __shared__ float red_m[kSoftmaxThreads / 32], red_l[kSoftmaxThreads / 32];
  __shared__ float row_m, row_inv;

  const int64_t i = blockIdx.x;
  const int64_t y = blockIdx.y;
  const int64_t h = a.h0 + y * a.h_step;
  const int64_t sk = p.seqlen_k;
  const size_t row = (size_t)y * (size_t)p.seqlen_q + (size_t)i;
  const float* srow = a.s + row * (size_t)a.ld;
  T* prow = static_cast<T*>(a.pmat) + row * (size_t)a.ld;

  const RowMask<kBlockMask> mask = row_mask<kBlockMask>(p, a.batch, h, i, bitmap);
  const int64_t lo = mask.lo, hi = mask.hi;
  auto visible = [&](int64_t j) -> bool { return mask.visible(j); };

  // Pass 1: online max and sum over the visible scores. Vector of 4 at a time (rows are 32-byte aligned;
  // lanes past seqlen_k fall in the row padding and are invisible).
  float m = -INFINITY, l = 0.0f;
  const int64_t nvec = (sk + 3) / 4;
  const int64_t v_lo = lo / 4, v_hi = hi >= lo ? hi / 4 + 1 : v_lo;  // only vectors that can be visible
  for (int64_t v = v_lo + threadIdx.x; v < v_hi; v += blockDim.x) {
    const float4 x = reinterpret_cast<const float4*>(srow)[v];
    const float xs[4] = {x.x, x.y, x.z, x.w};
    float vm = -INFINITY;
#pragma unroll
    for (int e = 0; e < 4; ++e)
      if (visible(v * 4 + e)) vm = fmaxf(vm, xs[e]);
    if (vm == -INFINITY) continue;
    float vl = 0.0f;
#pragma unroll
    for (int e = 0; e < 4; ++e)
      if (visible(v * 4 + e)) vl += __expf(xs[e] - vm);
    merge(m, l, vm, vl);
  }
  // Block reduction of (m, l).
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, off);
    const float l2 = __shfl_xor_sync(0xffffffffu, l, off);
    merge(m, l, m2, l2);
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) red_m[warp] = m, red_l[warp] = l;
  __syncthreads();
  if (threadIdx.x == 0) {
    float M = red_m[0], L = red_l[0];
    for (int w = 1; w < kSoftmaxThreads / 32; ++w) merge(M, L, red_m[w], red_l[w]);
    const bool empty = M == -INFINITY || !(L > 0.0f);
    row_m = M;
    row_inv = empty ? 0.0f : 1.0f / L;
    if (p.lse != nullptr)
      p.lse[a.batch * p.lse_batch_stride + h * p.lse_head_stride + i * p.lse_row_stride] = empty ? -INFINITY : M + logf(L);
  }
  __syncthreads();
  const float M = row_m, inv = row_inv;

  // Pass 2: P = exp(S - M) / L where visible, 0 elsewhere (the whole row, so P V needs no mask).
  for (int64_t v = threadIdx.x; v < nvec; v += blockDim.x) {
    float out[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (inv != 0.0f && v >= v_lo && v < v_hi) {
      const float4 x = reinterpret_cast<const float4*>(srow)[v];
      const float xs[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (visible(v * 4 + e)) out[e] = __expf(xs[e] - M) * inv;
    }
    store4<T>(prow + v * 4, out);
  }
}

// ---- Backward kernels ----------------------------------------------------------------------------

template <class T> __device__ __forceinline__ float to_float(T x);
template <> __device__ __forceinline__ float to_float<__half>(__half x) { return __half2float(x); }
template <> __device__ __forceinline__ float to_float<__nv_bfloat16>(__nv_bfloat16 x) { return __bfloat162float(x); }

struct BwdChunkArgs {
  const float* s;    // scale * Q K^T, fp32 [c, seqlen_q, ld]
  const float* dp;   // dO V^T, fp32 [c, seqlen_q, ld]
  void* pmat;        // out: P, dtype [c, seqlen_q, ld]
  void* dsmat;       // out: dS, dtype [c, seqlen_q, ld]
  int64_t ld;
  int64_t batch;
  int64_t h0;
  int64_t h_step;
};

// One CTA per (row i = blockIdx.x, head y = blockIdx.y):
//   D_i = rowsum(dO_i o O_i)  (fp32),  P_ij = exp(S_ij - LSE_i),  dS_ij = P_ij (dP_ij - D_i)
// where key j is visible, and exactly 0 elsewhere and on rows that see no key (LSE = -inf), whatever D
// is. P and dS are written in the input dtype (they feed tensor-core GEMMs); dS uses the fp32 P.
template <class T, bool kBlockMask>
__global__ void __launch_bounds__(kSoftmaxThreads) bwd_rows(const BwdParams p, const BwdChunkArgs a) {
  extern __shared__ unsigned int bitmap[];
  __shared__ float red[kSoftmaxThreads / 32];
  __shared__ float row_d;

  const int64_t i = blockIdx.x;
  const int64_t y = blockIdx.y;
  const int64_t h = a.h0 + y * a.h_step;
  const int64_t sk = p.seqlen_k;
  const size_t row = (size_t)y * (size_t)p.seqlen_q + (size_t)i;
  const float* srow = a.s + row * (size_t)a.ld;
  const float* dprow = a.dp + row * (size_t)a.ld;
  T* prow = static_cast<T*>(a.pmat) + row * (size_t)a.ld;
  T* dsrow = static_cast<T*>(a.dsmat) + row * (size_t)a.ld;

  // D_i.
  const T* orow = static_cast<const T*>(p.o) + a.batch * p.o_batch_stride + i * p.o_row_stride + h * p.o_head_stride;
  const T* dorow = static_cast<const T*>(p.d_o) + a.batch * p.do_batch_stride + i * p.do_row_stride + h * p.do_head_stride;
  float dsum = 0.0f;
  for (int e = threadIdx.x; e < p.head_dim; e += blockDim.x) dsum += to_float(orow[e]) * to_float(dorow[e]);
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) dsum += __shfl_xor_sync(0xffffffffu, dsum, off);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) red[warp] = dsum;
  __syncthreads();
  if (threadIdx.x == 0) {
    float t = 0.0f;
    for (int w = 0; w < kSoftmaxThreads / 32; ++w) t += red[w];
    row_d = t;
  }
  const RowMask<kBlockMask> mask = row_mask<kBlockMask>(p, a.batch, h, i, bitmap);  // syncs the CTA
  __syncthreads();
  const float D = row_d;
  const float lse = p.lse[a.batch * p.lse_batch_stride + h * p.lse_head_stride + i * p.lse_row_stride];
  const bool empty = lse == -INFINITY;

  const int64_t nvec = (sk + 3) / 4;
  const int64_t v_lo = mask.lo / 4, v_hi = mask.hi >= mask.lo ? mask.hi / 4 + 1 : v_lo;
  for (int64_t v = threadIdx.x; v < nvec; v += blockDim.x) {
    float pv[4] = {0.0f, 0.0f, 0.0f, 0.0f}, dsv[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (!empty && v >= v_lo && v < v_hi) {
      const float4 x = reinterpret_cast<const float4*>(srow)[v];
      const float4 g = reinterpret_cast<const float4*>(dprow)[v];
      const float xs[4] = {x.x, x.y, x.z, x.w}, gs[4] = {g.x, g.y, g.z, g.w};
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (mask.visible(v * 4 + e)) {
          pv[e] = expf(xs[e] - lse);
          dsv[e] = pv[e] * (gs[e] - D);
        }
    }
    store4<T>(prow + v * 4, pv);
    store4<T>(dsrow + v * 4, dsv);
  }
}

// The fp32 GQA group sums [c, seqlen_k, head_dim] (packed) into a [seqlen_k, c heads, head_dim] slice of a
// strided dK or dV (`out` points at element (b, 0, hk0, 0)), rounded once.
template <class T>
__global__ void store_group_sums(const float* acc, T* out, int64_t head_stride, int64_t row_stride, int64_t sk,
                                 int64_t d, int64_t n) {
  for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < n; t += (int64_t)gridDim.x * blockDim.x) {
    const int64_t e = t % d, j = (t / d) % sk, y = t / (d * sk);
    out[y * head_stride + j * row_stride + e] = static_cast<T>(acc[t]);
  }
}

// ---- The algorithm -----------------------------------------------------------------------------------

const char* dtype_word(DType t) { return t == DType::FP16 ? "fp16" : t == DType::BF16 ? "bf16" : "fp32"; }

bool available(int32_t device_id, std::string* why) {
  if (cuda::device_count() <= device_id || device_id < 0) {
    *why = "no CUDA device " + std::to_string(device_id);
    return false;
  }
  const int cc = cuda::compute_capability(device_id);
  if (cc < 80) {
    *why = "needs compute capability 8.0 or newer (device " + std::to_string(device_id) + " is " +
           std::to_string(cc / 10) + "." + std::to_string(cc % 10) + ")";
    return false;
  }
  return cublas_api(why) != nullptr;
}

bool supports(const FwdParams& p, std::string* why) {
  if (p.dtype != DType::FP16 && p.dtype != DType::BF16) {
    *why = std::string("dtype ") + dtype_word(p.dtype) + " is not supported (fp16 or bf16 only)";
    return false;
  }
  const struct { int64_t stride; const char* name; } rows[] = {
      {lead_dim(p.q_row_stride, p.seqlen_q, p.head_dim), "q"}, {lead_dim(p.k_row_stride, p.seqlen_k, p.head_dim), "k"},
      {lead_dim(p.v_row_stride, p.seqlen_k, p.head_dim), "v"}, {lead_dim(p.o_row_stride, p.seqlen_q, p.head_dim), "o"}};
  for (const auto& r : rows)
    if (r.stride < p.head_dim || r.stride > INT_MAX) {
      *why = std::string(r.name) + " row stride (strides[1]) is " + std::to_string(r.stride) +
             " but cuBLAS needs a leading dimension in [head_dim = " + std::to_string(p.head_dim) + ", 2^31)";
      return false;
    }
  if (ld_of(p) > INT_MAX) {
    *why = "seqlen_k " + std::to_string(p.seqlen_k) + " is too long for a cuBLAS leading dimension";
    return false;
  }
  if (p.has_block_mask && (key_blocks(p) + 31) / 32 > kMaxBitmapWords) {
    *why = "block mask with " + std::to_string(key_blocks(p)) + " key blocks (at most " +
           std::to_string(kMaxBitmapWords * 32) + ")";
    return false;
  }
  return true;
}

size_t fwd_workspace(const FwdParams& p) { return layout(p).total; }

template <class T>
int32_t launch_softmax(const FwdParams& p, const ChunkArgs& a, int c, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(p.seqlen_q), static_cast<unsigned>(c));
  if (p.has_block_mask) {
    const size_t smem = static_cast<size_t>((key_blocks(p) + 31) / 32) * sizeof(unsigned int);
    softmax_rows<T, true><<<grid, kSoftmaxThreads, smem, stream>>>(p, a);
  } else {
    softmax_rows<T, false><<<grid, kSoftmaxThreads, 0, stream>>>(p, a);
  }
  return check_launch("naive softmax kernel launch");
}

int32_t fwd(const FwdParams& p) {
  std::string why;
  const CublasApi* api = cublas_api(&why);
  if (api == nullptr) return fail(FLASH_ERROR_ALGORITHM_UNAVAILABLE, "algorithm naive is unavailable: ", why);
  const Layout lay = layout(p);
  if (lay.total == SIZE_MAX) return fail(FLASH_ERROR_OUT_OF_MEMORY, "naive: the S and P matrices do not fit in memory");
  if (p.workspace == nullptr || p.workspace_size < lay.total)
    return fail(FLASH_ERROR_INTERNAL, "naive: workspace of ", p.workspace_size, " bytes, ", lay.total, " needed");

  char* base = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(p.workspace) + kAlign - 1) / kAlign * kAlign);
  float* smat = reinterpret_cast<float*>(base + lay.s_offset);
  void* pmat = base + lay.p_offset;
  cudaStream_t stream = static_cast<cudaStream_t>(p.stream);

  LockedHandle handle;
  if (const int32_t s = acquire_handle(*api, p.device_id, &handle); s != FLASH_OK) return s;
  cublasHandle_t hd = handle.get();
  if (const int32_t s = cublas_status(*api, api->set_stream(hd, stream), "cublasSetStream"); s != FLASH_OK) return s;
  // After SetStream (which resets it): cuBLAS's scratch is this call's, stream-ordered memory.
  if (const int32_t s = cublas_status(*api, api->set_workspace(hd, base, kCublasWorkspace), "cublasSetWorkspace");
      s != FLASH_OK)
    return s;

  const cudaDataType dt = p.dtype == DType::FP16 ? CUDA_R_16F : CUDA_R_16BF;
  const size_t es = dtype_size(p.dtype);
  const int sq = p.seqlen_q, sk = p.seqlen_k, d = p.head_dim;
  const int ld = static_cast<int>(ld_of(p));
  const long long mat = static_cast<long long>(sq) * ld;  // elements of one head's S (and P)
  const int chunk = chunk_heads(p);
  const float alpha_s = p.scale, one = 1.0f, zero = 0.0f;
  const int ldq = static_cast<int>(lead_dim(p.q_row_stride, sq, d)), ldk = static_cast<int>(lead_dim(p.k_row_stride, sk, d));
  const int ldv = static_cast<int>(lead_dim(p.v_row_stride, sk, d)), ldo = static_cast<int>(lead_dim(p.o_row_stride, sq, d));

  const char* q = static_cast<const char*>(p.q);
  const char* k = static_cast<const char*>(p.k);
  const char* v = static_cast<const char*>(p.v);
  char* o = static_cast<char*>(p.o);

  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t r = 0; r < p.head_ratio; ++r)
      for (int64_t hk0 = 0; hk0 < p.heads_kv; hk0 += chunk) {
        const int c = static_cast<int>(std::min<int64_t>(chunk, p.heads_kv - hk0));
        const int64_t h0 = hk0 * p.head_ratio + r;  // first query head of the chunk
        const void* qc = q + (b * p.q_batch_stride + h0 * p.q_head_stride) * (int64_t)es;
        const void* kc = k + (b * p.k_batch_stride + hk0 * p.k_head_stride) * (int64_t)es;
        const void* vc = v + (b * p.v_batch_stride + hk0 * p.v_head_stride) * (int64_t)es;
        void* oc = o + (b * p.o_batch_stride + h0 * p.o_head_stride) * (int64_t)es;
        const long long q_step = p.head_ratio * p.q_head_stride, o_step = p.head_ratio * p.o_head_stride;

        // Column-major view: S^T (sk x sq, ld) = K (d x sk, ld k_row)^T * Q^T (d x sq, ld q_row); S = scale * Q K^T.
        if (const int32_t s = cublas_status(
                *api,
                api->gemm_strided_batched_ex(hd, CUBLAS_OP_T, CUBLAS_OP_N, sk, sq, d, &alpha_s, kc, dt,
                                             ldk, p.k_head_stride, qc, dt,
                                             ldq, q_step, &zero, smat, CUDA_R_32F, ld,
                                             mat, c, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                "cublasGemmStridedBatchedEx (S = Q K^T)");
            s != FLASH_OK)
          return s;

        const ChunkArgs a{smat, pmat, ld, b, h0, p.head_ratio};
        const int32_t st = p.dtype == DType::FP16 ? launch_softmax<__half>(p, a, c, stream)
                                                  : launch_softmax<__nv_bfloat16>(p, a, c, stream);
        if (st != FLASH_OK) return st;

        // O^T (d x sq, ld o_row) = V^T (d x sk, ld v_row) * P^T (sk x sq, ld).
        if (const int32_t s = cublas_status(
                *api,
                api->gemm_strided_batched_ex(hd, CUBLAS_OP_N, CUBLAS_OP_N, d, sq, sk, &one, vc, dt,
                                             ldv, p.v_head_stride, pmat, dt, ld, mat,
                                             &zero, oc, dt, ldo, o_step, c,
                                             CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                "cublasGemmStridedBatchedEx (O = P V)");
            s != FLASH_OK)
          return s;
      }
  return FLASH_OK;
}


// ---- Backward ----------------------------------------------------------------------------------------
//
// Per chunk of kv heads [hk0, hk0 + c) of batch entry b, and per position r of the GQA group (query heads
// hk * head_ratio + r, as the forward's chunks), with every N x N matrix written in full:
//   S  = scale * Q K^T           cuBLAS -> fp32
//   dP = dO V^T                  cuBLAS -> fp32
//   P, dS                        bwd_rows (P = exp(S - LSE), D = rowsum(dO o O), dS = P o (dP - D)) -> dtype
//   dV (+)= P^T dO               cuBLAS
//   dQ  = scale * dS K           cuBLAS -> dq (dtype, its strides)
//   dK (+)= scale * dS^T Q       cuBLAS
// Without GQA (head_ratio 1) dK and dV are written by their GEMMs straight into the caller's tensors (fp32
// accumulation, one rounding). With GQA they accumulate over r in fp32 buffers (beta = 1 for r > 0) and
// store_group_sums rounds each group's sum once. Deterministic: cuBLAS GEMMs without atomics (cuBLAS's
// default atomics mode) on a fixed stream with a fixed workspace are bitwise reproducible run to run on one
// GPU model, and the kernels have no atomics on data; FLASH_FLAG_DETERMINISTIC changes nothing.
//
// Workspace layout (base rounded up to 256 bytes; each region a multiple of 256 bytes):
//   [cuBLAS workspace][S fp32][dP fp32][P dtype][dS dtype]   each of the four c * seqlen_q * ld
//   [dK sum fp32 c * seqlen_k * head_dim][dV sum fp32 ...]    (GQA only)

unsigned __int128 align_up(unsigned __int128 x) { return (x + kAlign - 1) / kAlign * kAlign; }

// Bytes of the backward's matrices for one kv head's chunk slot (S, dP, P, dS and the group sums).
unsigned __int128 bwd_head_bytes(const BwdParams& p) {
  const unsigned __int128 nn = (unsigned __int128)(uint64_t)p.seqlen_q * (uint64_t)ld_of(p);
  const unsigned __int128 sums = p.head_ratio > 1 ? (unsigned __int128)2 * (uint64_t)p.seqlen_k * (uint64_t)p.head_dim * 4 : 0;
  return nn * (2 * sizeof(float) + 2 * dtype_size(p.dtype)) + sums;
}

int bwd_chunk_heads(const BwdParams& p) {
  const unsigned __int128 per = bwd_head_bytes(p);
  const unsigned __int128 fit = per == 0 ? 1 : kChunkBudget / per;
  const int64_t cap = std::min<int64_t>(p.heads_kv, kMaxChunkHeads);
  const int64_t maxc = std::max<int64_t>(1, fit > (unsigned __int128)cap ? cap : (int64_t)fit);
  const int64_t chunks = (p.heads_kv + maxc - 1) / maxc;
  return static_cast<int>((p.heads_kv + chunks - 1) / chunks);
}

struct BwdLayout {
  size_t total;  // SIZE_MAX if it cannot be allocated
  size_t s, dp, pm, ds, dk_sum, dv_sum;  // offsets from the aligned base
};

BwdLayout bwd_layout(const BwdParams& p) {
  const unsigned __int128 c = (uint64_t)bwd_chunk_heads(p);
  const unsigned __int128 nn = c * (uint64_t)p.seqlen_q * (uint64_t)ld_of(p);
  const unsigned __int128 sum_bytes = p.head_ratio > 1 ? align_up(c * (uint64_t)p.seqlen_k * (uint64_t)p.head_dim * 4) : 0;
  const unsigned __int128 s = kCublasWorkspace;
  const unsigned __int128 dp = s + align_up(nn * 4);
  const unsigned __int128 pm = dp + align_up(nn * 4);
  const unsigned __int128 ds = pm + align_up(nn * dtype_size(p.dtype));
  const unsigned __int128 dk = ds + align_up(nn * dtype_size(p.dtype));
  const unsigned __int128 dv = dk + sum_bytes;
  const unsigned __int128 total = kAlign + dv + sum_bytes;
  if (total > (unsigned __int128)(SIZE_MAX / 2)) return {SIZE_MAX, 0, 0, 0, 0, 0, 0};
  return {static_cast<size_t>(total), static_cast<size_t>(s),  static_cast<size_t>(dp), static_cast<size_t>(pm),
          static_cast<size_t>(ds),    static_cast<size_t>(dk), static_cast<size_t>(dv)};
}

bool supports_bwd(const BwdParams& p, std::string* why) {
  if (!supports(p, why)) return false;
  struct Row { int64_t stride; int64_t rows; const char* name; };
  const Row rows[] = {{p.do_row_stride, p.seqlen_q, "d_o"}, {p.dq_row_stride, p.seqlen_q, "dq"},
                      // With GQA, dk and dv are written by a kernel (any strides); without, by cuBLAS.
                      {p.head_ratio == 1 ? p.dk_row_stride : p.head_dim, p.seqlen_k, "dk"},
                      {p.head_ratio == 1 ? p.dv_row_stride : p.head_dim, p.seqlen_k, "dv"}};
  for (const Row& r : rows) {
    const int64_t ld = lead_dim(r.stride, r.rows, p.head_dim);
    if (ld < p.head_dim || ld > INT_MAX) {
      *why = std::string(r.name) + " row stride (strides[1]) is " + std::to_string(r.stride) +
             " but cuBLAS needs a leading dimension in [head_dim = " + std::to_string(p.head_dim) + ", 2^31)";
      return false;
    }
  }
  return true;
}

size_t bwd_workspace(const BwdParams& p) { return bwd_layout(p).total; }

template <class T>
int32_t launch_bwd_rows(const BwdParams& p, const BwdChunkArgs& a, int c, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(p.seqlen_q), static_cast<unsigned>(c));
  if (p.has_block_mask) {
    const size_t smem = static_cast<size_t>((key_blocks(p) + 31) / 32) * sizeof(unsigned int);
    bwd_rows<T, true><<<grid, kSoftmaxThreads, smem, stream>>>(p, a);
  } else {
    bwd_rows<T, false><<<grid, kSoftmaxThreads, 0, stream>>>(p, a);
  }
  return check_launch("naive backward softmax kernel launch");
}

template <class T>
int32_t launch_store_sums(const float* acc, void* out, int64_t head_stride, int64_t row_stride, const BwdParams& p, int c,
                          cudaStream_t stream) {
  const int64_t n = int64_t{c} * p.seqlen_k * p.head_dim;
  const int64_t blocks = std::min<int64_t>((n + 255) / 256, 65536);
  store_group_sums<T><<<static_cast<unsigned>(blocks), 256, 0, stream>>>(acc, static_cast<T*>(out), head_stride, row_stride,
                                                                          p.seqlen_k, p.head_dim, n);
  return check_launch("naive backward group-sum store launch");
}

int32_t bwd(const BwdParams& p) {
  std::string why;
  const CublasApi* api = cublas_api(&why);
  if (api == nullptr) return fail(FLASH_ERROR_ALGORITHM_UNAVAILABLE, "algorithm naive is unavailable: ", why);
  const BwdLayout lay = bwd_layout(p);
  if (lay.total == SIZE_MAX) return fail(FLASH_ERROR_OUT_OF_MEMORY, "naive: the backward's N x N matrices do not fit in memory");
  if (p.workspace == nullptr || p.workspace_size < lay.total)
    return fail(FLASH_ERROR_INTERNAL, "naive: backward workspace of ", p.workspace_size, " bytes, ", lay.total, " needed");

  char* base = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(p.workspace) + kAlign - 1) / kAlign * kAlign);
  float* smat = reinterpret_cast<float*>(base + lay.s);
  float* dpmat = reinterpret_cast<float*>(base + lay.dp);
  void* pmat = base + lay.pm;
  void* dsmat = base + lay.ds;
  float* dk_sum = reinterpret_cast<float*>(base + lay.dk_sum);
  float* dv_sum = reinterpret_cast<float*>(base + lay.dv_sum);
  cudaStream_t stream = static_cast<cudaStream_t>(p.stream);

  LockedHandle handle;
  if (const int32_t s = acquire_handle(*api, p.device_id, &handle); s != FLASH_OK) return s;
  cublasHandle_t hd = handle.get();
  if (const int32_t s = cublas_status(*api, api->set_stream(hd, stream), "cublasSetStream"); s != FLASH_OK) return s;
  if (const int32_t s = cublas_status(*api, api->set_workspace(hd, base, kCublasWorkspace), "cublasSetWorkspace");
      s != FLASH_OK)
    return s;

  const cudaDataType dt = p.dtype == DType::FP16 ? CUDA_R_16F : CUDA_R_16BF;
  const size_t es = dtype_size(p.dtype);
  const bool group = p.head_ratio > 1;
  const int sq = p.seqlen_q, sk = p.seqlen_k, d = p.head_dim;
  const int ld = static_cast<int>(ld_of(p));
  const long long mat = static_cast<long long>(sq) * ld;
  const long long sum_step = static_cast<long long>(sk) * d;  // between heads of the fp32 group sums
  const int chunk = bwd_chunk_heads(p);
  const float scale = p.scale, one = 1.0f, zero = 0.0f;
  const int ldq = static_cast<int>(lead_dim(p.q_row_stride, sq, d)), ldk = static_cast<int>(lead_dim(p.k_row_stride, sk, d));
  const int ldv = static_cast<int>(lead_dim(p.v_row_stride, sk, d)), lddo = static_cast<int>(lead_dim(p.do_row_stride, sq, d));
  const int lddq = static_cast<int>(lead_dim(p.dq_row_stride, sq, d));
  const int lddk = group ? d : static_cast<int>(lead_dim(p.dk_row_stride, sk, d));
  const int lddv = group ? d : static_cast<int>(lead_dim(p.dv_row_stride, sk, d));

  const char* q = static_cast<const char*>(p.q);
  const char* k = static_cast<const char*>(p.k);
  const char* v = static_cast<const char*>(p.v);
  const char* dout = static_cast<const char*>(p.d_o);
  char* dq = static_cast<char*>(p.dq);
  char* dk = static_cast<char*>(p.dk);
  char* dv = static_cast<char*>(p.dv);
  auto gemm = [&](cublasOperation_t ta, cublasOperation_t tb, int m, int n, int kk, const float* alpha, const void* A,
                  cudaDataType at, int lda, long long sa, const void* B, int ldb, long long sb, const float* beta, void* C,
                  cudaDataType ct, int ldc, long long sc, int batch, const char* what) {
    return cublas_status(*api,
                         api->gemm_strided_batched_ex(hd, ta, tb, m, n, kk, alpha, A, at, lda, sa, B, at, ldb, sb, beta, C,
                                                      ct, ldc, sc, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                         what);
  };
#define FLASH_TRY(x)                              \
  do {                                            \
    if (const int32_t s_ = (x); s_ != FLASH_OK) { \
      return s_;                                  \
    }                                             \
  } while (0)

  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t hk0 = 0; hk0 < p.heads_kv; hk0 += chunk) {
      const int c = static_cast<int>(std::min<int64_t>(chunk, p.heads_kv - hk0));
      const void* kc = k + (b * p.k_batch_stride + hk0 * p.k_head_stride) * (int64_t)es;
      const void* vc = v + (b * p.v_batch_stride + hk0 * p.v_head_stride) * (int64_t)es;
      void* dkc = group ? static_cast<void*>(dk_sum) : dk + (b * p.dk_batch_stride + hk0 * p.dk_head_stride) * (int64_t)es;
      void* dvc = group ? static_cast<void*>(dv_sum) : dv + (b * p.dv_batch_stride + hk0 * p.dv_head_stride) * (int64_t)es;
      const cudaDataType sum_t = group ? CUDA_R_32F : dt;
      const long long dk_step = group ? sum_step : p.dk_head_stride, dv_step = group ? sum_step : p.dv_head_stride;
      for (int64_t r = 0; r < p.head_ratio; ++r) {
        const int64_t h0 = hk0 * p.head_ratio + r;  // first query head of the chunk
        const void* qc = q + (b * p.q_batch_stride + h0 * p.q_head_stride) * (int64_t)es;
        const void* doc = dout + (b * p.do_batch_stride + h0 * p.do_head_stride) * (int64_t)es;
        void* dqc = dq + (b * p.dq_batch_stride + h0 * p.dq_head_stride) * (int64_t)es;
        const long long q_step = p.head_ratio * p.q_head_stride, do_step = p.head_ratio * p.do_head_stride;
        const long long dq_step = p.head_ratio * p.dq_head_stride;
        const float* beta = r > 0 ? &one : &zero;

        // Column-major views, as in the forward. S^T (sk x sq, ld) = K^T... = scale * (Q K^T)^T.
        FLASH_TRY(gemm(CUBLAS_OP_T, CUBLAS_OP_N, sk, sq, d, &scale, kc, dt, ldk, p.k_head_stride, qc, ldq, q_step, &zero,
                       smat, CUDA_R_32F, ld, mat, c, "cublasGemmStridedBatchedEx (S = Q K^T)"));
        // dP^T (sk x sq, ld) = (dO V^T)^T.
        FLASH_TRY(gemm(CUBLAS_OP_T, CUBLAS_OP_N, sk, sq, d, &one, vc, dt, ldv, p.v_head_stride, doc, lddo, do_step, &zero,
                       dpmat, CUDA_R_32F, ld, mat, c, "cublasGemmStridedBatchedEx (dP = dO V^T)"));
        const BwdChunkArgs a{smat, dpmat, pmat, dsmat, ld, b, h0, p.head_ratio};
        FLASH_TRY(p.dtype == DType::FP16 ? launch_bwd_rows<__half>(p, a, c, stream)
                                         : launch_bwd_rows<__nv_bfloat16>(p, a, c, stream));
        // dV^T (d x sk) (+)= dO^T (d x sq) * P (sq x sk; the P buffer is P^T column-major: op T).
        FLASH_TRY(gemm(CUBLAS_OP_N, CUBLAS_OP_T, d, sk, sq, &one, doc, dt, lddo, do_step, pmat, ld, mat, beta, dvc, sum_t,
                       lddv, dv_step, c, "cublasGemmStridedBatchedEx (dV = P^T dO)"));
        // dQ^T (d x sq) = scale * K^T (d x sk) * dS^T (sk x sq).
        FLASH_TRY(gemm(CUBLAS_OP_N, CUBLAS_OP_N, d, sq, sk, &scale, kc, dt, ldk, p.k_head_stride, dsmat, ld, mat, &zero, dqc,
                       dt, lddq, dq_step, c, "cublasGemmStridedBatchedEx (dQ = dS K)"));
        // dK^T (d x sk) (+)= scale * Q^T (d x sq) * dS (sq x sk).
        FLASH_TRY(gemm(CUBLAS_OP_N, CUBLAS_OP_T, d, sk, sq, &scale, qc, dt, ldq, q_step, dsmat, ld, mat, beta, dkc, sum_t,
                       lddk, dk_step, c, "cublasGemmStridedBatchedEx (dK = dS^T Q)"));
      }
      if (group) {
        void* dko = dk + (b * p.dk_batch_stride + hk0 * p.dk_head_stride) * (int64_t)es;
        void* dvo = dv + (b * p.dv_batch_stride + hk0 * p.dv_head_stride) * (int64_t)es;
        if (p.dtype == DType::FP16) {
          FLASH_TRY(launch_store_sums<__half>(dk_sum, dko, p.dk_head_stride, p.dk_row_stride, p, c, stream));
          FLASH_TRY(launch_store_sums<__half>(dv_sum, dvo, p.dv_head_stride, p.dv_row_stride, p, c, stream));
        } else {
          FLASH_TRY(launch_store_sums<__nv_bfloat16>(dk_sum, dko, p.dk_head_stride, p.dk_row_stride, p, c, stream));
          FLASH_TRY(launch_store_sums<__nv_bfloat16>(dv_sum, dvo, p.dv_head_stride, p.dv_row_stride, p, c, stream));
        }
      }
    }
#undef FLASH_TRY
  return FLASH_OK;
}

}  // namespace
}  // namespace naive
}  // namespace cuda

extern const Algorithm kCudaNaive = {FLASH_ALGO_NAIVE,         "naive",          FLASH_DEVICE_CUDA,
                                     cuda::naive::available,   cuda::naive::supports, cuda::naive::fwd_workspace,
                                     cuda::naive::fwd,         cuda::naive::supports_bwd, cuda::naive::bwd_workspace,
                                     cuda::naive::bwd};

}  // namespace flash
