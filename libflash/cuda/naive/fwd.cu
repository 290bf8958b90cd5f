// libflash/cuda/naive/fwd.cu -- the naive GPU forward: S = scale Q K^T and O = P V by cuBLAS, the softmax row kernel
// between them (naive.cuh says how heads are chunked and where S and P live), and the algorithm's record.
#include "naive.cuh"

namespace flash {
namespace cuda {
namespace naive {
namespace {

struct ChunkArgs {
  const float* s;
  void* pmat;
  int64_t ld;        // elements between rows of S and of P
  int64_t batch;     // b of this chunk
  int64_t h0;        // query head of blockIdx.y == 0
  int64_t h_step;    // query heads between consecutive blockIdx.y (head_ratio)
};

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

__global__ void zero_rows_kernel(uint16_t* base, int64_t row_stride, int64_t head_stride, int64_t heads, int64_t d,
                                 int64_t n) {
  for (int64_t x = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; x < n; x += int64_t(gridDim.x) * blockDim.x) {
    const int64_t e = x % d, h = (x / d) % heads, r = x / d / heads;
    base[r * row_stride + h * head_stride + e] = 0;
  }
}

__global__ void fill_lse_kernel(float* lse, int64_t row_stride, int64_t head_stride, int64_t heads, int64_t n) {
  for (int64_t x = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; x < n; x += int64_t(gridDim.x) * blockDim.x)
    lse[(x / heads) * row_stride + (x % heads) * head_stride] = -INFINITY;
}

unsigned grid_for(int64_t n) { return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>((n + 255) / 256, 4096))); }

}  // namespace

int32_t zero_rows(void* base, int64_t row_stride, int64_t head_stride, int64_t rows, int64_t heads, int64_t d,
                  cudaStream_t stream) {
  const int64_t n = rows * heads * d;
  if (n <= 0 || base == nullptr) return FLASH_OK;
  zero_rows_kernel<<<grid_for(n), 256, 0, stream>>>(static_cast<uint16_t*>(base), row_stride, head_stride, heads, d, n);
  return check_launch("naive zero rows kernel launch");
}

int32_t fill_lse(float* lse, int64_t row_stride, int64_t head_stride, int64_t rows, int64_t heads, cudaStream_t stream) {
  const int64_t n = rows * heads;
  if (n <= 0 || lse == nullptr) return FLASH_OK;
  fill_lse_kernel<<<grid_for(n), 256, 0, stream>>>(lse, row_stride, head_stride, heads, n);
  return check_launch("naive lse fill kernel launch");
}

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

namespace {

// What one call's dense problems share: cuBLAS, its handle on the call's stream, the S and P scratch, the chunk of heads.
struct FwdRun {
  const CublasApi* api;
  cublasHandle_t hd;
  float* smat;
  void* pmat;
  int chunk;  // kv heads per chunk (the whole call's: the scratch holds chunk heads at its max lengths)
  cudaStream_t stream;
};

// One dense problem (the call, or one sequence's view of a varlen call, both lengths > 0).
int32_t fwd_problem(const FwdParams& p, const FwdRun& run) {
  const CublasApi* api = run.api;
  cublasHandle_t hd = run.hd;
  float* smat = run.smat;
  void* pmat = run.pmat;
  cudaStream_t stream = run.stream;
  const cudaDataType dt = p.dtype == DType::FP16 ? CUDA_R_16F : CUDA_R_16BF;
  const size_t es = dtype_size(p.dtype);
  const int sq = p.seqlen_q, sk = p.seqlen_k, d = p.head_dim;
  const int ld = static_cast<int>(ld_of(p));
  const long long mat = static_cast<long long>(sq) * ld;  // elements of one head's S (and P)
  const int chunk = run.chunk;
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

int32_t fwd(const FwdParams& p) {
  std::string why;
  const CublasApi* api = cublas_api(&why);
  if (api == nullptr) return fail(FLASH_ERROR_ALGORITHM_UNAVAILABLE, "algorithm naive is unavailable: ", why);
  const Layout lay = layout(p);
  if (lay.total == SIZE_MAX) return fail(FLASH_ERROR_OUT_OF_MEMORY, "naive: the S and P matrices do not fit in memory");
  if (p.workspace == nullptr || p.workspace_size < lay.total)
    return fail(FLASH_ERROR_INTERNAL, "naive: workspace of ", p.workspace_size, " bytes, ", lay.total, " needed");

  char* base = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(p.workspace) + kAlign - 1) / kAlign * kAlign);
  cudaStream_t stream = static_cast<cudaStream_t>(p.stream);

  LockedHandle handle;  // on `stream`, cuBLAS's scratch the workspace's first kCublasWorkspace bytes
  if (const int32_t s = acquire_handle(*api, p.device_id, stream, base, kCublasWorkspace, &handle); s != FLASH_OK)
    return s;
  cublasHandle_t hd = handle.get();
  const FwdRun run{api, hd, reinterpret_cast<float*>(base + lay.s_offset), base + lay.p_offset, chunk_heads(p), stream};
  if (!p.varlen) return fwd_problem(p, run);

  // Varlen: sequence by sequence (naive.cuh, "Packed variable-length batches"), each within the whole call's scratch.
  HostOffsets offsets;
  FwdParams hp;
  if (const int32_t s = host_offsets(p, &offsets, &hp); s != FLASH_OK) return s;
  for (int64_t b = 0; b < p.batch; ++b) {
    const FwdParams v = sequence_view(hp, b);
    if (v.seqlen_q == 0) continue;
    if (v.seqlen_k == 0) {  // every row sees no key: O = 0, LSE = -inf
      if (const int32_t s = zero_rows(v.o, v.o_row_stride, v.o_head_stride, v.seqlen_q, v.heads_q, v.head_dim, stream);
          s != FLASH_OK)
        return s;
      if (const int32_t s = fill_lse(v.lse, v.lse_row_stride, v.lse_head_stride, v.seqlen_q, v.heads_q, stream); s != FLASH_OK)
        return s;
      continue;
    }
    if (const int32_t s = fwd_problem(v, run); s != FLASH_OK) return s;
  }
  return FLASH_OK;
}



}  // namespace naive
}  // namespace cuda

extern const Algorithm kCudaNaive = {FLASH_ALGO_NAIVE,         "naive",          FLASH_DEVICE_CUDA,
                                     cuda::naive::available,   cuda::naive::supports, cuda::naive::fwd_workspace,
                                     cuda::naive::fwd,         cuda::naive::supports_bwd, cuda::naive::bwd_workspace,
                                     cuda::naive::bwd};

}  // namespace flash
