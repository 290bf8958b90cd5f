// examples/ring_attention.cpp -- ring attention (context parallelism) across the GPUs of one machine over NCCL,
// composed from libflash's C ABI alone: flash_fwd with its log-sum-exp output for every visiting K/V slice, then
// flash_combine merging the partial results through their LSEs (flash.h: "Combining partial attention results").
//
//   build/examples/flash_ring_attention [--gpus N] [--seqlen S] [--batch B] [--heads H] [--heads-kv HKV] [--dim D]
//                                       [--causal 0|1] [--iters I]
//
// NOT RUN BY LIBFLASH'S AUTHORS OR CI: it needs a machine with several GPUs, which the development machines lack. It
// is compiled in the CUDA build when NCCL (nccl.h and libnccl, e.g. from the CUDA toolkit) is found; --gpus 1 runs a
// ring of one on any single GPU. The Python counterpart, with the backward and with tests (2 and 4 processes on the
// CPU with gloo), is bindings/python/libflash/distributed.py; this program follows the same plan.
//
// What it does. One sequence of S tokens is split over N GPUs; GPU r holds the queries, keys and values of its
// tokens. With --causal 1 (default) the split is the zigzag one: the sequence is cut into 2N chunks of c = S / 2N and
// GPU r holds chunks r and 2N-1-r, so that every GPU does the same causal work at every step. Without causal the
// split is contiguous (GPU r holds tokens [r S/N, (r+1) S/N)). Then N steps: at step t GPU r holds the K/V slice of
// GPU s = r - t (mod N) and
//   1. posts ncclSend of that slice to r+1 and ncclRecv of the next one from r-1 on its communication stream (for all
//      GPUs inside one ncclGroupStart/End, as one thread drives every GPU);
//   2. meanwhile, on its compute stream, runs flash_fwd of its queries against the visiting slice, writing O and the
//      LSE into step t's partial buffers. The causal mask of the step follows from the chunks' global positions:
//        s == r  the diagonal: causal on the local slice (local order is global order);
//        s <  r  the slice's first chunk lies before both local chunks and its second after them: all local queries
//                against its first chunk, no mask;
//        s >  r  both of the slice's chunks lie after local chunk r and before local chunk 2N-1-r: the second local
//                chunk against the whole slice, no mask; the first local chunk gets nothing from this step;
//   3. the compute stream waits for the slice's arrival before the next step (an event on the communication stream),
//      and the communication stream waits for the compute before receiving into a buffer the compute still reads.
// Finally flash_combine merges, for each local query chunk, the partial (O, LSE) of the steps that covered it:
//   M = max LSE_p, w_p = exp(LSE_p - M), O = sum_p w_p O_p / sum_p w_p (descriptors with strides address the rows of
// one chunk inside each step's buffer; no copies). The result is checked against one flash_fwd of the whole sequence
// on GPU 0, and both are timed.
//
// Design notes. All N partials are kept and merged once at the end, to show flash_combine; they cost N times the
// output in memory (the Python version merges online into an fp32 accumulator instead, which is O(1) in N). The
// partials have the inputs' dtype (flash_fwd writes O in q's dtype), so bf16 partials are rounded once before the
// merge. One process per GPU is the usual deployment: each process would run the same code for its own rank, calling
// ncclCommInitRank with an id broadcast by rank 0 (MPI, a file, a TCP store) instead of the group below.
// The backward composes the same way: flash_bwd of the local queries against each visiting slice with the combined O
// and LSE, dQ accumulated locally and dK/dV sent around the ring with their slice back to its owner.
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "flash.h"

#define CHECK_CUDA(x)                                                                                          \
  do {                                                                                                         \
    cudaError_t e_ = (x);                                                                                      \
    if (e_ != cudaSuccess) {                                                                                   \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));                \
      std::exit(1);                                                                                            \
    }                                                                                                          \
  } while (0)
#define CHECK_NCCL(x)                                                                                          \
  do {                                                                                                         \
    ncclResult_t r_ = (x);                                                                                     \
    if (r_ != ncclSuccess) {                                                                                   \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, ncclGetErrorString(r_));                \
      std::exit(1);                                                                                            \
    }                                                                                                          \
  } while (0)
#define CHECK_FLASH(x)                                                                                         \
  do {                                                                                                         \
    int32_t s_ = (x);                                                                                          \
    if (s_ != FLASH_OK) {                                                                                      \
      std::fprintf(stderr, "%s:%d: %s: %s: %s\n", __FILE__, __LINE__, #x, flash_status_string(s_),             \
                   flash_last_error_message());                                                                \
      std::exit(1);                                                                                            \
    }                                                                                                          \
  } while (0)

namespace {

// bf16 <-> float on the host (round to nearest even), so that the example needs no CUDA headers beyond the runtime's.
uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
float from_bf16(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

struct Options {
  int gpus = 0;  // 0: every visible GPU
  int64_t seqlen = 16384, batch = 1, heads = 16, heads_kv = 4, dim = 128;
  int causal = 1, iters = 5;
};

// A [batch, rows, heads, dim] view of rows [row0, row0 + rows) of a contiguous [batch, seqlen, heads, dim] buffer.
flash_tensor rows_view(void* base, int64_t batch, int64_t seqlen, int64_t heads, int64_t dim, int64_t row0,
                       int64_t rows, int32_t dtype, int device) {
  const size_t esize = dtype == FLASH_DTYPE_FP32 ? 4 : 2;
  flash_tensor t;
  std::memset(&t, 0, sizeof t);
  t.data = static_cast<char*>(base) + static_cast<size_t>(row0 * heads * dim) * esize;
  t.dtype = dtype;
  t.device_type = FLASH_DEVICE_CUDA;
  t.device_id = device;
  t.ndim = 4;
  const int64_t shape[4] = {batch, rows, heads, dim}, strides[4] = {seqlen * heads * dim, heads * dim, dim, 1};
  std::memcpy(t.shape, shape, sizeof shape);
  std::memcpy(t.strides, strides, sizeof strides);
  return t;
}

// Columns [col0, col0 + cols) of a contiguous fp32 LSE [batch, heads, seqlen].
flash_tensor lse_view(float* base, int64_t batch, int64_t heads, int64_t seqlen, int64_t col0, int64_t cols,
                      int device) {
  flash_tensor t;
  std::memset(&t, 0, sizeof t);
  t.data = base + col0;
  t.dtype = FLASH_DTYPE_FP32;
  t.device_type = FLASH_DEVICE_CUDA;
  t.device_id = device;
  t.ndim = 3;
  const int64_t shape[3] = {batch, heads, cols}, strides[3] = {heads * seqlen, seqlen, 1};
  std::memcpy(t.shape, shape, sizeof shape);
  std::memcpy(t.strides, strides, sizeof strides);
  return t;
}

struct Gpu {
  int id = 0;
  cudaStream_t compute = nullptr, comm = nullptr;
  cudaEvent_t computed = nullptr, arrived = nullptr;
  ncclComm_t nccl = nullptr;
  void* q = nullptr;                // [batch, L, heads, dim] bf16
  void* kv[2] = {nullptr, nullptr}; // double-buffered [2][batch, L, heads_kv, dim] bf16: K then V
  std::vector<void*> o_part;        // per step [batch, L, heads, dim] bf16
  std::vector<float*> lse_part;     // per step [batch, heads, L] fp32
  void* o = nullptr;                // the combined result [batch, L, heads, dim] bf16
};

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    const long long v = std::atoll(argv[i + 1]);
    if (a == "--gpus") opt.gpus = static_cast<int>(v);
    else if (a == "--seqlen") opt.seqlen = v;
    else if (a == "--batch") opt.batch = v;
    else if (a == "--heads") opt.heads = v;
    else if (a == "--heads-kv") opt.heads_kv = v;
    else if (a == "--dim") opt.dim = v;
    else if (a == "--causal") opt.causal = static_cast<int>(v);
    else if (a == "--iters") opt.iters = static_cast<int>(v);
    else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }

  // NVLink multicast (NVLS, NVLink SHARP) stays off: on the shared multi-GPU machines this project is lent, a program
  // that uses it can put the host's GPUs, which others share, out of service for a day or more (their device README),
  // and NCCL sets it up by itself at communicator creation on NVSwitch systems. Ring attention needs only
  // point-to-point send/recv, which never uses it. Set before the first communicator is created: NCCL reads its
  // environment once. (Overwrites any value: this program must never run with multicast on.)
  setenv("NCCL_NVLS_ENABLE", "0", 1);

  int available = 0;
  if (cudaError_t e = cudaGetDeviceCount(&available); e != cudaSuccess) {
    std::fprintf(stderr, "no usable CUDA device: %s\n", cudaGetErrorString(e));
    return 2;
  }
  const int n = opt.gpus > 0 ? opt.gpus : available;
  if (n < 1 || n > available) {
    std::fprintf(stderr, "need %d GPU(s), %d visible\n", n, available);
    return 2;
  }
  const int64_t S = opt.seqlen, B = opt.batch, H = opt.heads, HKV = opt.heads_kv, D = opt.dim;
  const bool causal = opt.causal != 0;
  const int64_t pieces = causal ? 2 * n : n;  // zigzag chunks (causal) or contiguous slices
  if (S % pieces != 0) {
    std::fprintf(stderr, "--seqlen %lld must be a multiple of %lld\n", (long long)S, (long long)pieces);
    return 2;
  }
  const int64_t L = S / n, c = causal ? L / 2 : L;  // local tokens; chunk length
  std::printf("libflash %s: ring attention over %d GPU(s), %s, batch %lld, seqlen %lld (%lld per GPU), heads %lld/%lld, "
              "d %lld, bf16\n", flash_version_string(), n, causal ? "causal (zigzag split)" : "non-causal",
              (long long)B, (long long)S, (long long)L, (long long)H, (long long)HKV, (long long)D);

  // Global inputs on the host (bf16), and each token's owner: local row of global position p on GPU r.
  std::mt19937 rng(1234);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<uint16_t> hq(B * S * H * D), hk(B * S * HKV * D), hv(B * S * HKV * D);
  for (auto* vec : {&hq, &hk, &hv})
    for (auto& x : *vec) x = to_bf16(normal(rng));
  // global start of local chunk j (0 or 1) of GPU r
  auto chunk_start = [&](int r, int j) -> int64_t {
    if (!causal) return r * L;
    return (j == 0 ? r : 2 * n - 1 - r) * c;
  };
  // Copy the local rows of a global [B, S, heads, D] host array into a contiguous [B, L, heads, D] host array.
  auto gather_local = [&](const std::vector<uint16_t>& g, int64_t heads, int r) {
    std::vector<uint16_t> out(B * L * heads * D);
    const int64_t row = heads * D;
    for (int64_t b = 0; b < B; ++b)
      for (int j = 0; j < (causal ? 2 : 1); ++j)
        std::memcpy(&out[(b * L + j * c) * row], &g[(b * S + chunk_start(r, j)) * row],
                    sizeof(uint16_t) * c * row);
    return out;
  };

  // Per GPU: streams, events, buffers, local inputs.
  std::vector<Gpu> gpus(n);
  const size_t q_bytes = sizeof(uint16_t) * B * L * H * D, kv_half = sizeof(uint16_t) * B * L * HKV * D;
  for (int r = 0; r < n; ++r) {
    Gpu& g = gpus[r];
    g.id = r;
    CHECK_CUDA(cudaSetDevice(r));
    CHECK_CUDA(cudaStreamCreateWithFlags(&g.compute, cudaStreamNonBlocking));
    CHECK_CUDA(cudaStreamCreateWithFlags(&g.comm, cudaStreamNonBlocking));
    CHECK_CUDA(cudaEventCreateWithFlags(&g.computed, cudaEventDisableTiming));
    CHECK_CUDA(cudaEventCreateWithFlags(&g.arrived, cudaEventDisableTiming));
    CHECK_CUDA(cudaMalloc(&g.q, q_bytes));
    CHECK_CUDA(cudaMalloc(&g.o, q_bytes));
    for (auto& buf : g.kv) CHECK_CUDA(cudaMalloc(&buf, 2 * kv_half));
    g.o_part.resize(n);
    g.lse_part.resize(n);
    for (int t = 0; t < n; ++t) {
      CHECK_CUDA(cudaMalloc(&g.o_part[t], q_bytes));
      CHECK_CUDA(cudaMalloc(&g.lse_part[t], sizeof(float) * B * H * L));
    }
    const auto lq = gather_local(hq, H, r), lk = gather_local(hk, HKV, r), lv = gather_local(hv, HKV, r);
    CHECK_CUDA(cudaMemcpy(g.q, lq.data(), q_bytes, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(g.kv[0], lk.data(), kv_half, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(static_cast<char*>(g.kv[0]) + kv_half, lv.data(), kv_half, cudaMemcpyHostToDevice));
  }

  // One communicator per GPU, created together (ncclCommInitRank per device inside a group, as one process per GPU
  // would each call it for its own rank).
  ncclUniqueId id;
  CHECK_NCCL(ncclGetUniqueId(&id));
  CHECK_NCCL(ncclGroupStart());
  for (int r = 0; r < n; ++r) {
    CHECK_CUDA(cudaSetDevice(r));
    CHECK_NCCL(ncclCommInitRank(&gpus[r].nccl, n, id, r));
  }
  CHECK_NCCL(ncclGroupEnd());

  // covered[r][t][j]: step t of GPU r wrote partial results for local chunk j (causal: 2 chunks; else 1).
  std::vector<std::vector<std::array<bool, 2>>> covered(n, std::vector<std::array<bool, 2>>(n));

  // The whole ring forward: N steps, then the combine. Enqueued from this one thread; asynchronous on every GPU.
  auto ring_forward = [&]() {
    int cur = 0;
    for (int t = 0; t < n; ++t) {
      const bool more = t + 1 < n;
      if (more) {
        // 1. Post the transfer of the slice held now to the next GPU, and of the next slice from the previous one.
        //    The communication stream first waits for everything enqueued on the compute stream so far: the previous
        //    step's attention still reads the buffer we receive into (and at t = 0 the slice is being restored).
        for (auto& g : gpus) {
          CHECK_CUDA(cudaSetDevice(g.id));
          CHECK_CUDA(cudaEventRecord(g.computed, g.compute));
          CHECK_CUDA(cudaStreamWaitEvent(g.comm, g.computed, 0));
        }
        CHECK_NCCL(ncclGroupStart());
        for (auto& g : gpus) {
          CHECK_NCCL(ncclSend(g.kv[cur], 2 * kv_half, ncclUint8, (g.id + 1) % n, g.nccl, g.comm));
          CHECK_NCCL(ncclRecv(g.kv[1 - cur], 2 * kv_half, ncclUint8, (g.id + n - 1) % n, g.nccl, g.comm));
        }
        CHECK_NCCL(ncclGroupEnd());
        for (auto& g : gpus) {
          CHECK_CUDA(cudaSetDevice(g.id));
          CHECK_CUDA(cudaEventRecord(g.arrived, g.comm));
        }
      }
      // 2. Attention of the local queries to the visiting slice (of GPU s), concurrently with the transfer.
      for (auto& g : gpus) {
        CHECK_CUDA(cudaSetDevice(g.id));
        const int r = g.id, s = (r - t + n) % n;
        void* k = g.kv[cur];
        void* v = static_cast<char*>(g.kv[cur]) + kv_half;
        int64_t q0 = 0, q_rows = L, k_rows = L;
        int is_causal = 0;
        covered[r][t] = {true, true};
        if (causal) {
          if (s == r) {
            is_causal = 1;  // the diagonal
          } else if (s < r) {
            k_rows = c;  // the slice's first chunk only
          } else {
            q0 = c, q_rows = c;  // the second local chunk only
            covered[r][t][0] = false;
          }
        }
        flash_fwd_args a;
        flash_fwd_args_init(&a);
        a.q = rows_view(g.q, B, L, H, D, q0, q_rows, FLASH_DTYPE_BF16, r);
        a.k = rows_view(k, B, L, HKV, D, 0, k_rows, FLASH_DTYPE_BF16, r);
        a.v = rows_view(v, B, L, HKV, D, 0, k_rows, FLASH_DTYPE_BF16, r);
        a.o = rows_view(g.o_part[t], B, L, H, D, q0, q_rows, FLASH_DTYPE_BF16, r);
        a.lse = lse_view(g.lse_part[t], B, H, L, q0, q_rows, r);
        a.causal = is_causal;
        a.causal_alignment = FLASH_ALIGN_TOP_LEFT;  // the diagonal: equal lengths, either alignment
        a.stream = g.compute;
        CHECK_FLASH(flash_fwd(&a));
        // 3. The next step reads the slice that is arriving now.
        if (more) CHECK_CUDA(cudaStreamWaitEvent(g.compute, g.arrived, 0));
      }
      cur = 1 - cur;
    }
    // Merge the partials of each local query chunk through their LSEs.
    for (auto& g : gpus) {
      CHECK_CUDA(cudaSetDevice(g.id));
      for (int j = 0; j < (causal ? 2 : 1); ++j) {
        std::vector<flash_tensor> o_parts, lse_parts;
        for (int t = 0; t < n; ++t) {
          if (!covered[g.id][t][j]) continue;
          o_parts.push_back(rows_view(g.o_part[t], B, L, H, D, j * c, c, FLASH_DTYPE_BF16, g.id));
          lse_parts.push_back(lse_view(g.lse_part[t], B, H, L, j * c, c, g.id));
        }
        flash_combine_args m;
        flash_combine_args_init(&m);
        m.num_parts = static_cast<int32_t>(o_parts.size());
        m.o_parts = o_parts.data();
        m.lse_parts = lse_parts.data();
        m.o = rows_view(g.o, B, L, H, D, j * c, c, FLASH_DTYPE_BF16, g.id);
        m.stream = g.compute;
        CHECK_FLASH(flash_combine(&m));
      }
    }
  };

  auto sync_all = [&]() {
    for (auto& g : gpus) {
      CHECK_CUDA(cudaSetDevice(g.id));
      CHECK_CUDA(cudaDeviceSynchronize());
    }
  };

  // The local K/V slice is in kv[0] at the start of every call: keep a pristine copy to restore between calls.
  std::vector<void*> kv_home(n);
  for (auto& g : gpus) {
    CHECK_CUDA(cudaSetDevice(g.id));
    CHECK_CUDA(cudaMalloc(&kv_home[g.id], 2 * kv_half));
    CHECK_CUDA(cudaMemcpy(kv_home[g.id], g.kv[0], 2 * kv_half, cudaMemcpyDeviceToDevice));
  }
  auto restore = [&]() {
    for (auto& g : gpus) {
      CHECK_CUDA(cudaSetDevice(g.id));
      CHECK_CUDA(cudaMemcpyAsync(g.kv[0], kv_home[g.id], 2 * kv_half, cudaMemcpyDeviceToDevice, g.compute));
    }
  };

  ring_forward();
  sync_all();

  // Reference: one flash_fwd of the whole sequence on GPU 0.
  CHECK_CUDA(cudaSetDevice(0));
  void *fq, *fk, *fv, *fo;
  CHECK_CUDA(cudaMalloc(&fq, sizeof(uint16_t) * hq.size()));
  CHECK_CUDA(cudaMalloc(&fk, sizeof(uint16_t) * hk.size()));
  CHECK_CUDA(cudaMalloc(&fv, sizeof(uint16_t) * hv.size()));
  CHECK_CUDA(cudaMalloc(&fo, sizeof(uint16_t) * hq.size()));
  CHECK_CUDA(cudaMemcpy(fq, hq.data(), sizeof(uint16_t) * hq.size(), cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(fk, hk.data(), sizeof(uint16_t) * hk.size(), cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(fv, hv.data(), sizeof(uint16_t) * hv.size(), cudaMemcpyHostToDevice));
  flash_fwd_args full;
  flash_fwd_args_init(&full);
  full.q = rows_view(fq, B, S, H, D, 0, S, FLASH_DTYPE_BF16, 0);
  full.k = rows_view(fk, B, S, HKV, D, 0, S, FLASH_DTYPE_BF16, 0);
  full.v = rows_view(fv, B, S, HKV, D, 0, S, FLASH_DTYPE_BF16, 0);
  full.o = rows_view(fo, B, S, H, D, 0, S, FLASH_DTYPE_BF16, 0);
  full.causal = causal ? 1 : 0;
  full.stream = gpus[0].compute;
  CHECK_FLASH(flash_fwd(&full));
  CHECK_CUDA(cudaStreamSynchronize(gpus[0].compute));
  std::vector<uint16_t> ho(hq.size());
  CHECK_CUDA(cudaMemcpy(ho.data(), fo, sizeof(uint16_t) * ho.size(), cudaMemcpyDeviceToHost));

  // Compare every GPU's rows with the reference's rows at the same global positions. Both are bf16 roundings of the
  // same exact result (the ring's through bf16 partials merged in fp32): allow a few bf16 ulps of the largest |O|.
  double max_err = 0.0, max_ref = 0.0;
  for (auto& g : gpus) {
    std::vector<uint16_t> lo(B * L * H * D);
    CHECK_CUDA(cudaSetDevice(g.id));
    CHECK_CUDA(cudaMemcpy(lo.data(), g.o, q_bytes, cudaMemcpyDeviceToHost));
    const auto want = gather_local(ho, H, g.id);
    for (size_t i = 0; i < lo.size(); ++i) {
      max_err = std::max(max_err, std::fabs(double(from_bf16(lo[i])) - from_bf16(want[i])));
      max_ref = std::max(max_ref, std::fabs(double(from_bf16(want[i]))));
    }
  }
  const double tol = 4.0 * max_ref / 128.0;  // 4 ulps of bf16 (8 significant bits) at max |O|
  std::printf("max |ring - one GPU| = %.3g (max |O| = %.3g, tolerance %.3g): %s\n", max_err, max_ref, tol,
              max_err <= tol ? "OK" : "MISMATCH");

  // Timing: the ring over N GPUs against the whole sequence on one (when it fits there).
  auto time_ms = [&](auto&& body, auto&& sync) {
    body();
    sync();
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < opt.iters; ++i) body();
    sync();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / opt.iters;
  };
  const double ring_ms = time_ms([&] { restore(); ring_forward(); }, sync_all);
  const double one_ms = time_ms([&] { CHECK_FLASH(flash_fwd(&full)); },
                                [&] { CHECK_CUDA(cudaSetDevice(0)); CHECK_CUDA(cudaStreamSynchronize(gpus[0].compute)); });
  std::printf("forward: ring over %d GPU(s) %.3f ms, one GPU %.3f ms: speed-up %.2fx\n", n, ring_ms, one_ms,
              one_ms / ring_ms);

  for (auto& g : gpus) {
    CHECK_CUDA(cudaSetDevice(g.id));
    ncclCommDestroy(g.nccl);
  }
  return max_err <= tol ? 0 : 1;
}
