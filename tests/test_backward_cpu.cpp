// tests/test_backward_cpu.cpp -- flash_bwd on the host (cpu = FlashAttention's backward, naive =
// materialised) against the fp64 reference gradients (tests/support/reference_bwd.hpp): a randomized
// sweep, edge cases, finite-difference checks of the reference and of the fp32 cpu path, determinism
// across thread counts, and every validation path of the new entry point.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "support/harness.hpp"
#include "support/harness_bwd.hpp"
#include "support/reference_bwd.hpp"

using namespace flash_test;
using namespace flash_test::bwd;

namespace {

int32_t run_bwd(BwdCase& bc, int32_t algorithm, uint32_t flags = 0, int32_t* used = nullptr) {
  for (HostTensor* t : {&bc.dq, &bc.dk, &bc.dv}) std::fill(t->bytes.begin(), t->bytes.end(), 0xFF);
  flash_bwd_args args;
  fill_bwd_args(bc, &args, algorithm, flags);
  const int32_t s = flash_bwd(&args);
  if (used) *used = args.algorithm_used;
  return s;
}

// Runs spec through every given algorithm's backward and checks each against one shared reference.
void expect_bwd_ok(const CaseSpec& spec, std::vector<int32_t> algorithms = {FLASH_ALGO_CPU, FLASH_ALGO_NAIVE},
                   uint64_t salt = 0, int32_t fwd_algorithm = FLASH_ALGO_CPU) {
  std::mt19937_64 rng(base_seed() ^ (0xb4c3 + salt));
  BwdCase bc;
  ASSERT_EQ(make_bwd_case(spec, rng, &bc, fwd_algorithm), FLASH_OK) << flash_last_error_message();
  const References r = references(bc);
  for (int32_t algo : algorithms) {
    int32_t used = -1;
    const int32_t s = run_bwd(bc, algo, 0, &used);
    ASSERT_EQ(s, FLASH_OK) << flash_status_string(s) << ": " << flash_last_error_message() << "\n  case: " << spec.describe();
    EXPECT_EQ(used, algo);
    const std::string problems = check_bwd(bc, r);
    EXPECT_TRUE(problems.empty()) << flash_algorithm_name(algo) << ": " << problems << "\n  case: " << spec.describe()
                                  << "\n  LIBFLASH_TEST_SEED=" << base_seed();
  }
}

CaseSpec base(int64_t sq, int64_t sk, int64_t d, int32_t dtype) {
  CaseSpec s;
  s.batch = 2, s.heads_q = 4, s.heads_kv = 2, s.seqlen_q = sq, s.seqlen_k = sk, s.head_dim = d, s.dtype = dtype;
  return s;
}

}  // namespace

// ---- Randomized sweep ---------------------------------------------------------------------------------

class CpuBackwardSweep : public ::testing::TestWithParam<int> {};

TEST_P(CpuBackwardSweep, MatchesReference) {
  const int index = GetParam();
  std::mt19937_64 rng(base_seed() + 15485863u * static_cast<uint64_t>(index + 1));
  CaseSpec spec = random_spec(rng, /*gpu=*/false, /*with_masks=*/true);
  cap_size(spec);
  if (rng() % 4 == 0) add_block_mask(spec, rng);
  expect_bwd_ok(spec, {FLASH_ALGO_CPU, FLASH_ALGO_NAIVE}, static_cast<uint64_t>(index));
}

INSTANTIATE_TEST_SUITE_P(Random, CpuBackwardSweep, ::testing::Range(0, 32));

// ---- Edge cases -----------------------------------------------------------------------------------------

TEST(CpuBackward, EveryHeadDimAndDtype) {
  for (int32_t dt : {FLASH_DTYPE_FP32, FLASH_DTYPE_FP16, FLASH_DTYPE_BF16})
    for (int64_t d = 8; d <= 256; d += 8) {
      CaseSpec s = base(37, 70, d, dt);
      s.batch = 1;
      expect_bwd_ok(s, {FLASH_ALGO_CPU}, static_cast<uint64_t>(d + dt));
    }
}

TEST(CpuBackward, EmptyRowsAndUnseenKeysGiveExactZeros) {
  // Bottom-right causal with seqlen_q > seqlen_k: the first sq - sk rows see no key (LSE = -inf).
  CaseSpec s = base(150, 40, 64, FLASH_DTYPE_FP16);
  s.mask.causal = 1;
  expect_bwd_ok(s);
  // Top-left causal with seqlen_k > seqlen_q: the last keys are seen by no query.
  CaseSpec t = base(40, 150, 32, FLASH_DTYPE_BF16);
  t.mask.causal = 1;
  t.mask.alignment = FLASH_ALIGN_TOP_LEFT;
  expect_bwd_ok(t);
}

TEST(CpuBackward, CausalBothAlignments) {
  for (int align : {FLASH_ALIGN_TOP_LEFT, FLASH_ALIGN_BOTTOM_RIGHT}) {
    CaseSpec s = base(130, 200, 32, FLASH_DTYPE_FP32);
    s.mask.causal = 1;
    s.mask.alignment = align;
    expect_bwd_ok(s);
  }
}

TEST(CpuBackward, SlidingWindows) {
  const int windows[][2] = {{0, 0}, {16, 0}, {-1, 5}, {100, 100}, {3, -1}, {0, -1}};
  for (const auto& w : windows) {
    CaseSpec s = base(300, 257, 32, FLASH_DTYPE_BF16);
    s.batch = 1;
    s.mask.window_left = w[0];
    s.mask.window_right = w[1];
    expect_bwd_ok(s);
  }
}

TEST(CpuBackward, MultiQueryAttention) {
  CaseSpec s = base(100, 130, 64, FLASH_DTYPE_BF16);
  s.heads_q = 8, s.heads_kv = 1;
  expect_bwd_ok(s);
}

TEST(CpuBackward, BlockSparseDenseEmptyAndRandom) {
  for (int pattern = 0; pattern < 3; ++pattern) {
    std::mt19937_64 rng(base_seed() + pattern);
    CaseSpec s = base(300, 333, 32, FLASH_DTYPE_FP16);
    s.batch = 1;
    add_block_mask(s, rng, pattern);
    expect_bwd_ok(s);
    s.mask.causal = 1;  // composes with causal: the intersection
    expect_bwd_ok(s);
  }
}

TEST(CpuBackward, LargeMagnitudeNoNaN) {
  // |x| up to ~30 in bf16: scores of order 10^4; P is recomputed from LSE, never overflows.
  CaseSpec s = base(200, 300, 64, FLASH_DTYPE_BF16);
  s.batch = 1;
  s.magnitude = 10.0;
  expect_bwd_ok(s);
  s.mask.causal = 1;
  expect_bwd_ok(s);
}

TEST(CpuBackward, SingleKeyAndSingleQuery) {
  expect_bwd_ok(base(1, 1, 8, FLASH_DTYPE_FP32));
  expect_bwd_ok(base(1, 300, 256, FLASH_DTYPE_FP16));
  expect_bwd_ok(base(300, 1, 40, FLASH_DTYPE_BF16));
}

TEST(CpuBackward, AfterTheNaiveForward) {
  // O and LSE from the materialised forward (S scaled after the dot, a different LSE summation).
  for (int causal : {0, 1}) {
    CaseSpec s = base(130, 97, 64, FLASH_DTYPE_FP32);
    s.mask.causal = causal;
    expect_bwd_ok(s, {FLASH_ALGO_CPU, FLASH_ALGO_NAIVE}, 0, FLASH_ALGO_NAIVE);
    s.dtype = FLASH_DTYPE_BF16;
    expect_bwd_ok(s, {FLASH_ALGO_CPU, FLASH_ALGO_NAIVE}, 1, FLASH_ALGO_NAIVE);
  }
}

TEST(CpuBackward, StridedLayouts) {
  for (Layout layout : {Layout::PaddedRows, Layout::HeadMajor}) {
    CaseSpec s = base(90, 77, 48, FLASH_DTYPE_BF16);
    s.layout = layout;
    expect_bwd_ok(s);
  }
}

// ---- Finite differences ------------------------------------------------------------------------------
// Loss L = sum(O o G). Central differences of L in double against (1) the fp64 reference backward and
// (2) the library's fp32 cpu backward. Tiny shapes: every input element is perturbed.

namespace {

struct FdProblem {
  flash_ref::Problem pr;
  flash_ref::Dense q, k, v, g;
};

FdProblem fd_problem(int mask_kind, std::mt19937_64& rng) {
  FdProblem f;
  CaseSpec s;
  s.batch = 2, s.seqlen_q = 5, s.seqlen_k = 7, s.heads_q = 4, s.heads_kv = 2, s.head_dim = 8;
  s.softmax_scale = 0.7f;
  if (mask_kind == 1) s.mask.causal = 1;
  if (mask_kind == 2) s.mask.window_left = 2, s.mask.window_right = 1, s.mask.alignment = FLASH_ALIGN_TOP_LEFT;
  if (mask_kind == 3) s.seqlen_q = 9, s.mask.causal = 1;  // bottom-right: two rows see no key
  f.pr = problem(s);
  std::normal_distribution<double> dist(0.0, 1.0);
  // Values exactly representable in fp32, so the library sees the same inputs.
  auto fill = [&](flash_ref::Dense& t) { for (double& x : t.x) x = static_cast<float>(dist(rng)); };
  f.q = flash_ref::Dense(s.batch, s.seqlen_q, s.heads_q, s.head_dim);
  f.k = flash_ref::Dense(s.batch, s.seqlen_k, s.heads_kv, s.head_dim);
  f.v = flash_ref::Dense(s.batch, s.seqlen_k, s.heads_kv, s.head_dim);
  f.g = flash_ref::Dense(s.batch, s.seqlen_q, s.heads_q, s.head_dim);
  fill(f.q), fill(f.k), fill(f.v), fill(f.g);
  return f;
}

double loss(const FdProblem& f, const flash_ref::Dense& q, const flash_ref::Dense& k, const flash_ref::Dense& v) {
  const flash_ref::Dense o = flash_ref::forward_exact(f.pr, q, k, v);
  double l = 0;
  for (size_t i = 0; i < o.x.size(); ++i) l += o.x[i] * f.g.x[i];
  return l;
}

// dL/dx for every element of q, k, v (which = 0, 1, 2) by central differences.
flash_ref::Dense fd_gradient(const FdProblem& f, int which) {
  FdProblem w = f;
  flash_ref::Dense& x = which == 0 ? w.q : which == 1 ? w.k : w.v;
  flash_ref::Dense grad = x;
  const double h = 1e-5;
  for (size_t i = 0; i < x.x.size(); ++i) {
    const double keep = x.x[i];
    x.x[i] = keep + h;
    const double up = loss(w, w.q, w.k, w.v);
    x.x[i] = keep - h;
    const double down = loss(w, w.q, w.k, w.v);
    x.x[i] = keep;
    grad.x[i] = (up - down) / (2 * h);
  }
  return grad;
}

HostTensor fp32_tensor(const flash_ref::Dense& t) {
  HostTensor r;
  r.bytes.resize(t.x.size() * 4);
  for (size_t i = 0; i < t.x.size(); ++i) reinterpret_cast<float*>(r.bytes.data())[i] = static_cast<float>(t.x[i]);
  const int64_t shape[4] = {t.b, t.s, t.h, t.d};
  r.desc = flash_tensor_contiguous(r.bytes.data(), FLASH_DTYPE_FP32, FLASH_DEVICE_CPU, 0, 4, shape);
  return r;
}

double max_abs_diff(const flash_ref::Dense& a, const flash_ref::Dense& b, double* max_b) {
  double m = 0;
  *max_b = 0;
  for (size_t i = 0; i < a.x.size(); ++i) m = std::max(m, std::fabs(a.x[i] - b.x[i])), *max_b = std::max(*max_b, std::fabs(b.x[i]));
  return m;
}

}  // namespace

TEST(CpuBackwardFiniteDifference, ReferenceMatchesCentralDifferences) {
  for (int mask_kind = 0; mask_kind < 4; ++mask_kind) {
    std::mt19937_64 rng(base_seed() + 31 * mask_kind);
    const FdProblem f = fd_problem(mask_kind, rng);
    const flash_ref::Grads g = flash_ref::attention_backward(f.pr, f.q, f.k, f.v, f.g, FLASH_DTYPE_FP32, 0);
    const flash_ref::Dense* analytic[3] = {&g.dq, &g.dk, &g.dv};
    for (int which = 0; which < 3; ++which) {
      double scale = 0;
      const double err = max_abs_diff(fd_gradient(f, which), *analytic[which], &scale);
      // Central differences with h = 1e-5: truncation ~h^2, cancellation ~1e-16 / h.
      EXPECT_LT(err, 1e-8 * std::max(1.0, scale)) << "mask kind " << mask_kind << ", d" << "qkv"[which];
    }
  }
}

TEST(CpuBackwardFiniteDifference, Fp32CpuBackwardMatchesCentralDifferences) {
  for (int mask_kind = 0; mask_kind < 4; ++mask_kind) {
    std::mt19937_64 rng(base_seed() + 77 * mask_kind);
    const FdProblem f = fd_problem(mask_kind, rng);
    HostTensor q = fp32_tensor(f.q), k = fp32_tensor(f.k), v = fp32_tensor(f.v), g = fp32_tensor(f.g);
    HostTensor o = fp32_tensor(f.g), dq = fp32_tensor(f.q), dk = fp32_tensor(f.k), dv = fp32_tensor(f.v);
    std::vector<float> lse(f.pr.batch * f.pr.heads_q * f.pr.seqlen_q);
    const int64_t lshape[3] = {f.pr.batch, f.pr.heads_q, f.pr.seqlen_q};
    flash_fwd_args fa;
    flash_fwd_args_init(&fa);
    fa.q = q.desc, fa.k = k.desc, fa.v = v.desc, fa.o = o.desc;
    fa.lse = flash_tensor_contiguous(lse.data(), FLASH_DTYPE_FP32, FLASH_DEVICE_CPU, 0, 3, lshape);
    fa.softmax_scale = static_cast<float>(f.pr.scale);
    fa.causal = f.pr.mask.causal, fa.causal_alignment = f.pr.mask.alignment;
    fa.window_left = f.pr.mask.window_left, fa.window_right = f.pr.mask.window_right;
    fa.algorithm = FLASH_ALGO_CPU;
    ASSERT_EQ(flash_fwd(&fa), FLASH_OK) << flash_last_error_message();
    flash_bwd_args ba;
    flash_bwd_args_init(&ba);
    ba.q = q.desc, ba.k = k.desc, ba.v = v.desc, ba.o = o.desc, ba.d_o = g.desc, ba.lse = fa.lse;
    ba.dq = dq.desc, ba.dk = dk.desc, ba.dv = dv.desc;
    ba.softmax_scale = fa.softmax_scale, ba.causal = fa.causal, ba.causal_alignment = fa.causal_alignment;
    ba.window_left = fa.window_left, ba.window_right = fa.window_right;
    ba.algorithm = FLASH_ALGO_CPU;
    ASSERT_EQ(flash_bwd(&ba), FLASH_OK) << flash_last_error_message();
    const HostTensor* got[3] = {&dq, &dk, &dv};
    for (int which = 0; which < 3; ++which) {
      const flash_ref::Dense fd = fd_gradient(f, which);
      const flash_ref::Dense lib = flash_ref::to_dense(got[which]->desc);
      double scale = 0;
      const double err = max_abs_diff(lib, fd, &scale);
      // fp32 arithmetic over sums of <= 7 * 2 terms of O(1): a few fp32 ulps of the largest gradient.
      EXPECT_LT(err, 2e-5 * std::max(1.0, scale)) << "mask kind " << mask_kind << ", d" << "qkv"[which];
    }
  }
}

// ---- Determinism -----------------------------------------------------------------------------------------

TEST(CpuBackward, DeterministicAcrossThreadCounts) {
  const char* old = std::getenv("LIBFLASH_NUM_THREADS");
  const std::string saved = old ? old : "";
  for (int32_t algo : {FLASH_ALGO_CPU, FLASH_ALGO_NAIVE}) {
    std::mt19937_64 rng(base_seed() ^ 0xde7);
    CaseSpec s = base(300, 333, 64, FLASH_DTYPE_BF16);
    s.heads_q = 8;  // GQA group of 4: dK, dV sums and the dQ reduction across key blocks both exercised
    s.mask.causal = 1;
    BwdCase bc;
    ASSERT_EQ(make_bwd_case(s, rng, &bc), FLASH_OK);
    std::vector<unsigned char> first[3];
    const char* threads[] = {"1", "3", "8"};
    for (int run = 0; run < 3; ++run) {
      setenv("LIBFLASH_NUM_THREADS", threads[run], 1);
      ASSERT_EQ(run_bwd(bc, algo, FLASH_FLAG_DETERMINISTIC), FLASH_OK) << flash_last_error_message();
      const HostTensor* out[3] = {&bc.dq, &bc.dk, &bc.dv};
      for (int t = 0; t < 3; ++t) {
        if (run == 0) first[t] = out[t]->bytes;
        else EXPECT_TRUE(first[t] == out[t]->bytes)
            << flash_algorithm_name(algo) << ": d" << "qkv"[t] << " differs with LIBFLASH_NUM_THREADS=" << threads[run];
      }
    }
  }
  if (old) setenv("LIBFLASH_NUM_THREADS", saved.c_str(), 1);
  else unsetenv("LIBFLASH_NUM_THREADS");
}

// ---- ABI: defaults, struct size, AUTO, workspace ---------------------------------------------------------

TEST(BackwardAbi, InitDefaultsAndStructSize) {
  flash_bwd_args a;
  std::memset(&a, 0x5a, sizeof(a));
  ASSERT_EQ(flash_bwd_args_init(&a), FLASH_OK);
  EXPECT_EQ(a.struct_size, sizeof(a));
  EXPECT_EQ(a.window_left, -1);
  EXPECT_EQ(a.window_right, -1);
  EXPECT_EQ(a.algorithm, FLASH_ALGO_AUTO);
  EXPECT_EQ(a.algorithm_used, -1);
  EXPECT_EQ(a.causal_alignment, FLASH_ALIGN_BOTTOM_RIGHT);
  EXPECT_EQ(a.softmax_scale, 0.0f);
  EXPECT_EQ(a.flags, 0u);
  EXPECT_EQ(a.block_mask, nullptr);
  EXPECT_EQ(a.d_o.data, nullptr);
  flash_bwd_args* no_args = nullptr;  // a typed NULL: flash_bwd_args_init may be a sizeof-passing macro
  EXPECT_EQ(flash_bwd_args_init(no_args), FLASH_ERROR_NULL_POINTER);
  EXPECT_EQ(flash_struct_size(FLASH_STRUCT_BWD_ARGS), sizeof(flash_bwd_args));
  EXPECT_GE(flash_version_minor(), 1u);
}

TEST(BackwardAbi, AutoPicksCpuAndWorkspaceIsHonoured) {
  std::mt19937_64 rng(base_seed());
  CaseSpec s = base(70, 90, 32, FLASH_DTYPE_FP32);
  BwdCase bc;
  ASSERT_EQ(make_bwd_case(s, rng, &bc), FLASH_OK);
  int32_t used = -1;
  ASSERT_EQ(run_bwd(bc, FLASH_ALGO_AUTO, 0, &used), FLASH_OK) << flash_last_error_message();
  EXPECT_EQ(used, FLASH_ALGO_CPU);
  const std::vector<unsigned char> dq = bc.dq.bytes;

  for (int32_t algo : {FLASH_ALGO_CPU, FLASH_ALGO_NAIVE}) {
    flash_bwd_args args;
    fill_bwd_args(bc, &args, algo);
    size_t bytes = 0;
    ASSERT_EQ(flash_bwd_workspace_size(&args, &bytes), FLASH_OK) << flash_last_error_message();
    EXPECT_GT(bytes, 0u);
    if (algo == FLASH_ALGO_CPU) {
      // The documented O(N) bound: fp32 dQ accumulator + D + one int32 turn counter per (b, hkv, q block).
      const size_t b = 2, hq = 4, hkv = 2, sq = 70, d = 32, q_blocks = 2;
      EXPECT_EQ(bytes, 4 * (b * hq * sq * (d + 1) + b * hkv * q_blocks));
    }
    std::vector<unsigned char> ws(bytes, 0xFF);  // dirty: the backward must initialise what it uses
    args.workspace = ws.data();
    args.workspace_size = bytes - 1;
    EXPECT_EQ(flash_bwd(&args), FLASH_ERROR_WORKSPACE_TOO_SMALL);
    EXPECT_NE(std::string(flash_last_error_message()).find("flash_bwd_workspace_size"), std::string::npos)
        << flash_last_error_message();
    args.workspace_size = bytes;
    for (int run = 0; run < 2; ++run) {  // the same workspace, reused
      std::fill(bc.dq.bytes.begin(), bc.dq.bytes.end(), 0xFF);
      ASSERT_EQ(flash_bwd(&args), FLASH_OK) << flash_last_error_message();
      EXPECT_EQ(args.algorithm_used, algo);
      if (algo == FLASH_ALGO_CPU) EXPECT_EQ(dq, bc.dq.bytes);
    }
  }
}

// ---- Validation of flash_bwd -------------------------------------------------------------------------------

namespace {

struct BwdFixture {
  std::vector<float> q, k, v, o, d_o, lse, dq, dk, dv;
  flash_bwd_args args;
  BwdFixture(int64_t b = 2, int64_t sq = 10, int64_t sk = 12, int64_t hq = 4, int64_t hkv = 2, int64_t d = 64) {
    q.assign(b * sq * hq * d, 0.5f);
    k.assign(b * sk * hkv * d, 0.25f);
    v.assign(b * sk * hkv * d, 1.0f);
    o.assign(b * sq * hq * d, 1.0f);
    d_o.assign(b * sq * hq * d, 0.125f);
    lse.assign(b * hq * sq, 2.0f);
    dq.assign(q.size(), NAN);
    dk.assign(k.size(), NAN);
    dv.assign(v.size(), NAN);
    const int64_t qs[4] = {b, sq, hq, d}, ks[4] = {b, sk, hkv, d}, ls[3] = {b, hq, sq};
    flash_bwd_args_init(&args);
    auto t = [](std::vector<float>& x, int ndim, const int64_t* shape) {
      return flash_tensor_contiguous(x.data(), FLASH_DTYPE_FP32, FLASH_DEVICE_CPU, 0, ndim, shape);
    };
    args.q = t(q, 4, qs), args.k = t(k, 4, ks), args.v = t(v, 4, ks), args.o = t(o, 4, qs), args.d_o = t(d_o, 4, qs);
    args.lse = t(lse, 3, ls);
    args.dq = t(dq, 4, qs), args.dk = t(dk, 4, ks), args.dv = t(dv, 4, ks);
  }
  bool untouched() const {
    for (const auto* x : {&dq, &dk, &dv})
      for (float f : *x)
        if (!std::isnan(f)) return false;
    return true;
  }
};

void expect_bwd_error(BwdFixture& f, int32_t status, const std::string& needle) {
  const int32_t s = flash_bwd(&f.args);
  EXPECT_EQ(s, status) << flash_status_string(s) << ": " << flash_last_error_message();
  EXPECT_NE(std::string(flash_last_error_message()).find(needle), std::string::npos)
      << "message was: " << flash_last_error_message() << " (wanted: " << needle << ")";
  EXPECT_TRUE(f.untouched()) << "a failed call wrote its outputs";
  size_t bytes = 123;
  EXPECT_EQ(flash_bwd_workspace_size(&f.args, &bytes), status);
  EXPECT_EQ(bytes, 0u);
}

flash_tensor* field(BwdFixture& f, const std::string& name) {
  if (name == "q") return &f.args.q;
  if (name == "k") return &f.args.k;
  if (name == "v") return &f.args.v;
  if (name == "o") return &f.args.o;
  if (name == "d_o") return &f.args.d_o;
  if (name == "lse") return &f.args.lse;
  if (name == "dq") return &f.args.dq;
  if (name == "dk") return &f.args.dk;
  return &f.args.dv;
}

}  // namespace

TEST(BackwardValidation, ValidCallSucceeds) {
  BwdFixture f;
  ASSERT_EQ(flash_bwd(&f.args), FLASH_OK) << flash_last_error_message();
  EXPECT_EQ(f.args.algorithm_used, FLASH_ALGO_CPU);
  EXPECT_FALSE(f.untouched());
}

TEST(BackwardValidation, NullArgsAndStructSize) {
  EXPECT_EQ(flash_bwd(nullptr), FLASH_ERROR_NULL_POINTER);
  EXPECT_NE(std::string(flash_last_error_message()).find("args is NULL"), std::string::npos);
  size_t n;
  EXPECT_EQ(flash_bwd_workspace_size(nullptr, &n), FLASH_ERROR_NULL_POINTER);
  BwdFixture g;
  EXPECT_EQ(flash_bwd_workspace_size(&g.args, nullptr), FLASH_ERROR_NULL_POINTER);
  BwdFixture f;
  f.args.struct_size = 16;
  expect_bwd_error(f, FLASH_ERROR_STRUCT_SIZE, "struct_size is 16");
}

TEST(BackwardValidation, NullDataPointersIncludingLse) {
  for (const char* name : {"q", "k", "v", "o", "d_o", "lse", "dq", "dk", "dv"}) {
    BwdFixture f;
    field(f, name)->data = nullptr;
    expect_bwd_error(f, FLASH_ERROR_NULL_POINTER, std::string(name) + ".data is NULL");
  }
}

TEST(BackwardValidation, MismatchedShapes) {
  {
    BwdFixture f;
    f.args.d_o.shape[1] = 9;
    expect_bwd_error(f, FLASH_ERROR_BAD_SHAPE, "d_o.shape[1] is 9 but q.shape[1] is 10");
  }
  {
    BwdFixture f;
    f.args.dq.shape[2] = 2;
    expect_bwd_error(f, FLASH_ERROR_BAD_SHAPE, "dq.shape[2] is 2 but q.shape[2] is 4");
  }
  {
    BwdFixture f;  // GQA: dk is [b, sk, hkv, d], not [b, sk, hq, d]
    f.args.dk.shape[2] = 4;
    expect_bwd_error(f, FLASH_ERROR_BAD_SHAPE, "dk.shape[2] is 4 but k.shape[2] is 2");
  }
  {
    BwdFixture f;
    f.args.dv.shape[1] = 13;
    expect_bwd_error(f, FLASH_ERROR_BAD_SHAPE, "dv.shape[1] is 13 but k.shape[1] is 12");
  }
  {
    BwdFixture f;
    f.args.lse.shape[2] = 9;
    expect_bwd_error(f, FLASH_ERROR_BAD_SHAPE, "lse.shape[2] is 9 but q.shape[1] is 10");
  }
  {
    BwdFixture f(1, 5, 5, 1, 1, 12);
    expect_bwd_error(f, FLASH_ERROR_UNSUPPORTED_HEAD_DIM, "head_dim (q.shape[3]) is 12");
  }
}

TEST(BackwardValidation, MismatchedDtypesAndDevices) {
  {
    BwdFixture f;
    f.args.dk.dtype = FLASH_DTYPE_BF16;
    expect_bwd_error(f, FLASH_ERROR_DTYPE_MISMATCH, "dk.dtype is bf16 but q.dtype is fp32");
  }
  {
    BwdFixture f;
    f.args.d_o.dtype = FLASH_DTYPE_FP16;
    expect_bwd_error(f, FLASH_ERROR_DTYPE_MISMATCH, "d_o.dtype is fp16 but q.dtype is fp32");
  }
  {
    BwdFixture f;
    f.args.lse.dtype = FLASH_DTYPE_BF16;
    expect_bwd_error(f, FLASH_ERROR_DTYPE_MISMATCH, "lse.dtype is bf16 but must be fp32");
  }
  {
    BwdFixture f;
    f.args.dq.device_type = FLASH_DEVICE_CUDA;
    expect_bwd_error(f, FLASH_ERROR_DEVICE_MISMATCH, "dq is on cuda:0 but q is on cpu");
  }
}

TEST(BackwardValidation, StridesAndOverlaps) {
  {
    BwdFixture f;
    f.args.dv.strides[3] = 2;
    expect_bwd_error(f, FLASH_ERROR_BAD_STRIDE, "dv.strides[3] is 2 but the last dimension must be contiguous");
  }
  {
    BwdFixture f;  // rows of dq aliasing each other
    f.args.dq.strides[1] = 0;
    expect_bwd_error(f, FLASH_ERROR_BAD_STRIDE, "dq.strides[1] is 0");
  }
  {
    BwdFixture f;  // a gradient over an input
    f.args.dq.data = f.d_o.data();
    expect_bwd_error(f, FLASH_ERROR_INVALID_ARGUMENT, "dq overlaps d_o");
  }
  {
    BwdFixture f;
    f.args.dk.data = f.k.data();
    expect_bwd_error(f, FLASH_ERROR_INVALID_ARGUMENT, "dk overlaps k");
  }
  {
    BwdFixture f;  // two gradients sharing memory
    f.args.dv.data = f.dk.data();
    expect_bwd_error(f, FLASH_ERROR_INVALID_ARGUMENT, "dv overlaps dk");
  }
  {
    BwdFixture f;  // a gradient over the LSE (the LSE placed inside dk: dk's span is larger than lse's,
                   // so pointing dk at lse's buffer could also reach a neighbouring allocation)
    f.args.lse.data = f.dk.data();
    expect_bwd_error(f, FLASH_ERROR_INVALID_ARGUMENT, "dk overlaps lse");
  }
}

TEST(BackwardValidation, Options) {
  {
    BwdFixture f;
    f.args.causal = 2;
    expect_bwd_error(f, FLASH_ERROR_INVALID_ARGUMENT, "causal is 2");
  }
  {
    BwdFixture f;
    f.args.window_left = -2;
    expect_bwd_error(f, FLASH_ERROR_BAD_MASK, "window_left is -2");
  }
  {
    BwdFixture f;
    f.args.softmax_scale = INFINITY;
    expect_bwd_error(f, FLASH_ERROR_INVALID_ARGUMENT, "softmax_scale is not finite");
  }
  {
    BwdFixture f;
    f.args.flags = 6;
    expect_bwd_error(f, FLASH_ERROR_INVALID_ARGUMENT, "flags has unknown bits");
  }
  {
    BwdFixture f;
    f.args.algorithm = 99;
    expect_bwd_error(f, FLASH_ERROR_INVALID_ARGUMENT, "algorithm is 99");
  }
  {
    BwdFixture f;  // a GPU algorithm on host tensors
    f.args.algorithm = FLASH_ALGO_SM80;
    const int32_t s = flash_bwd(&f.args);
    EXPECT_EQ(s, FLASH_ERROR_ALGORITHM_UNAVAILABLE) << flash_last_error_message();
    EXPECT_TRUE(f.untouched());
  }
  {
    BwdFixture f;  // block mask: the same checks as the forward
    flash_block_mask m;
    flash_block_mask_init(&m);
    m.block_m = 96;
    f.args.block_mask = &m;
    expect_bwd_error(f, FLASH_ERROR_BAD_MASK, "block_mask block size is 96");
  }
}
