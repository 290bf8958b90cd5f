// libflash/cuda/naive/naive.cuh -- what the naive GPU algorithm's forward (fwd.cu) and backward (bwd.cu) share: the chunking
// of heads, the workspace layout of the forward, the row mask and the 16-bit stores of the row kernels.
//
// Standard (materialised) attention on the GPU: the baseline that the
// FlashAttention paper compares against and that fa-bench times flash against.
//
//   S = scale * Q K^T      cuBLAS (cublasGemmStridedBatchedEx), fp16/bf16 in, fp32 accumulate, S stored fp32
//   P = softmax(S + mask)  one CTA per row; writes P in the input dtype (as standard attention does) and LSE
//   O = P V                cuBLAS, fp32 accumulate, O stored in the input dtype
//
// The backward (bwd.cu) materialises S, dP (fp32), P and dS (input dtype) per head the same
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
#pragma once
// LSE = -inf, and so O = 0.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <string>
#include <vector>

#include "../../../flash.h"
#include "../../algorithm.h"
#include "../../error.h"
#include "../../varlen.h"
#include "../runtime.h"
#include "cublas_dl.h"

namespace flash {
namespace cuda {
namespace naive {


constexpr size_t kAlign = 256;
constexpr size_t kCublasWorkspace = size_t{32} << 20;  // NVIDIA's recommendation for Hopper
constexpr unsigned __int128 kChunkBudget = (unsigned __int128)1 << 30;  // bytes of S + P per chunk (>= 1 head)
constexpr int kMaxChunkHeads = 65535;                                   // gridDim.y
constexpr int kSoftmaxThreads = 256;
constexpr int64_t kMaxBitmapWords = 8 * 1024;  // 32 KiB of shared memory: block masks up to 262144 key blocks

inline int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// The cuBLAS leading dimension for a [rows, head_dim] matrix of row stride `stride`. With a single row the
// stride is never used, so any value is accepted (a caller may well pass 0 there).
inline int64_t lead_dim(int64_t stride, int64_t rows, int64_t head_dim) {
  return rows == 1 && (stride < head_dim || stride > INT_MAX) ? head_dim : stride;
}
inline int64_t ld_of(const FwdParams& p) { return round_up(p.seqlen_k, 8); }
inline int64_t key_blocks(const FwdParams& p) { return p.has_block_mask ? (int64_t{p.seqlen_k} + p.block_mask.block_n - 1) / p.block_mask.block_n : 0; }

// Bytes of S + P for one head, exactly (128-bit: seqlen_q * ld * 6 can exceed 2^64 in principle).
inline unsigned __int128 head_bytes(const FwdParams& p) {
  return (unsigned __int128)(uint64_t)p.seqlen_q * (uint64_t)ld_of(p) * (sizeof(float) + dtype_size(p.dtype));
}

// kv heads per chunk: as many as fit the budget (at least 1), spread evenly over the chunks.
inline int chunk_heads(const FwdParams& p) {
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

inline Layout layout(const FwdParams& p) {
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


// ---- Row kernels' helpers ----------------------------------------------------------------------------

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

// ---- Packed variable-length batches ------------------------------------------------------------------------
// The naive algorithm runs a varlen call sequence by sequence from the host (libflash/varlen.h: sequence_view), each
// sequence the dense problem of batch 1 it is, in the scratch of the whole call (layout() / bwd_layout() at
// max_seqlen_q/k with the whole call's chunk of heads, which bounds every sequence's). For that the host needs the
// offsets, which a CUDA call holds in device memory: host_offsets() copies them once, in the caller's stream's order,
// and waits for the copy (cuda::copy_to_host) -- a synchronisation the fused algorithms never make, acceptable for the
// O(N^2) reference baseline. The copies are not trusted: sequence_view() places each sequence through seq_bounds(),
// which clamps it into the tensors. A sequence without queries or without keys is not a problem cuBLAS can run (a
// leading dimension of 0): its outputs are written by zero_rows() / fill_lse() instead (O = 0, LSE = -inf, dq = 0,
// dk = dv = 0), as are the backward's slot rows past seqused_k.
struct HostOffsets {
  std::vector<int32_t> cu_q, cu_k, used;
};
// Copies p's cu_seqlens_q/k (and seqused_k) to *h and points *hp's at the copies (hp = p otherwise).
template <class Params>
int32_t host_offsets(const Params& p, HostOffsets* h, Params* hp) {
  *hp = p;
  h->cu_q.resize(size_t(p.batch) + 1), h->cu_k.resize(size_t(p.batch) + 1);
  if (const int32_t s = copy_to_host(h->cu_q.data(), p.cu_seqlens_q, h->cu_q.size() * 4, p.stream); s != FLASH_OK) return s;
  if (const int32_t s = copy_to_host(h->cu_k.data(), p.cu_seqlens_k, h->cu_k.size() * 4, p.stream); s != FLASH_OK) return s;
  hp->cu_seqlens_q = h->cu_q.data(), hp->cu_seqlens_k = h->cu_k.data();
  if (p.seqused_k != nullptr) {
    h->used.resize(size_t(p.batch));
    if (const int32_t s = copy_to_host(h->used.data(), p.seqused_k, h->used.size() * 4, p.stream); s != FLASH_OK) return s;
    hp->seqused_k = h->used.data();
  }
  return FLASH_OK;
}
// Rows [0, rows) of every head [0, heads) of a strided 16-bit tensor (elements [0, d) of each) set to 0 bits; an fp32
// LSE's rows [0, rows) of every head set to -inf (lse may be null). Both asynchronous on `stream` (fwd.cu).
int32_t zero_rows(void* base, int64_t row_stride, int64_t head_stride, int64_t rows, int64_t heads, int64_t d,
                  cudaStream_t stream);
int32_t fill_lse(float* lse, int64_t row_stride, int64_t head_stride, int64_t rows, int64_t heads, cudaStream_t stream);

// ---- Shared by the forward and the backward's host side (fwd.cu) ----------------------------------------
const char* dtype_word(DType t);
bool available(int32_t device_id, std::string* why);
bool supports(const FwdParams& p, std::string* why);
size_t fwd_workspace(const FwdParams& p);
int32_t fwd(const FwdParams& p);
// The backward (bwd.cu).
bool supports_bwd(const BwdParams& p, std::string* why);
size_t bwd_workspace(const BwdParams& p);
int32_t bwd(const BwdParams& p);

}  // namespace naive
}  // namespace cuda
}  // namespace flash
