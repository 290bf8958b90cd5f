// tests/test_kvcache_gpu.cpp -- flash_fwd_kvcache and flash_combine on the GPU (issue 71; label gpu: every test skips
// without a CUDA device). The cases of support/cases.hpp mirrored to device memory -- outputs poisoned with
// NaN on the device, index arrays uploaded to their exact size -- then the caches and outputs copied back and
// checked as on the CPU: the appended cache bit for bit (nothing else touched), O and LSE against the fp64
// reference within 2 x the naive same-dtype error + one rounding. Also: a caller workspace, CUDA graph capture and
// replay with new cache_seqlens and block tables, garbage device index arrays (run under compute-sanitizer
// memcheck: nothing may be read or written outside the tensors), and flash_combine against a one-shot reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "support/harness.hpp"
#include "support/cases.hpp"

#ifdef FLASH_TEST_WITH_CUDA
#include <cuda_runtime.h>

namespace {

using flash_test::base_seed;
using namespace kv_test;

// Device memory, freed at scope exit.
struct Dev {
  void* ptr = nullptr;
  size_t bytes = 0;
  Dev() = default;
  explicit Dev(size_t n) : bytes(n) {
    if (n && cudaMalloc(&ptr, n) != cudaSuccess) ptr = nullptr, bytes = 0;
  }
  template <class T>
  explicit Dev(const std::vector<T>& host) : Dev(host.size() * sizeof(T)) {
    if (bytes) cudaMemcpy(ptr, host.data(), bytes, cudaMemcpyHostToDevice);
  }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  Dev(Dev&& o) noexcept : ptr(o.ptr), bytes(o.bytes) { o.ptr = nullptr, o.bytes = 0; }
  ~Dev() {
    if (ptr) cudaFree(ptr);
  }
  template <class T>
  void download(std::vector<T>* host) const {
    if (bytes) cudaMemcpy(host->data(), ptr, bytes, cudaMemcpyDeviceToHost);
  }
};

// A KvCase on device 0: its tensors and index arrays copied up, o and lse poisoned, args retargeted.
struct GpuKv {
  KvCase& c;
  Dev q, k_cache, v_cache, k_new, v_new, o, lse, seqlens, batch_idx, block_table;
  flash_kvcache_args a;
  explicit GpuKv(KvCase& kc)
      : c(kc), q(kc.q.bytes), k_cache(kc.k_cache.bytes), v_cache(kc.v_cache.bytes), k_new(kc.k_new.bytes),
        v_new(kc.v_new.bytes), o(kc.o.bytes.size()), lse(kc.lse.bytes.size()), seqlens(kc.seqlens),
        batch_idx(kc.batch_idx), block_table(kc.block_table) {
    fill_kv_args(c, &a);
    auto to_dev = [](flash_tensor* t, const Dev& d) {
      if (t->data == nullptr) return;
      t->data = d.ptr;
      t->device_type = FLASH_DEVICE_CUDA;
      t->device_id = 0;
    };
    to_dev(&a.q, q), to_dev(&a.k_cache, k_cache), to_dev(&a.v_cache, v_cache), to_dev(&a.k_new, k_new);
    to_dev(&a.v_new, v_new), to_dev(&a.o, o), to_dev(&a.lse, lse);
    a.cache_seqlens = static_cast<const int32_t*>(seqlens.ptr);
    if (a.cache_batch_idx) a.cache_batch_idx = static_cast<const int32_t*>(batch_idx.ptr);
    if (a.block_table) a.block_table = static_cast<const int32_t*>(block_table.ptr);
    poison();
  }
  void poison() {
    if (o.bytes) cudaMemset(o.ptr, 0xFF, o.bytes);
    if (lse.bytes) cudaMemset(lse.ptr, 0xFF, lse.bytes);
  }
  // Results back into the case's host buffers (for check_kv and the cache comparison).
  void download() {
    cudaDeviceSynchronize();
    o.download(&c.o.bytes), lse.download(&c.lse.bytes), k_cache.download(&c.k_cache.bytes), v_cache.download(&c.v_cache.bytes);
  }
};

bool have_gpu(std::string* why) {
  if (!flash_test::cuda_available()) return *why = "no CUDA device", false;
  return true;
}
#define REQUIRE_GPU()                         \
  do {                                        \
    std::string why_;                         \
    if (!have_gpu(&why_)) GTEST_SKIP() << why_; \
  } while (0)

// Runs a spec on the GPU end to end: the appended cache bit for bit, O and LSE against the reference.
void run_and_check_gpu(const KvSpec& spec, uint64_t seed, int32_t* splits_used = nullptr) {
  std::mt19937_64 rng(seed);
  KvCase c = make_kv_case(spec, rng);
  SCOPED_TRACE("LIBFLASH_TEST_SEED=" + std::to_string(base_seed()) + " case: " + c.spec.describe());
  GpuKv g(c);
  const int32_t s = flash_fwd_kvcache(&g.a);
  ASSERT_EQ(s, FLASH_OK) << flash_status_string(s) << ": " << flash_last_error_message();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(g.a.algorithm_used, FLASH_ALGO_SM80);
  if (spec.num_splits > 0) EXPECT_EQ(g.a.num_splits_used, spec.num_splits);
  else EXPECT_GE(g.a.num_splits_used, 1);
  if (splits_used) *splits_used = g.a.num_splits_used;
  g.download();
  EXPECT_TRUE(c.k_cache.bytes == c.k_expected.bytes) << "k_cache after the call differs from the expected cache";
  EXPECT_TRUE(c.v_cache.bytes == c.v_expected.bytes) << "v_cache after the call differs from the expected cache";
  const flash_test::Check ch = check_kv(c);
  EXPECT_TRUE(ch.ok) << ch.message;
}

const int32_t kGpuDtypes[] = {FLASH_DTYPE_FP16, FLASH_DTYPE_BF16};

}  // namespace

TEST(KvcacheGpu, DecodeGqaRatiosAndHeadDims) {
  REQUIRE_GPU();
  uint64_t seed = base_seed() ^ 0x72001;
  for (int32_t dt : kGpuDtypes)
    for (int ratio : {1, 4, 8})
      for (int64_t d : {64, 128, 256}) {
        KvSpec s;
        s.batch = 3, s.heads_kv = 2, s.heads_q = 2 * ratio, s.head_dim = d, s.dtype = dt, s.num_splits = 0;
        s.max_cached = 700;
        run_and_check_gpu(s, seed++);
      }
}

TEST(KvcacheGpu, PagedPageSizesRandomOrder) {
  REQUIRE_GPU();
  uint64_t seed = base_seed() ^ 0x72002;
  for (int64_t ps : {1, 16, 64, 256, 7})
    for (int32_t dt : kGpuDtypes) {
      KvSpec s;
      s.paged = true, s.page_size = ps, s.batch = 4, s.heads_kv = 2, s.heads_q = 8, s.head_dim = 128, s.dtype = dt;
      s.seqlen_new = ps == 1 ? 3 : 1;
      s.max_cached = ps == 256 ? 900 : 500;
      s.num_splits = 0;
      run_and_check_gpu(s, seed++);
    }
}

TEST(KvcacheGpu, CacheBatchIdxAndNoAppend) {
  REQUIRE_GPU();
  uint64_t seed = base_seed() ^ 0x72003;
  for (int32_t dt : kGpuDtypes)
    for (bool append : {true, false}) {
      KvSpec s;
      s.batch_idx = true, s.append = append, s.batch = 4, s.heads_kv = 2, s.heads_q = 8, s.head_dim = 40, s.dtype = dt;
      s.seqlen_new = 2, s.num_splits = 2;
      run_and_check_gpu(s, seed++);
    }
}

TEST(KvcacheGpu, SeqlensZeroAndOne) {
  REQUIRE_GPU();
  uint64_t seed = base_seed() ^ 0x72004;
  for (bool append : {true, false})
    for (bool paged : {false, true})
      for (int32_t splits : {1, 4}) {
        KvSpec s;
        s.append = append, s.paged = paged, s.page_size = 16, s.batch = 4, s.seqlen_new = 3, s.heads_q = 4, s.heads_kv = 1;
        s.head_dim = 64, s.dtype = FLASH_DTYPE_BF16, s.num_splits = splits;
        s.seqlens = {0, 1, 0, 17};
        s.causal = 1;
        run_and_check_gpu(s, seed++);
      }
}

TEST(KvcacheGpu, SeqlenNewOneToSixteenCausalAndWindows) {
  REQUIRE_GPU();
  uint64_t seed = base_seed() ^ 0x72005;
  std::mt19937_64 rng(seed);
  for (int64_t sn = 1; sn <= 16; ++sn) {
    KvSpec s;
    s.seqlen_new = sn, s.batch = 2, s.heads_kv = 2, s.heads_q = 8, s.head_dim = sn % 2 ? 64 : 128;
    s.dtype = kGpuDtypes[sn % 2];
    s.paged = sn % 2 == 0, s.page_size = sn % 4 == 0 ? 16 : 1;
    switch (sn % 4) {
      case 0: s.causal = 1; break;
      case 1: s.window_left = static_cast<int>(rng() % 40), s.window_right = 0; break;
      case 2: s.window_left = static_cast<int>(rng() % 40), s.window_right = static_cast<int>(rng() % 5); break;
      default: s.causal = 1, s.window_left = static_cast<int>(rng() % 100); break;
    }
    s.num_splits = static_cast<int32_t>(sn % 4);  // 0 = the plan's choice
    s.max_cached = 400;
    run_and_check_gpu(s, seed++);
  }
}

TEST(KvcacheGpu, ChunkedPrefill200) {
  REQUIRE_GPU();
  uint64_t seed = base_seed() ^ 0x72006;
  for (bool paged : {false, true})
    for (int64_t d : {64, 128, 256}) {
      KvSpec s;
      s.seqlen_new = 200, s.batch = 2, s.heads_kv = 1, s.heads_q = 4, s.head_dim = d, s.dtype = FLASH_DTYPE_BF16;
      s.paged = paged, s.page_size = 64, s.causal = 1, s.max_cached = 250, s.num_splits = paged ? 3 : 0;
      run_and_check_gpu(s, seed++);
    }
}

// Long caches: the plan splits one sequence over many CTAs (1 x 4k and 2 x 3k keys, 32/8 heads at d128).
TEST(KvcacheGpu, LongCacheAutoSplits) {
  REQUIRE_GPU();
  uint64_t seed = base_seed() ^ 0x72007;
  for (bool paged : {false, true}) {
    KvSpec s;
    s.batch = paged ? 2 : 1, s.heads_q = 32, s.heads_kv = 8, s.head_dim = 128, s.dtype = FLASH_DTYPE_BF16, s.num_splits = 0;
    s.paged = paged, s.page_size = 16;
    s.seqlens = paged ? std::vector<int32_t>{3000, 2111} : std::vector<int32_t>{4095};
    int32_t used = 0;
    run_and_check_gpu(s, seed++, &used);
    EXPECT_GT(used, 1) << "a long cache over a few CTAs should be split";
  }
}

TEST(KvcacheGpu, RandomSweep) {
  REQUIRE_GPU();
  std::mt19937_64 rng(base_seed() ^ 0x72008);
  auto uni = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  static const int64_t dims[] = {8, 40, 64, 72, 96, 128, 192, 256};
  static const int64_t pages[] = {1, 16, 64, 256, 7};
  for (int n = 0; n < 30; ++n) {
    KvSpec s;
    s.batch = uni(1, 4);
    s.heads_kv = uni(1, 3);
    static const int64_t ratios[] = {1, 4, 8};
    s.heads_q = s.heads_kv * ratios[uni(0, 2)];
    s.head_dim = dims[uni(0, 7)];
    s.dtype = kGpuDtypes[uni(0, 1)];
    s.seqlen_new = uni(0, 4) == 0 ? uni(17, 70) : uni(1, 16);
    s.paged = uni(0, 1);
    s.page_size = pages[uni(0, 4)];
    s.batch_idx = !s.paged && uni(0, 1);
    s.append = uni(0, 3) != 0;
    s.causal = uni(0, 1);
    if (uni(0, 2) == 0) {
      s.window_left = uni(0, 1) ? static_cast<int>(uni(0, 200)) : -1;
      s.window_right = s.causal ? 0 : (uni(0, 1) ? static_cast<int>(uni(0, 20)) : -1);
    }
    s.num_splits = static_cast<int32_t>(uni(0, 1) ? 0 : uni(1, 9));
    static const float scales[] = {0.0f, 0.0f, 0.3f, -0.5f};
    s.softmax_scale = scales[uni(0, 3)];
    s.max_cached = s.head_dim >= 128 ? 400 : 900;
    run_and_check_gpu(s, rng());
  }
}

// A caller workspace (NaN-filled, exactly the queried size), the too-small refusal before anything is written.
TEST(KvcacheGpu, CallerWorkspace) {
  REQUIRE_GPU();
  std::mt19937_64 rng(base_seed() ^ 0x72009);
  KvSpec s;
  s.batch = 2, s.heads_q = 8, s.heads_kv = 2, s.head_dim = 128, s.num_splits = 5, s.seqlen_new = 3, s.causal = 1;
  s.dtype = FLASH_DTYPE_FP16, s.max_cached = 600;
  KvCase c = make_kv_case(s, rng);
  SCOPED_TRACE(c.spec.describe());
  GpuKv g(c);
  size_t bytes = 0;
  ASSERT_EQ(flash_fwd_kvcache_workspace_size(&g.a, &bytes), FLASH_OK) << flash_last_error_message();
  EXPECT_GE(bytes, size_t(5) * 2 * 8 * 3 * (128 + 1) * 4);
  Dev ws(bytes);
  cudaMemset(ws.ptr, 0xFF, bytes);
  g.a.workspace = ws.ptr, g.a.workspace_size = bytes - 1;
  EXPECT_EQ(flash_fwd_kvcache(&g.a), FLASH_ERROR_WORKSPACE_TOO_SMALL);
  g.a.workspace_size = bytes;
  ASSERT_EQ(flash_fwd_kvcache(&g.a), FLASH_OK) << flash_last_error_message();
  g.download();
  EXPECT_TRUE(c.k_cache.bytes == c.k_expected.bytes);
  const flash_test::Check ch = check_kv(c);
  EXPECT_TRUE(ch.ok) << ch.message;
}

// A decode step captured once in a CUDA graph (caller workspace, no append) and replayed with new contents of
// cache_seqlens and block_table: every replay equals, bit for bit, an eager call on the same contents.
TEST(KvcacheGpu, GraphCaptureAndReplay) {
  REQUIRE_GPU();
  std::mt19937_64 rng(base_seed() ^ 0x7200a);
  KvSpec s;
  s.batch = 3, s.heads_q = 16, s.heads_kv = 4, s.head_dim = 128, s.dtype = FLASH_DTYPE_BF16, s.paged = true;
  s.page_size = 16, s.append = false, s.num_splits = 0, s.max_cached = 1500;
  s.seqlens = {1500, 700, 1};
  KvCase c = make_kv_case(s, rng);
  // Fill every page (not only the ones in use) with finite keys, so any block table below reads numbers.
  std::normal_distribution<double> dist(0.0, 1.0);
  for (int64_t x = 0; x < c.k_cache.elements(); ++x) c.k_cache.set(x, dist(rng)), c.v_cache.set(x, dist(rng));
  GpuKv g(c);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  g.a.stream = stream;
  size_t bytes = 0;
  ASSERT_EQ(flash_fwd_kvcache_workspace_size(&g.a, &bytes), FLASH_OK);
  Dev ws(std::max<size_t>(bytes, 16));
  g.a.workspace = ws.ptr, g.a.workspace_size = bytes;

  cudaGraph_t graph;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  const int32_t st = flash_fwd_kvcache(&g.a);
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  ASSERT_EQ(st, FLASH_OK) << flash_last_error_message();
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);

  const int64_t pages = c.k_cache.desc.shape[0];
  for (int replay = 0; replay < 8; ++replay) {
    // New lengths (within the block table's columns) and a new random page for every entry.
    std::vector<int32_t> lens(3), table(c.block_table.size());
    for (auto& n : lens) n = static_cast<int32_t>(std::uniform_int_distribution<int64_t>(0, c.max_pages * 16)(rng));
    for (auto& p : table) p = static_cast<int32_t>(std::uniform_int_distribution<int64_t>(0, pages - 1)(rng));
    cudaMemcpyAsync(g.seqlens.ptr, lens.data(), 12, cudaMemcpyHostToDevice, stream);
    cudaMemcpyAsync(g.block_table.ptr, table.data(), table.size() * 4, cudaMemcpyHostToDevice, stream);
    cudaMemsetAsync(g.o.ptr, 0xFF, g.o.bytes, stream);
    ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    std::vector<unsigned char> o_graph(g.o.bytes), lse_graph(g.lse.bytes);
    cudaStreamSynchronize(stream);
    g.o.download(&o_graph), g.lse.download(&lse_graph);
    cudaMemsetAsync(g.o.ptr, 0xFF, g.o.bytes, stream);
    ASSERT_EQ(flash_fwd_kvcache(&g.a), FLASH_OK) << flash_last_error_message();
    std::vector<unsigned char> o_eager(g.o.bytes), lse_eager(g.lse.bytes);
    cudaStreamSynchronize(stream);
    g.o.download(&o_eager), g.lse.download(&lse_eager);
    EXPECT_TRUE(o_graph == o_eager && lse_graph == lse_eager) << "replay " << replay << " differs from the eager call";
    // And the eager call against the reference, on these contents.
    c.seqlens = lens, c.block_table = table, c.spec.seqlens = lens;
    c.o.bytes = o_eager, c.lse.bytes = lse_eager;
    c.k_expected = c.k_cache, c.v_expected = c.v_cache;
    const flash_test::Check ch = check_kv(c);
    EXPECT_TRUE(ch.ok) << "replay " << replay << ": " << ch.message;
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

// Garbage device index arrays: cache_seqlens negative or past the capacity, pages and cache rows out of range.
// The kernels clamp; under compute-sanitizer memcheck (the arrays and tensors allocated to their exact size) no
// access may fall outside them. Without the sanitizer: no fault, no CUDA error.
TEST(KvcacheGpu, GarbageDeviceIndices) {
  REQUIRE_GPU();
  std::mt19937_64 rng(base_seed() ^ 0x7200b);
  for (int trial = 0; trial < 12; ++trial) {
    KvSpec s;
    s.batch = 3, s.heads_q = 8, s.heads_kv = 2, s.head_dim = trial % 3 == 0 ? 64 : 128, s.dtype = FLASH_DTYPE_BF16;
    s.paged = trial % 2 == 0, s.page_size = trial % 4 == 0 ? 16 : 5, s.batch_idx = !s.paged;
    s.append = trial % 3 != 2, s.seqlen_new = trial < 8 ? 1 : 40, s.num_splits = trial % 5;
    s.max_cached = 300;
    KvCase c = make_kv_case(s, rng);
    GpuKv g(c);
    std::uniform_int_distribution<int32_t> any(INT32_MIN, INT32_MAX);
    std::vector<int32_t> lens(c.seqlens.size()), table(c.block_table.size()), rows(c.batch_idx.size());
    for (auto& x : lens) x = trial % 2 ? any(rng) : static_cast<int32_t>(rng() % 100000) - 50000;
    for (auto& x : table) x = any(rng);
    for (auto& x : rows) x = any(rng);
    cudaMemcpy(g.seqlens.ptr, lens.data(), lens.size() * 4, cudaMemcpyHostToDevice);
    if (!table.empty()) cudaMemcpy(g.block_table.ptr, table.data(), table.size() * 4, cudaMemcpyHostToDevice);
    if (!rows.empty()) cudaMemcpy(g.batch_idx.ptr, rows.data(), rows.size() * 4, cudaMemcpyHostToDevice);
    ASSERT_EQ(flash_fwd_kvcache(&g.a), FLASH_OK) << flash_last_error_message();
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess) << "trial " << trial;
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  }
}

// flash_combine on the GPU against the one-shot reference: fp32 and 16-bit parts, 16-bit and fp32 outputs.
TEST(CombineGpu, AgainstOneShotReference) {
  REQUIRE_GPU();
  std::mt19937_64 rng(base_seed() ^ 0x7200c);
  for (int trial = 0; trial < 12; ++trial) {
    const int parts = trial == 11 ? 40 : 1 + int(rng() % 6);
    const int32_t part_dt = trial % 3 == 0 ? FLASH_DTYPE_BF16 : FLASH_DTYPE_FP32;
    const int32_t out_dt = trial % 4 == 1 ? FLASH_DTYPE_FP32 : trial % 2 ? FLASH_DTYPE_FP16 : FLASH_DTYPE_BF16;
    CombineCase c = make_combine_case(rng, parts, part_dt, FLASH_DTYPE_BF16, out_dt, trial % 2 == 0);
    std::vector<Dev> od, ld;
    std::vector<flash_tensor> odesc = c.od, ldesc = c.ld;
    for (int p = 0; p < parts; ++p) {
      od.emplace_back(c.o_parts[p].bytes);
      ld.emplace_back(c.lse_parts[p].bytes);
      odesc[p].data = od.back().ptr, odesc[p].device_type = FLASH_DEVICE_CUDA;
      ldesc[p].data = ld.back().ptr, ldesc[p].device_type = FLASH_DEVICE_CUDA;
    }
    Dev o(c.o.bytes.size()), lse(c.lse.bytes.size());
    cudaMemset(o.ptr, 0xFF, o.bytes), cudaMemset(lse.ptr, 0xFF, lse.bytes);
    flash_combine_args a;
    flash_combine_args_init(&a);
    a.num_parts = parts, a.o_parts = odesc.data(), a.lse_parts = ldesc.data();
    a.o = c.o.desc, a.o.data = o.ptr, a.o.device_type = FLASH_DEVICE_CUDA;
    a.lse = c.lse.desc, a.lse.data = lse.ptr, a.lse.device_type = FLASH_DEVICE_CUDA;
    ASSERT_EQ(flash_combine(&a), FLASH_OK) << flash_last_error_message();
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    o.download(&c.o.bytes), lse.download(&c.lse.bytes);
    // Bound: the parts are exact results rounded once to part_dtype; the merge adds fp32 rounding. 2 x the naive
    // same-dtype error of the inputs' dtype + one rounding of the output dtype + one of the parts' dtype.
    const double ulp_out = out_dt == FLASH_DTYPE_FP32 ? std::ldexp(1.0, -24) : out_dt == FLASH_DTYPE_FP16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
    const double ulp_part = part_dt == FLASH_DTYPE_FP32 ? std::ldexp(1.0, -24) : std::ldexp(1.0, -8);
    double err = 0, naive = 0, lse_err = 0, max_ref = 0, max_lse = 1;
    bool finite = true;
    for (int64_t x = 0; x < c.o.elements(); ++x) {
      const double got = c.o.get(x);
      finite &= std::isfinite(got);
      err = std::max(err, std::fabs(got - c.full_exact.o[x]));
      naive = std::max(naive, std::fabs(c.full_naive.o[x] - c.full_exact.o[x]));
      max_ref = std::max(max_ref, std::fabs(c.full_exact.o[x]));
    }
    for (int64_t x = 0; x < c.lse.elements(); ++x) {
      const double got = reinterpret_cast<const float*>(c.lse.bytes.data())[x], ref = c.full_exact.lse[x];
      if (ref == -INFINITY) {
        finite &= got == -INFINITY;
        continue;
      }
      lse_err = std::max(lse_err, std::fabs(got - ref));
      max_lse = std::max(max_lse, std::fabs(ref));
    }
    EXPECT_TRUE(finite) << "trial " << trial;
    EXPECT_LE(err, 2 * naive + 2 * (ulp_out + ulp_part) * max_ref) << "trial " << trial << " parts " << parts;
    // The parts' LSE are fp32 roundings of the exact ones; the merge adds a few fp32 roundings.
    EXPECT_LE(lse_err, 8 * std::ldexp(1.0, -23) * max_lse) << "trial " << trial;
  }
}

#endif  // FLASH_TEST_WITH_CUDA
