// libflash/cuda/naive/naive.cu -- standard (materialised) attention on the GPU: the baseline that the
// FlashAttention paper compares against and that fa-bench times flash against.
//
//   S = scale * Q K^T      cuBLAS (cublasGemmStridedBatchedEx), fp16/bf16 in, fp32 accumulate, S stored fp32
//   P = softmax(S + mask)  one CTA per row; writes P in the input dtype (as standard attention does) and LSE
//   O = P V                cuBLAS, fp32 accumulate, O stored in the input dtype
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

  // Window: visible keys are [lo, hi] (clamped to [0, sk)).
  const int64_t diag = i + p.diag_offset;
  const int64_t lo = p.window_left >= 0 ? max(diag - (int64_t)p.window_left, (int64_t)0) : 0;
  const int64_t hi = p.window_right >= 0 ? min(diag + (int64_t)p.window_right, sk - 1) : sk - 1;

  int block_n = 1;
  if constexpr (kBlockMask) {
    const BlockMaskParams& bm = p.block_mask;
    block_n = bm.block_n;
    const int64_t nkb = (sk + bm.block_n - 1) / bm.block_n;
    const int64_t words = (nkb + 31) / 32;
    for (int64_t w = threadIdx.x; w < words; w += blockDim.x) bitmap[w] = 0u;
    __syncthreads();
    const int64_t qb = i / bm.block_m;
    int32_t n = bm.kv_num_blocks[a.batch * bm.num_batch_stride + h * bm.num_head_stride + qb * bm.num_qblock_stride];
    n = min(max(n, 0), bm.max_kv_blocks);
    const int32_t* list = bm.kv_indices + a.batch * bm.idx_batch_stride + h * bm.idx_head_stride + qb * bm.idx_qblock_stride;
    for (int32_t t = threadIdx.x; t < n; t += blockDim.x) {
      const int32_t kb = list[(int64_t)t * bm.idx_stride];
      if (kb >= 0 && kb < nkb) atomicOr(&bitmap[kb >> 5], 1u << (kb & 31));
    }
    __syncthreads();
  }
  auto visible = [&](int64_t j) -> bool {
    if (j < lo || j > hi) return false;
    if constexpr (kBlockMask) {
      const int64_t kb = j / block_n;
      return (bitmap[kb >> 5] >> (kb & 31)) & 1u;
    }
    return true;
  };

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

}  // namespace
}  // namespace naive
}  // namespace cuda

extern const Algorithm kCudaNaive = {FLASH_ALGO_NAIVE,         "naive",          FLASH_DEVICE_CUDA,
                                     cuda::naive::available,   cuda::naive::supports, cuda::naive::fwd_workspace,
                                     cuda::naive::fwd};

}  // namespace flash
