// tests/test_gpu_reliability.cpp -- issue 70 on the GPU (label: gpu; each test skips without a CUDA device):
//   - calls from 8 host threads on 8 streams at once give bitwise the results of the same calls run one
//     after another (forward, and the deterministic backward);
//   - the forward and backward captured in a CUDA graph (caller-provided workspaces) and replayed 100 times
//     give bitwise the eager results, every replay;
//   - garbage device block-mask arrays (random kv_num_blocks and kv_indices: negative, huge, repeated) never
//     make a kernel read or write out of bounds. Run this one under `compute-sanitizer --tool memcheck` (the
//     arrays are allocated to their exact size, so an out-of-range read is reported); without it, it still
//     checks that no call faults and that O stays finite.
// Every algorithm usable on device 0 (sm80, sm90, naive) and AUTO.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "support/harness.hpp"

#ifdef FLASH_TEST_WITH_CUDA
#include <cuda_runtime.h>
#endif

using namespace flash_test;

#ifdef FLASH_TEST_WITH_CUDA
namespace {

constexpr int32_t kAlgorithms[] = {FLASH_ALGO_AUTO, FLASH_ALGO_SM80, FLASH_ALGO_SM90, FLASH_ALGO_NAIVE};

std::string algo_name(int32_t a) { return flash_algorithm_name(a); }

bool usable(int32_t algorithm, std::string* why) {
  if (!cuda_available()) return *why = "no CUDA device", false;
  if (algorithm == FLASH_ALGO_AUTO) return true;
  flash_device_info info;
  flash_device_info_init(&info);
  if (flash_get_device_info(FLASH_DEVICE_CUDA, 0, &info) != FLASH_OK) return *why = flash_last_error_message(), false;
  if (!(info.algorithms & (1u << algorithm))) return *why = algo_name(algorithm) + " not available on " + info.name, false;
  return true;
}

#define CUDA_OK(expr)                                                                              \
  do {                                                                                             \
    const cudaError_t e_ = (expr);                                                                 \
    ASSERT_EQ(e_, cudaSuccess) << #expr << ": " << cudaGetErrorString(e_);                          \
  } while (0)

// Device memory, freed at scope exit.
struct DeviceBuffer {
  void* ptr = nullptr;
  size_t bytes = 0;
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t n) : bytes(n) {
    if (n && cudaMalloc(&ptr, n) != cudaSuccess) ptr = nullptr, bytes = 0;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr(o.ptr), bytes(o.bytes) { o.ptr = nullptr, o.bytes = 0; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(ptr, o.ptr), std::swap(bytes, o.bytes);
    return *this;
  }
  ~DeviceBuffer() { if (ptr) cudaFree(ptr); }
  std::vector<uint8_t> download() const {
    std::vector<uint8_t> h(bytes);
    if (bytes) cudaMemcpy(h.data(), ptr, bytes, cudaMemcpyDeviceToHost);
    return h;
  }
};

// One attention problem on device 0: bf16 q, k, v, d_o (random), the forward's o and fp32 lse, the
// gradients, an optional block mask, all contiguous.
struct Problem {
  int64_t b, sq, sk, hq, hkv, d;
  bool causal = false;
  int32_t window_left = -1;
  bool block_mask = false;
  DeviceBuffer q, k, v, o, lse, d_o, dq, dk, dv, num, idx;
  flash_block_mask mask{};

  Problem(int64_t b_, int64_t sq_, int64_t sk_, int64_t hq_, int64_t hkv_, int64_t d_, uint64_t seed)
      : b(b_), sq(sq_), sk(sk_), hq(hq_), hkv(hkv_), d(d_),
        q(bytes_q()), k(bytes_k()), v(bytes_k()), o(bytes_q()), lse(b_ * hq_ * sq_ * 4), d_o(bytes_q()), dq(bytes_q()),
        dk(bytes_k()), dv(bytes_k()) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<double> n(0.0, 1.0);
    for (DeviceBuffer* t : {&q, &k, &v, &d_o}) {
      std::vector<uint16_t> h(t->bytes / 2);
      for (auto& x : h) x = flash_ref::bf16_round(n(rng));
      cudaMemcpy(t->ptr, h.data(), t->bytes, cudaMemcpyHostToDevice);
    }
    for (DeviceBuffer* t : {&o, &lse, &dq, &dk, &dv}) cudaMemset(t->ptr, 0xFF, t->bytes);
  }
  size_t bytes_q() const { return static_cast<size_t>(b * sq * hq * d * 2); }
  size_t bytes_k() const { return static_cast<size_t>(b * sk * hkv * d * 2); }

  // A block mask of 128 x 128 blocks keeping a random half of the key blocks of each query block (host
  // arrays uploaded; broadcast over batch).
  void add_block_mask(uint64_t seed) {
    const int32_t nq = static_cast<int32_t>((sq + 127) / 128), nk = static_cast<int32_t>((sk + 127) / 128);
    std::mt19937_64 rng(seed);
    std::vector<int32_t> hn(hq * nq), hi(hq * nq * nk);
    for (int64_t r = 0; r < hq * nq; ++r) {
      int32_t c = 0;
      for (int32_t kb = 0; kb < nk; ++kb)
        if (rng() & 1) hi[r * nk + c++] = kb;
      hn[r] = c;
    }
    num = DeviceBuffer(hn.size() * 4), idx = DeviceBuffer(hi.size() * 4);
    cudaMemcpy(num.ptr, hn.data(), num.bytes, cudaMemcpyHostToDevice);
    cudaMemcpy(idx.ptr, hi.data(), idx.bytes, cudaMemcpyHostToDevice);
    flash_block_mask_init(&mask);
    mask.block_m = mask.block_n = 128, mask.num_q_blocks = nq, mask.max_kv_blocks = nk;
    mask.kv_num_blocks = static_cast<const int32_t*>(num.ptr), mask.kv_indices = static_cast<const int32_t*>(idx.ptr);
    mask.kv_num_blocks_strides[0] = 0, mask.kv_num_blocks_strides[1] = nq, mask.kv_num_blocks_strides[2] = 1;
    mask.kv_indices_strides[0] = 0, mask.kv_indices_strides[1] = int64_t{nq} * nk, mask.kv_indices_strides[2] = nk;
    mask.kv_indices_strides[3] = 1;
    block_mask = true;
  }

  flash_tensor t4(const DeviceBuffer& x, int64_t s, int64_t h) const {
    const int64_t shape[4] = {b, s, h, d};
    return flash_tensor_contiguous(x.ptr, FLASH_DTYPE_BF16, FLASH_DEVICE_CUDA, 0, 4, shape);
  }
  flash_tensor t_lse() const {
    const int64_t shape[3] = {b, hq, sq};
    return flash_tensor_contiguous(lse.ptr, FLASH_DTYPE_FP32, FLASH_DEVICE_CUDA, 0, 3, shape);
  }
  template <class Args>
  void options(Args* a, int32_t algorithm, cudaStream_t stream) const {
    a->causal = causal;
    a->window_left = window_left;
    a->algorithm = algorithm;
    a->stream = stream;
    a->block_mask = block_mask ? &mask : nullptr;
  }
  flash_fwd_args fwd_args(int32_t algorithm, cudaStream_t stream) const {
    flash_fwd_args a;
    flash_fwd_args_init(&a);
    a.q = t4(q, sq, hq), a.k = t4(k, sk, hkv), a.v = t4(v, sk, hkv), a.o = t4(o, sq, hq), a.lse = t_lse();
    options(&a, algorithm, stream);
    return a;
  }
  flash_bwd_args bwd_args(int32_t algorithm, cudaStream_t stream) const {
    flash_bwd_args a;
    flash_bwd_args_init(&a);
    a.q = t4(q, sq, hq), a.k = t4(k, sk, hkv), a.v = t4(v, sk, hkv), a.o = t4(o, sq, hq), a.lse = t_lse();
    a.d_o = t4(d_o, sq, hq), a.dq = t4(dq, sq, hq), a.dk = t4(dk, sk, hkv), a.dv = t4(dv, sk, hkv);
    options(&a, algorithm, stream);
    a.flags = FLASH_FLAG_DETERMINISTIC;  // bitwise comparisons
    return a;
  }
  // The outputs of a forward + backward, as bytes.
  std::vector<std::vector<uint8_t>> outputs() const { return {o.download(), lse.download(), dq.download(), dk.download(), dv.download()}; }
  void poison(cudaStream_t s) const {
    for (const DeviceBuffer* t : {&o, &lse, &dq, &dk, &dv}) cudaMemsetAsync(t->ptr, 0xFF, t->bytes, s);
  }
};

// The algorithm the backward runs for a forward algorithm: the same one when it has a backward (sm90's
// backward is sm80's kernels, under its own name), else AUTO.
int32_t bwd_algorithm(const Problem& p, int32_t algorithm) {
  flash_bwd_args a = p.bwd_args(algorithm, nullptr);
  size_t n = 0;
  return flash_bwd_workspace_size(&a, &n) == FLASH_OK ? algorithm : FLASH_ALGO_AUTO;
}

// Forward then backward on `stream`; statuses in *sf, *sb.
void fwd_bwd(const Problem& p, int32_t algorithm, cudaStream_t stream, int32_t* sf, int32_t* sb, void* wf = nullptr,
             size_t nf = 0, void* wb = nullptr, size_t nb = 0) {
  flash_fwd_args f = p.fwd_args(algorithm, stream);
  f.workspace = wf, f.workspace_size = nf;
  *sf = flash_fwd(&f);
  flash_bwd_args b = p.bwd_args(bwd_algorithm(p, algorithm), stream);
  b.workspace = wb, b.workspace_size = nb;
  *sb = *sf == FLASH_OK ? flash_bwd(&b) : *sf;
}

// The problems of the concurrency test: different shapes, masks and head dims, so that the 8 calls in flight
// at once run different kernels and grid sizes.
std::vector<Problem> problems(int n, uint64_t seed) {
  std::vector<Problem> ps;
  for (int i = 0; i < n; ++i) {
    const int64_t d = i % 2 ? 128 : 64;
    ps.emplace_back(1 + i % 2, 500 + 131 * i, 700 + 97 * i, 8, i % 3 ? 2 : 8, d, seed + i);
    Problem& p = ps.back();
    p.causal = i % 3 == 1;
    if (i % 4 == 2) p.window_left = 256;
    if (i % 4 == 3) p.add_block_mask(seed * 7 + i);
  }
  return ps;
}

}  // namespace

class GpuReliability : public ::testing::TestWithParam<int32_t> {};

// 8 host threads, each with its own stream and problem, call flash_fwd and flash_bwd at the same moment (and
// 3 times over); every result is bitwise the one the same call gave alone.
TEST_P(GpuReliability, EightThreadsOnEightStreamsMatchSerialCalls) {
  const int32_t algorithm = GetParam();
  std::string why;
  if (!usable(algorithm, &why)) GTEST_SKIP() << why;
  CUDA_OK(cudaSetDevice(0));
  constexpr int kThreads = 8;
  std::vector<Problem> ps = problems(kThreads, base_seed());
  std::vector<std::vector<std::vector<uint8_t>>> serial(kThreads);
  for (int i = 0; i < kThreads; ++i) {
    int32_t sf, sb;
    fwd_bwd(ps[i], algorithm, nullptr, &sf, &sb);
    if (sf == FLASH_ERROR_UNSUPPORTED) GTEST_SKIP() << algo_name(algorithm) << ": " << flash_last_error_message();
    ASSERT_EQ(sf, FLASH_OK) << flash_last_error_message();
    ASSERT_EQ(sb, FLASH_OK) << flash_last_error_message();
    CUDA_OK(cudaDeviceSynchronize());
    serial[i] = ps[i].outputs();
  }
  std::vector<cudaStream_t> streams(kThreads);
  for (auto& s : streams) CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < kThreads; ++i) ps[i].poison(streams[i]);
    CUDA_OK(cudaDeviceSynchronize());
    std::atomic<int> ready{0};
    std::vector<int32_t> sf(kThreads, -1), sb(kThreads, -1);
    std::vector<std::thread> threads;
    for (int i = 0; i < kThreads; ++i)
      threads.emplace_back([&, i] {
        cudaSetDevice(0);
        ready.fetch_add(1);
        while (ready.load() < kThreads) std::this_thread::yield();  // all start together
        fwd_bwd(ps[i], algorithm, streams[i], &sf[i], &sb[i]);
        cudaStreamSynchronize(streams[i]);
      });
    for (auto& t : threads) t.join();
    CUDA_OK(cudaDeviceSynchronize());
    for (int i = 0; i < kThreads; ++i) {
      ASSERT_EQ(sf[i], FLASH_OK) << "thread " << i;
      ASSERT_EQ(sb[i], FLASH_OK) << "thread " << i;
      const auto got = ps[i].outputs();
      const char* names[] = {"o", "lse", "dq", "dk", "dv"};
      for (int t = 0; t < 5; ++t)
        EXPECT_TRUE(got[t] == serial[i][t]) << names[t] << " of thread " << i << " (round " << round << ") differs from the serial call";
    }
  }
  for (auto& s : streams) cudaStreamDestroy(s);
}

// The forward and the backward captured into one CUDA graph with the caller's workspaces, then replayed 100
// times: after every replay the outputs (poisoned by the graph's first node) are bitwise the eager ones.
TEST_P(GpuReliability, CudaGraphReplayMatchesEager) {
  const int32_t algorithm = GetParam();
  std::string why;
  if (!usable(algorithm, &why)) GTEST_SKIP() << why;
  CUDA_OK(cudaSetDevice(0));
  for (int variant = 0; variant < 2; ++variant) {
    Problem p(2, 1000, 1500, 8, 2, variant ? 128 : 64, base_seed() ^ (0x9a9b + variant));
    p.causal = variant == 0;
    if (variant == 1) p.add_block_mask(base_seed() + 3);
    CUDA_OK(cudaDeviceSynchronize());  // the Problem's uploads (legacy stream) landed before a non-blocking stream reads
    cudaStream_t stream;
    CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    flash_fwd_args fq = p.fwd_args(algorithm, stream);
    flash_bwd_args bq = p.bwd_args(bwd_algorithm(p, algorithm), stream);
    size_t nf = 0, nb = 0;
    const int32_t sq = flash_fwd_workspace_size(&fq, &nf);
    if (sq == FLASH_ERROR_UNSUPPORTED) GTEST_SKIP() << algo_name(algorithm) << ": " << flash_last_error_message();
    ASSERT_EQ(sq, FLASH_OK) << flash_last_error_message();
    ASSERT_EQ(flash_bwd_workspace_size(&bq, &nb), FLASH_OK) << flash_last_error_message();
    DeviceBuffer wf(std::max<size_t>(nf, 16)), wb(std::max<size_t>(nb, 16));

    // Eager, twice: the second run has every lazy initialisation (cuBLAS handles, function attributes) behind it.
    int32_t sf, sb;
    for (int i = 0; i < 2; ++i) {
      p.poison(stream);
      fwd_bwd(p, algorithm, stream, &sf, &sb, wf.ptr, nf, wb.ptr, nb);
      ASSERT_EQ(sf, FLASH_OK) << flash_last_error_message();
      ASSERT_EQ(sb, FLASH_OK) << flash_last_error_message();
    }
    CUDA_OK(cudaStreamSynchronize(stream));
    const auto eager = p.outputs();

    cudaGraph_t graph;
    CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    p.poison(stream);
    fwd_bwd(p, algorithm, stream, &sf, &sb, wf.ptr, nf, wb.ptr, nb);
    const std::string message = flash_last_error_message();
    CUDA_OK(cudaStreamEndCapture(stream, &graph));
    ASSERT_EQ(sf, FLASH_OK) << "forward under capture: " << message;
    ASSERT_EQ(sb, FLASH_OK) << "backward under capture: " << message;
    cudaGraphExec_t exec;
    CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
    for (int replay = 0; replay < 100; ++replay) {
      CUDA_OK(cudaGraphLaunch(exec, stream));
      CUDA_OK(cudaStreamSynchronize(stream));
      const auto got = p.outputs();
      const char* names[] = {"o", "lse", "dq", "dk", "dv"};
      for (int t = 0; t < 5; ++t)
        ASSERT_TRUE(got[t] == eager[t]) << names[t] << " differs from the eager call after replay " << replay
                                        << " (variant " << variant << ")";
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(stream);
  }
}

// Garbage block-mask arrays on the device cannot be validated without a synchronisation: the kernels must
// skip what is out of range. Arrays exactly sized (memcheck sees a read past them); values random int32s,
// small ones (in and just out of range, repeats) and extremes.
TEST_P(GpuReliability, GarbageDeviceBlockMaskStaysInBounds) {
  const int32_t algorithm = GetParam();
  std::string why;
  if (!usable(algorithm, &why)) GTEST_SKIP() << why;
  CUDA_OK(cudaSetDevice(0));
  std::mt19937_64 rng(base_seed() ^ 0x6a7b);
  for (int round = 0; round < 12; ++round) {
    const int64_t d = round % 3 == 0 ? 64 : round % 3 == 1 ? 128 : 256;
    Problem p(1 + round % 2, 200 + 37 * round, 300 + 53 * round, 4, 2, d, rng());
    const int32_t bm = round % 2 ? 64 : 128, bn = round % 4 < 2 ? 128 : 64;
    const int32_t nq = static_cast<int32_t>((p.sq + bm - 1) / bm), nk = static_cast<int32_t>((p.sk + bn - 1) / bn);
    const int32_t maxk = std::max<int32_t>(1, nk - static_cast<int32_t>(rng() % 2));
    std::vector<int32_t> hn(p.b * p.hq * nq), hi(p.b * p.hq * nq * maxk);
    auto garbage = [&](int32_t range) -> int32_t {
      switch (rng() % 4) {
        case 0: return static_cast<int32_t>(rng());                               // anything
        case 1: return static_cast<int32_t>(rng() % (2 * range + 3)) - range - 1;  // around the valid range
        case 2: return range;                                                     // one past
        default: return static_cast<int32_t>(rng() % std::max(range, 1));         // valid (repeats likely)
      }
    };
    for (auto& x : hn) x = garbage(maxk);
    for (auto& x : hi) x = garbage(nk);
    p.num = DeviceBuffer(hn.size() * 4), p.idx = DeviceBuffer(hi.size() * 4);
    CUDA_OK(cudaMemcpy(p.num.ptr, hn.data(), p.num.bytes, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(p.idx.ptr, hi.data(), p.idx.bytes, cudaMemcpyHostToDevice));
    flash_block_mask_init(&p.mask);
    p.mask.block_m = bm, p.mask.block_n = bn, p.mask.num_q_blocks = nq, p.mask.max_kv_blocks = maxk;
    p.mask.kv_num_blocks = static_cast<const int32_t*>(p.num.ptr), p.mask.kv_indices = static_cast<const int32_t*>(p.idx.ptr);
    p.mask.kv_num_blocks_strides[0] = p.hq * nq, p.mask.kv_num_blocks_strides[1] = nq, p.mask.kv_num_blocks_strides[2] = 1;
    p.mask.kv_indices_strides[0] = p.hq * nq * maxk, p.mask.kv_indices_strides[1] = int64_t{nq} * maxk;
    p.mask.kv_indices_strides[2] = maxk, p.mask.kv_indices_strides[3] = 1;
    p.block_mask = true;
    p.causal = round % 5 == 4;

    int32_t sf, sb;
    fwd_bwd(p, algorithm, nullptr, &sf, &sb);
    // The call may refuse (an algorithm that does not support these block sizes), but never fault.
    const cudaError_t e = cudaDeviceSynchronize();
    ASSERT_EQ(e, cudaSuccess) << cudaGetErrorString(e) << " (round " << round << ", " << algo_name(algorithm) << ")";
    if (sf != FLASH_OK) {
      EXPECT_EQ(sf, FLASH_ERROR_UNSUPPORTED) << flash_last_error_message();
      continue;
    }
    EXPECT_TRUE(sb == FLASH_OK || sb == FLASH_ERROR_UNSUPPORTED) << flash_status_string(sb) << ": " << flash_last_error_message();
    const std::vector<uint8_t> o = p.o.download();
    for (size_t i = 0; i < o.size(); i += 2) {
      uint16_t h;
      std::memcpy(&h, &o[i], 2);
      ASSERT_TRUE(std::isfinite(flash_ref::bf16_value(h))) << "O element " << i / 2 << " is not finite (round " << round << ")";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Algorithms, GpuReliability, ::testing::ValuesIn(kAlgorithms),
                         [](const auto& info) { return algo_name(info.param); });

#else  // built without CUDA: the suite reports itself skipped

TEST(GpuReliability, SkippedWithoutCuda) { GTEST_SKIP() << "this test binary was built without CUDA (FLASH_WITH_CUDA=OFF)"; }

#endif
