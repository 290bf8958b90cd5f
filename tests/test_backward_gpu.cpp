// tests/test_backward_gpu.cpp -- flash_bwd on CUDA: every CUDA algorithm that has a backward against the fp64
// reference gradients (label: gpu). The forward that produces O and LSE runs on the host (algorithm cpu),
// so a backward is checked on its own. Bound as the CPU backward tests: 2 x (naive same-dtype error + the
// input sensitivity to the given O and LSE) + half an ulp of max |ref|; rows that see no key and keys no
// query sees must be exactly 0. Deterministic mode: bitwise identical over 3 runs. Skips without a GPU. Packed
// variable-length batches at the end (--gtest_filter='*Varlen*').
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "support/cases.hpp"
#include "support/harness.hpp"
#include "support/harness_bwd.hpp"

#ifdef FLASH_TEST_WITH_CUDA
#include <cuda_runtime.h>
#endif

using namespace flash_test;
using namespace flash_test::bwd;

namespace {

bool usable(int32_t algorithm, std::string* why) {
  if (!cuda_available()) return *why = "no CUDA device", false;
  flash_device_info info;
  flash_device_info_init(&info);
  if (flash_get_device_info(FLASH_DEVICE_CUDA, 0, &info) != FLASH_OK) return *why = flash_last_error_message(), false;
  if (!(info.algorithms & (1u << algorithm)))
    return *why = std::string("algorithm ") + flash_algorithm_name(algorithm) + " not available on " + info.name, false;
  return true;
}

constexpr int32_t kGpuAlgorithms[] = {FLASH_ALGO_SM80, FLASH_ALGO_SM90, FLASH_ALGO_NAIVE};

// Runs the backward of bc on CUDA device 0: copies inputs over, poisons the gradients (NaN) on the
// device, copies them back. Returns the status of flash_bwd (or FLASH_ERROR_CUDA).
int32_t run_bwd_cuda(BwdCase& bc, int32_t algorithm, uint32_t flags = 0, int32_t* used = nullptr) {
#ifdef FLASH_TEST_WITH_CUDA
  cudaSetDevice(0);
  std::vector<void*> buffers;
  auto upload = [&](const HostTensor& t, flash_tensor* d, bool poison) {
    void* ptr = nullptr;
    const size_t bytes = std::max<size_t>(t.bytes.size(), 16);
    if (cudaMalloc(&ptr, bytes) != cudaSuccess) return;
    buffers.push_back(ptr);
    if (poison) cudaMemset(ptr, 0xFF, bytes);
    else cudaMemcpy(ptr, t.bytes.data(), t.bytes.size(), cudaMemcpyHostToDevice);
    *d = t.desc;
    d->data = ptr;
    d->device_type = FLASH_DEVICE_CUDA;
    d->device_id = 0;
  };
  flash_bwd_args args;
  fill_bwd_args(bc, &args, algorithm, flags);
  Case& c = bc.c;
  upload(c.q, &args.q, false);
  upload(c.k, &args.k, false);
  upload(c.v, &args.v, false);
  upload(c.o, &args.o, false);
  upload(c.lse, &args.lse, false);
  upload(bc.d_o, &args.d_o, false);
  upload(bc.dq, &args.dq, true);
  upload(bc.dk, &args.dk, true);
  upload(bc.dv, &args.dv, true);
  flash_block_mask dm = c.block_mask;
  if (c.has_block_mask) {
    void *nb = nullptr, *idx = nullptr;
    cudaMalloc(&nb, std::max<size_t>(c.kv_num_blocks.size() * 4, 4));
    cudaMalloc(&idx, std::max<size_t>(c.kv_indices.size() * 4, 4));
    buffers.push_back(nb), buffers.push_back(idx);
    cudaMemcpy(nb, c.kv_num_blocks.data(), c.kv_num_blocks.size() * 4, cudaMemcpyHostToDevice);
    if (!c.kv_indices.empty()) cudaMemcpy(idx, c.kv_indices.data(), c.kv_indices.size() * 4, cudaMemcpyHostToDevice);
    dm.kv_num_blocks = static_cast<const int32_t*>(nb);
    dm.kv_indices = static_cast<const int32_t*>(idx);
    args.block_mask = &dm;
  }
  // The uploads above ran on the legacy default stream: a pageable cudaMemcpy may return before its last DMA lands
  // and cudaMemset is asynchronous, and a non-blocking stream does not wait for either. Without this the call
  // can read a partly copied input (seen on the H200 under load: the backward's D = rowsum(dO o O) from a dO
  // whose last rows had not arrived, so dq and dk were wrong and dv right).
  cudaDeviceSynchronize();
  cudaStream_t stream;
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  args.stream = stream;
  const int32_t s = flash_bwd(&args);
  if (used) *used = args.algorithm_used;
  const cudaError_t e = cudaStreamSynchronize(stream);
  cudaStreamDestroy(stream);
  int32_t result = e != cudaSuccess ? FLASH_ERROR_CUDA : s;
  if (result == FLASH_OK) {
    cudaMemcpy(bc.dq.bytes.data(), args.dq.data, bc.dq.bytes.size(), cudaMemcpyDeviceToHost);
    cudaMemcpy(bc.dk.bytes.data(), args.dk.data, bc.dk.bytes.size(), cudaMemcpyDeviceToHost);
    cudaMemcpy(bc.dv.bytes.data(), args.dv.data, bc.dv.bytes.size(), cudaMemcpyDeviceToHost);
  }
  for (void* p : buffers) cudaFree(p);
  return result;
#else
  (void)bc, (void)algorithm, (void)flags, (void)used;
  return FLASH_ERROR_NO_CUDA_DEVICE;
#endif
}

// Skips (returns false after GTEST_SKIP) when the algorithm is not usable or has no backward.
#define REQUIRE_GPU_BACKWARD(algo)                                                                       \
  do {                                                                                                   \
    std::string why_;                                                                                    \
    if (!usable((algo), &why_)) GTEST_SKIP() << why_;                                                    \
    if (!has_backward(algo)) GTEST_SKIP() << flash_algorithm_name(algo) << " has no backward pass";     \
  } while (0)

bool has_backward(int32_t algorithm) {
  std::mt19937_64 rng(1);
  CaseSpec s;
  s.batch = 1, s.seqlen_q = 16, s.seqlen_k = 16, s.head_dim = 64, s.dtype = FLASH_DTYPE_BF16;
  BwdCase bc;
  if (make_bwd_case(s, rng, &bc) != FLASH_OK) return false;
  const int32_t st = run_bwd_cuda(bc, algorithm);
  return !(st == FLASH_ERROR_UNSUPPORTED && std::string(flash_last_error_message()).find("no backward") != std::string::npos);
}

// Runs spec through `algorithm`'s backward on the GPU and checks against the references.
void expect_gpu_bwd_ok(const CaseSpec& spec, int32_t algorithm, uint64_t salt = 0, uint32_t flags = 0) {
  std::mt19937_64 rng(base_seed() ^ (0x6b4c3 + salt));
  BwdCase bc;
  ASSERT_EQ(make_bwd_case(spec, rng, &bc), FLASH_OK) << flash_last_error_message();
  int32_t used = -1;
  const int32_t s = run_bwd_cuda(bc, algorithm, flags, &used);
  if (s == FLASH_ERROR_UNSUPPORTED && spec.mask.block_m > 0 &&
      std::string(flash_last_error_message()).find("block") != std::string::npos)
    return;  // an algorithm without block-sparse support says so
  ASSERT_EQ(s, FLASH_OK) << flash_status_string(s) << ": " << flash_last_error_message() << "\n  case: " << spec.describe();
  EXPECT_EQ(used, algorithm);
  const References r = references(bc);
  const std::string problems = check_bwd(bc, r);
  EXPECT_TRUE(problems.empty()) << flash_algorithm_name(algorithm) << ": " << problems << "\n  case: " << spec.describe()
                                << "\n  LIBFLASH_TEST_SEED=" << base_seed();
}

CaseSpec base(int64_t sq, int64_t sk, int64_t d, int32_t dtype) {
  CaseSpec s;
  s.batch = 2, s.heads_q = 4, s.heads_kv = 2, s.seqlen_q = sq, s.seqlen_k = sk, s.head_dim = d, s.dtype = dtype;
  return s;
}

std::string algo_name(const ::testing::TestParamInfo<int32_t>& info) { return flash_algorithm_name(info.param); }

}  // namespace

// ---- Randomized sweep: GQA, windows/causal, block-sparse, odd lengths, head dims 8..256, fp16/bf16 ------

class GpuBackwardSweep : public ::testing::TestWithParam<std::tuple<int32_t, int>> {};

TEST_P(GpuBackwardSweep, MatchesReference) {
  const auto [algorithm, index] = GetParam();
  REQUIRE_GPU_BACKWARD(algorithm);
  std::mt19937_64 rng(base_seed() + 15485863u * static_cast<uint64_t>(index + 1));
  CaseSpec spec = random_spec(rng, /*gpu=*/true, /*with_masks=*/true);
  cap_size(spec);
  if (rng() % 4 == 0) add_block_mask(spec, rng);
  expect_gpu_bwd_ok(spec, algorithm, static_cast<uint64_t>(index));
}

INSTANTIATE_TEST_SUITE_P(Random, GpuBackwardSweep,
                         ::testing::Combine(::testing::ValuesIn(kGpuAlgorithms), ::testing::Range(0, 40)),
                         [](const auto& info) {
                           return std::string(flash_algorithm_name(std::get<0>(info.param))) + "_" +
                                  std::to_string(std::get<1>(info.param));
                         });

// ---- Edge cases --------------------------------------------------------------------------------------------

class GpuBackward : public ::testing::TestWithParam<int32_t> {};

TEST_P(GpuBackward, EveryHeadDim) {
  REQUIRE_GPU_BACKWARD(GetParam());
  for (int64_t d = 8; d <= 256; d += 8) {
    CaseSpec s = base(77, 130, d, d % 16 ? FLASH_DTYPE_FP16 : FLASH_DTYPE_BF16);
    s.batch = 1;
    expect_gpu_bwd_ok(s, GetParam(), static_cast<uint64_t>(d));
  }
}

TEST_P(GpuBackward, EmptyRowsUnseenKeysAndAlignments) {
  REQUIRE_GPU_BACKWARD(GetParam());
  for (int align : {FLASH_ALIGN_BOTTOM_RIGHT, FLASH_ALIGN_TOP_LEFT}) {
    CaseSpec s = base(333, 100, 64, FLASH_DTYPE_FP16);  // bottom-right: the first rows see no key
    s.mask.causal = 1, s.mask.alignment = align;
    expect_gpu_bwd_ok(s, GetParam(), 1);
    CaseSpec t = base(100, 333, 128, FLASH_DTYPE_BF16);  // top-left: the last keys are seen by no query
    t.mask.causal = 1, t.mask.alignment = align;
    expect_gpu_bwd_ok(t, GetParam(), 2);
  }
}

TEST_P(GpuBackward, SlidingWindows) {
  REQUIRE_GPU_BACKWARD(GetParam());
  const int windows[][2] = {{0, 0}, {16, 0}, {-1, 5}, {100, 100}, {3, -1}, {256, 0}};
  for (const auto& w : windows) {
    CaseSpec s = base(700, 555, 64, FLASH_DTYPE_BF16);
    s.batch = 1;
    s.mask.window_left = w[0], s.mask.window_right = w[1];
    expect_gpu_bwd_ok(s, GetParam(), static_cast<uint64_t>(w[0] * 7 + w[1]));
  }
}

TEST_P(GpuBackward, GqaAndMqa) {
  REQUIRE_GPU_BACKWARD(GetParam());
  CaseSpec s = base(300, 257, 128, FLASH_DTYPE_BF16);
  s.batch = 1, s.heads_q = 8, s.heads_kv = 1;
  expect_gpu_bwd_ok(s, GetParam(), 3);
  s.heads_kv = 2, s.mask.causal = 1;
  expect_gpu_bwd_ok(s, GetParam(), 4);
}

TEST_P(GpuBackward, LargeMagnitudeNoNaN) {
  REQUIRE_GPU_BACKWARD(GetParam());
  for (int causal : {0, 1}) {
    CaseSpec s = base(200, 300, 64, FLASH_DTYPE_BF16);
    s.batch = 1, s.magnitude = 10.0, s.mask.causal = causal;
    expect_gpu_bwd_ok(s, GetParam(), 5 + causal);
  }
}

TEST_P(GpuBackward, StridedLayoutsAndHeadDim256) {
  REQUIRE_GPU_BACKWARD(GetParam());
  for (Layout layout : {Layout::PaddedRows, Layout::HeadMajor}) {
    CaseSpec s = base(190, 177, 256, FLASH_DTYPE_FP16);
    s.batch = 1, s.layout = layout;
    expect_gpu_bwd_ok(s, GetParam(), 7);
  }
}

TEST_P(GpuBackward, BlockSparse) {
  REQUIRE_GPU_BACKWARD(GetParam());
  for (int pattern = 0; pattern < 3; ++pattern) {
    std::mt19937_64 rng(base_seed() + pattern);
    CaseSpec s = base(600, 700, 128, FLASH_DTYPE_BF16);
    s.batch = 1;
    add_block_mask(s, rng, pattern);
    expect_gpu_bwd_ok(s, GetParam(), 8 + pattern);
    s.mask.causal = 1;
    expect_gpu_bwd_ok(s, GetParam(), 11 + pattern);
  }
}

TEST_P(GpuBackward, DeterministicBitwiseAcrossRuns) {
  REQUIRE_GPU_BACKWARD(GetParam());
  for (int variant = 0; variant < 4; ++variant) {
    std::mt19937_64 rng(base_seed() ^ (0xde7 + variant));
    CaseSpec s = base(1000, 1100, variant == 1 ? 64 : 128, FLASH_DTYPE_BF16);
    s.batch = 1, s.heads_q = 8;  // GQA group of 4
    if (variant == 1) s.mask.causal = 1;
    if (variant == 2) s.mask.window_left = 200, s.mask.window_right = 50;
    if (variant == 3) add_block_mask(s, rng);
    BwdCase bc;
    ASSERT_EQ(make_bwd_case(s, rng, &bc), FLASH_OK);
    std::vector<unsigned char> first[3];
    for (int run = 0; run < 3; ++run) {
      const int32_t st = run_bwd_cuda(bc, GetParam(), FLASH_FLAG_DETERMINISTIC);
      if (st == FLASH_ERROR_UNSUPPORTED && variant == 3) break;
      ASSERT_EQ(st, FLASH_OK) << flash_last_error_message();
      const HostTensor* out[3] = {&bc.dq, &bc.dk, &bc.dv};
      for (int t = 0; t < 3; ++t) {
        if (run == 0) first[t] = out[t]->bytes;
        else EXPECT_TRUE(first[t] == out[t]->bytes) << "variant " << variant << ": d" << "qkv"[t] << " differs in run " << run;
      }
      if (run == 0) {
        const std::string problems = check_bwd(bc, references(bc));
        EXPECT_TRUE(problems.empty()) << "deterministic mode, variant " << variant << ": " << problems;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Algorithms, GpuBackward, ::testing::ValuesIn(kGpuAlgorithms), algo_name);

// ---- Packed variable-length batches (flash.h 1.3; issue 72) ----------------------------------------------------------
// The cases of support/cases.hpp (varlen_test) on device memory, offsets included: O and LSE from the cpu forward,
// each sequence's gradients against the fp64 reference (bound as above), gradients poisoned before the call and checked
// untouched outside the sequences' rows, dk = dv = 0 past seqused_k and for keys no query sees. Algorithms sm80 (on
// sm_90 its plan runs the wgmma main kernel at d64/d128), sm90 (the record of the sm90 forward; the same kernels),
// naive and AUTO (sm90 on sm_90).
namespace {

namespace vt = varlen_test;
const int32_t kVarlenAlgorithms[] = {FLASH_ALGO_SM80, FLASH_ALGO_SM90, FLASH_ALGO_NAIVE, FLASH_ALGO_AUTO};
std::string varlen_algo_name(int32_t a) { return a == FLASH_ALGO_AUTO ? "auto" : flash_algorithm_name(a); }

#define REQUIRE_VARLEN_BACKWARD(algo) REQUIRE_GPU_BACKWARD((algo) == FLASH_ALGO_AUTO ? FLASH_ALGO_SM80 : (algo))

void expect_varlen_bwd_ok(const vt::VSpec& s, int32_t algorithm, uint64_t salt, uint32_t flags = 0) {
  std::mt19937_64 rng(base_seed() ^ (0x7b3d + salt));
  vt::VCase c;
  ASSERT_EQ(vt::make_bwd_vcase(s, rng, &c), FLASH_OK) << flash_last_error_message() << "\n  case: " << s.describe();
  int32_t used = -1;
  const int32_t st = vt::run_bwd_cuda(c, algorithm, flags, &used);
  ASSERT_EQ(st, FLASH_OK) << flash_status_string(st) << ": " << flash_last_error_message() << "\n  case: " << s.describe();
  // AUTO: the sm90 backward family on sm_90 (it takes varlen like dense calls), sm80 elsewhere.
  std::string why;
  const int32_t auto_algo = usable(FLASH_ALGO_SM90, &why) ? FLASH_ALGO_SM90 : FLASH_ALGO_SM80;
  EXPECT_EQ(used, algorithm == FLASH_ALGO_AUTO ? auto_algo : algorithm);
  const std::string problems = vt::check_bwd(c, vt::packed_references(c));
  EXPECT_TRUE(problems.empty()) << varlen_algo_name(algorithm) << ": " << problems << "\n  case: " << s.describe()
                                << "\n  LIBFLASH_TEST_SEED=" << base_seed();
}

vt::VSpec varlen_fixed(std::vector<int64_t> lq, std::vector<int64_t> lk, int32_t dtype, int64_t d = 64) {
  vt::VSpec s;
  s.lq = std::move(lq), s.lk = std::move(lk), s.dtype = dtype;
  s.hq = 4, s.hkv = 2, s.d = d;
  return s;
}

}  // namespace

class VarlenGpuBackwardSweep : public ::testing::TestWithParam<std::tuple<int32_t, int>> {};

TEST_P(VarlenGpuBackwardSweep, MatchesReferencePerSequence) {
  const auto [algorithm, index] = GetParam();
  REQUIRE_VARLEN_BACKWARD(algorithm);
  std::mt19937_64 rng(base_seed() + 7727u * static_cast<uint64_t>(index + 1) + 31u * static_cast<uint64_t>(algorithm));
  vt::VSpec s = vt::random_vspec(rng, index % 4 == 3 ? 700 : 260, /*gpu=*/true);
  vt::cap_vspec(s, 30'000'000);  // the fp64 references' cost
  expect_varlen_bwd_ok(s, algorithm, static_cast<uint64_t>(index), index % 3 == 2 ? FLASH_FLAG_DETERMINISTIC : 0);
}

INSTANTIATE_TEST_SUITE_P(Random, VarlenGpuBackwardSweep,
                         ::testing::Combine(::testing::ValuesIn(kVarlenAlgorithms), ::testing::Range(0, 24)),
                         [](const auto& info) {
                           return varlen_algo_name(std::get<0>(info.param)) + "_" + std::to_string(std::get<1>(info.param));
                         });

class VarlenGpuBackward : public ::testing::TestWithParam<int32_t> {};

TEST_P(VarlenGpuBackward, ZeroOneAndOddLengths) {
  REQUIRE_VARLEN_BACKWARD(GetParam());
  // Queries without keys (dq = 0), keys without queries (dk = dv = 0), empty sequences anywhere, single rows.
  vt::VSpec s = varlen_fixed({0, 5, 0, 1, 7, 129, 0, 63}, {4, 0, 6, 1, 1, 9, 0, 65}, FLASH_DTYPE_BF16);
  expect_varlen_bwd_ok(s, GetParam(), 1);
  s.mask.causal = 1;
  expect_varlen_bwd_ok(s, GetParam(), 2, FLASH_FLAG_DETERMINISTIC);
  expect_varlen_bwd_ok(varlen_fixed({0, 0}, {0, 3}, FLASH_DTYPE_FP16), GetParam(), 3);
}

TEST_P(VarlenGpuBackward, CausalBothAlignmentsPerSequence) {
  REQUIRE_VARLEN_BACKWARD(GetParam());
  for (int align : {FLASH_ALIGN_BOTTOM_RIGHT, FLASH_ALIGN_TOP_LEFT})
    for (int64_t d : {64, 128}) {
      vt::VSpec s = varlen_fixed({70, 3, 300, 129, 1}, {20, 65, 257, 128, 200}, d == 64 ? FLASH_DTYPE_FP16 : FLASH_DTYPE_BF16, d);
      s.mask.causal = 1, s.mask.alignment = align, s.max_slack = 11;
      expect_varlen_bwd_ok(s, GetParam(), 10 + align + d);
    }
}

TEST_P(VarlenGpuBackward, SlidingWindowsPerSequence) {
  REQUIRE_VARLEN_BACKWARD(GetParam());
  const int windows[][2] = {{0, 0}, {16, 0}, {-1, 5}, {3, -1}, {100, 40}};
  for (const auto& w : windows)
    for (int align : {FLASH_ALIGN_BOTTOM_RIGHT, FLASH_ALIGN_TOP_LEFT}) {
      vt::VSpec s = varlen_fixed({190, 17, 1, 330}, {300, 17, 33, 70}, FLASH_DTYPE_FP16);
      s.mask.window_left = w[0], s.mask.window_right = w[1], s.mask.alignment = align;
      expect_varlen_bwd_ok(s, GetParam(), 20 + w[0] + 7 * align);
    }
}

TEST_P(VarlenGpuBackward, GqaMqaAndEveryHeadDim) {
  REQUIRE_VARLEN_BACKWARD(GetParam());
  for (int64_t d : {8, 40, 64, 96, 128, 200, 256}) {
    vt::VSpec s = varlen_fixed({33, 150, 5, 0}, {47, 12, 190, 9}, d % 3 ? FLASH_DTYPE_BF16 : FLASH_DTYPE_FP16, d);
    s.hq = 8, s.hkv = d % 3 ? 2 : 1;
    s.mask.causal = d % 5 == 0;
    expect_varlen_bwd_ok(s, GetParam(), 30 + d);
  }
}

TEST_P(VarlenGpuBackward, StridedAndHeadMajorLayouts) {
  REQUIRE_VARLEN_BACKWARD(GetParam());
  for (int layout : {1, 2})
    for (int64_t d : {64, 256}) {
      vt::VSpec s = varlen_fixed({40, 0, 177}, {63, 9, 165}, FLASH_DTYPE_FP16, d);
      s.layout = layout;
      s.extra_q = 3, s.extra_k = 5;  // rows after the last sequence: never written
      expect_varlen_bwd_ok(s, GetParam(), 40 + layout + d);
    }
}

TEST_P(VarlenGpuBackward, SequsedKZeroesTheUnusedSlotRows) {
  REQUIRE_VARLEN_BACKWARD(GetParam());
  vt::VSpec s = varlen_fixed({20, 131, 8, 5, 0}, {150, 131, 64, 10, 30}, FLASH_DTYPE_BF16);
  s.used = {13, 131, 0, 10, 7};
  expect_varlen_bwd_ok(s, GetParam(), 50);
  s.mask.causal = 1, s.max_slack = 200, s.d = 128;
  expect_varlen_bwd_ok(s, GetParam(), 51, FLASH_FLAG_DETERMINISTIC);
}

// Deterministic mode: bitwise identical over two runs (fresh poisoned outputs each time), and correct.
TEST_P(VarlenGpuBackward, DeterministicBitwiseAcrossRuns) {
  REQUIRE_VARLEN_BACKWARD(GetParam());
  for (int variant = 0; variant < 3; ++variant) {
    std::mt19937_64 rng(base_seed() ^ (0xd7e + variant));
    vt::VSpec s = varlen_fixed({600, 0, 257, 1, 900, 37}, {700, 20, 129, 5, 1000, 0}, FLASH_DTYPE_BF16,
                               variant == 1 ? 64 : 128);
    s.hq = 8, s.hkv = 2;  // GQA group of 4
    if (variant == 1) s.mask.causal = 1;
    if (variant == 2) s.mask.window_left = 200, s.mask.window_right = 50, s.used = {650, 20, 100, 5, 1000, 0};
    vt::VCase c;
    ASSERT_EQ(vt::make_bwd_vcase(s, rng, &c), FLASH_OK) << flash_last_error_message();
    std::vector<unsigned char> first[3];
    for (int run = 0; run < 2; ++run) {
      ASSERT_EQ(vt::run_bwd_cuda(c, GetParam(), FLASH_FLAG_DETERMINISTIC), FLASH_OK) << flash_last_error_message();
      const HostTensor* out[3] = {&c.dq, &c.dk, &c.dv};
      for (int t = 0; t < 3; ++t) {
        if (run == 0) first[t] = out[t]->bytes;
        else EXPECT_TRUE(first[t] == out[t]->bytes) << "variant " << variant << ": d" << "qkv"[t] << " differs in run " << run;
      }
      if (run == 0) {
        const std::string problems = vt::check_bwd(c, vt::packed_references(c));
        EXPECT_TRUE(problems.empty()) << "deterministic mode, variant " << variant << ": " << problems;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Algorithms, VarlenGpuBackward, ::testing::ValuesIn(kVarlenAlgorithms),
                         [](const auto& info) { return varlen_algo_name(info.param); });

// With sm80's deterministic backward each sequence's gradients are bit for bit the dense call's of batch 1 on its rows
// (the same kernels and key-block order; only the addressing and the workspace rows differ).
TEST(VarlenGpuBackwardDense, Sm80DeterministicEachSequenceIsBitwiseTheDenseCall) {
  REQUIRE_GPU_BACKWARD(FLASH_ALGO_SM80);
  for (int64_t d : {64, 128, 256}) {
    std::mt19937_64 rng(base_seed() ^ (0xbd5 + d));
    vt::VSpec s = varlen_fixed({70, 0, 300, 1, 129}, {65, 8, 400, 0, 40}, FLASH_DTYPE_BF16, d);
    s.used = {60, 8, 333, 0, 21};
    s.mask.causal = 1, s.layout = 1;
    vt::VCase c;
    ASSERT_EQ(vt::make_bwd_vcase(s, rng, &c), FLASH_OK) << flash_last_error_message();
    ASSERT_EQ(vt::run_bwd_cuda(c, FLASH_ALGO_SM80, FLASH_FLAG_DETERMINISTIC), FLASH_OK) << flash_last_error_message();
    vt::DeviceVCase dev;
    const flash_tensor q = dev.mirror(c.q), k = dev.mirror(c.k), v = dev.mirror(c.v), o = dev.mirror(c.o),
                       d_o = dev.mirror(c.d_o), lse = dev.mirror(c.lse);
    for (int64_t i = 0; i < s.batch(); ++i) {
      const int64_t sq = s.lq[i], sk = s.keys(i);
      if (sq == 0 || sk == 0) continue;  // (a dense call has positive lengths)
      SCOPED_TRACE("d " + std::to_string(d) + " sequence " + std::to_string(i));
      const int64_t qshape[4] = {1, sq, s.hq, s.d}, kshape[4] = {1, sk, s.hkv, s.d};
      const size_t qbytes = size_t(sq * s.hq * s.d) * 2, kbytes = size_t(sk * s.hkv * s.d) * 2;
      const std::vector<unsigned char> poison(std::max(qbytes, kbytes), 0xFF);
      flash_bwd_args b;
      flash_bwd_args_init(&b);
      b.q = vt::view4(q, c.cu_q[i], sq), b.o = vt::view4(o, c.cu_q[i], sq), b.d_o = vt::view4(d_o, c.cu_q[i], sq);
      b.k = vt::view4(k, c.cu_k[i], sk), b.v = vt::view4(v, c.cu_k[i], sk);
      // The LSE [hq, total_q] as [1, hq, sq] at the sequence's first row.
      b.lse = lse;
      b.lse.ndim = 3;
      b.lse.data = static_cast<char*>(lse.data) + c.cu_q[i] * lse.strides[1] * 4;
      b.lse.shape[0] = 1, b.lse.shape[1] = s.hq, b.lse.shape[2] = sq;
      b.lse.strides[0] = 0, b.lse.strides[1] = lse.strides[0], b.lse.strides[2] = lse.strides[1];
      b.dq = flash_tensor_contiguous(dev.put(poison.data(), qbytes), s.dtype, FLASH_DEVICE_CUDA, 0, 4, qshape);
      b.dk = flash_tensor_contiguous(dev.put(poison.data(), kbytes), s.dtype, FLASH_DEVICE_CUDA, 0, 4, kshape);
      b.dv = flash_tensor_contiguous(dev.put(poison.data(), kbytes), s.dtype, FLASH_DEVICE_CUDA, 0, 4, kshape);
      b.causal = 1;
      b.algorithm = FLASH_ALGO_SM80;
      b.flags = FLASH_FLAG_DETERMINISTIC;
      ASSERT_TRUE(dev.ok);
      ASSERT_EQ(flash_bwd(&b), FLASH_OK) << flash_last_error_message();
      std::vector<unsigned char> dq(qbytes), dk(kbytes), dv(kbytes);
      ASSERT_TRUE(cuda_download(dq.data(), b.dq.data, qbytes) && cuda_download(dk.data(), b.dk.data, kbytes) &&
                  cuda_download(dv.data(), b.dv.data, kbytes));
      for (int64_t r = 0; r < sq; ++r)
        for (int64_t h = 0; h < s.hq; ++h)
          ASSERT_EQ(0, std::memcmp(&dq[size_t((r * s.hq + h) * s.d) * 2],
                                   &c.dq.bytes[size_t(vt::off3(c.dq.desc, c.cu_q[i] + r, h, 0)) * 2], size_t(s.d) * 2))
              << "dq row " << r << " head " << h;
      for (int64_t r = 0; r < sk; ++r)
        for (int64_t h = 0; h < s.hkv; ++h) {
          ASSERT_EQ(0, std::memcmp(&dk[size_t((r * s.hkv + h) * s.d) * 2],
                                   &c.dk.bytes[size_t(vt::off3(c.dk.desc, c.cu_k[i] + r, h, 0)) * 2], size_t(s.d) * 2))
              << "dk row " << r << " head " << h;
          ASSERT_EQ(0, std::memcmp(&dv[size_t((r * s.hkv + h) * s.d) * 2],
                                   &c.dv.bytes[size_t(vt::off3(c.dv.desc, c.cu_k[i] + r, h, 0)) * 2], size_t(s.d) * 2))
              << "dv row " << r << " head " << h;
        }
    }
  }
}
