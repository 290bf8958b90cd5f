// libflash/cuda/naive/bwd.cu -- the naive GPU backward: S, dP, P and dS materialised per chunk of heads, 5 cuBLAS
// GEMMs and one row kernel (naive.cuh).
#include "naive.cuh"

namespace flash {
namespace cuda {
namespace naive {
namespace {

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


}  // namespace

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

namespace {

// What one call's dense problems share: cuBLAS, its handle on the call's stream, the scratch, the chunk of heads.
struct BwdRun {
  const CublasApi* api;
  cublasHandle_t hd;
  float *smat, *dpmat;
  void *pmat, *dsmat;
  float *dk_sum, *dv_sum;
  int chunk;  // kv heads per chunk (the whole call's: the scratch holds chunk heads at its max lengths)
  cudaStream_t stream;
};

// One dense problem (the call, or one sequence's view of a varlen call, both lengths > 0).
int32_t bwd_problem(const BwdParams& p, const BwdRun& run) {
  const CublasApi* api = run.api;
  cublasHandle_t hd = run.hd;
  float* smat = run.smat;
  float* dpmat = run.dpmat;
  void* pmat = run.pmat;
  void* dsmat = run.dsmat;
  float* dk_sum = run.dk_sum;
  float* dv_sum = run.dv_sum;
  cudaStream_t stream = run.stream;
  const cudaDataType dt = p.dtype == DType::FP16 ? CUDA_R_16F : CUDA_R_16BF;
  const size_t es = dtype_size(p.dtype);
  const bool group = p.head_ratio > 1;
  const int sq = p.seqlen_q, sk = p.seqlen_k, d = p.head_dim;
  const int ld = static_cast<int>(ld_of(p));
  const long long mat = static_cast<long long>(sq) * ld;
  const long long sum_step = static_cast<long long>(sk) * d;  // between heads of the fp32 group sums
  const int chunk = run.chunk;
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

int32_t bwd(const BwdParams& p) {
  std::string why;
  const CublasApi* api = cublas_api(&why);
  if (api == nullptr) return fail(FLASH_ERROR_ALGORITHM_UNAVAILABLE, "algorithm naive is unavailable: ", why);
  const BwdLayout lay = bwd_layout(p);
  if (lay.total == SIZE_MAX) return fail(FLASH_ERROR_OUT_OF_MEMORY, "naive: the backward's N x N matrices do not fit in memory");
  if (p.workspace == nullptr || p.workspace_size < lay.total)
    return fail(FLASH_ERROR_INTERNAL, "naive: backward workspace of ", p.workspace_size, " bytes, ", lay.total, " needed");

  char* base = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(p.workspace) + kAlign - 1) / kAlign * kAlign);
  cudaStream_t stream = static_cast<cudaStream_t>(p.stream);

  LockedHandle handle;  // on `stream`, cuBLAS's scratch the workspace's first kCublasWorkspace bytes
  if (const int32_t s = acquire_handle(*api, p.device_id, stream, base, kCublasWorkspace, &handle); s != FLASH_OK)
    return s;
  cublasHandle_t hd = handle.get();
  const BwdRun run{api,
                   hd,
                   reinterpret_cast<float*>(base + lay.s),
                   reinterpret_cast<float*>(base + lay.dp),
                   base + lay.pm,
                   base + lay.ds,
                   reinterpret_cast<float*>(base + lay.dk_sum),
                   reinterpret_cast<float*>(base + lay.dv_sum),
                   bwd_chunk_heads(p),
                   stream};
  if (!p.varlen) return bwd_problem(p, run);

  // Varlen: sequence by sequence (naive.cuh, "Packed variable-length batches"), each within the whole call's scratch.
  HostOffsets offsets;
  BwdParams hp;
  if (const int32_t s = host_offsets(p, &offsets, &hp); s != FLASH_OK) return s;
  for (int64_t b = 0; b < p.batch; ++b) {
    const BwdParams v = sequence_view(hp, b);
    const SeqBounds sb = seq_bounds(hp, b);
    int32_t s = FLASH_OK;
    if (v.seqlen_q > 0 && v.seqlen_k > 0) {
      s = bwd_problem(v, run);
    } else {  // rows that see no key: dq = 0; keys no query sees: dk = dv = 0
      s = zero_rows(v.dq, v.dq_row_stride, v.dq_head_stride, v.seqlen_q, v.heads_q, v.head_dim, stream);
      if (s == FLASH_OK) s = zero_rows(v.dk, v.dk_row_stride, v.dk_head_stride, v.seqlen_k, v.heads_kv, v.head_dim, stream);
      if (s == FLASH_OK) s = zero_rows(v.dv, v.dv_row_stride, v.dv_head_stride, v.seqlen_k, v.heads_kv, v.head_dim, stream);
    }
    // The slot's rows past seqused_k: keys no query sees (dk = dv = 0).
    const int64_t unused = int64_t{sb.k_slot} - sb.seqlen_k;
    const size_t es = dtype_size(p.dtype);
    if (s == FLASH_OK && unused > 0) {
      char* dk = static_cast<char*>(v.dk) + int64_t{v.seqlen_k} * v.dk_row_stride * int64_t(es);
      char* dv = static_cast<char*>(v.dv) + int64_t{v.seqlen_k} * v.dv_row_stride * int64_t(es);
      s = zero_rows(dk, v.dk_row_stride, v.dk_head_stride, unused, v.heads_kv, v.head_dim, stream);
      if (s == FLASH_OK) s = zero_rows(dv, v.dv_row_stride, v.dv_head_stride, unused, v.heads_kv, v.head_dim, stream);
    }
    if (s != FLASH_OK) return s;
  }
  return FLASH_OK;
}


}  // namespace naive
}  // namespace cuda
}  // namespace flash
