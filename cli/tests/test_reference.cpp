// The fp64 reference is what --check trusts, so it must fail when the output is wrong: a library output
// computed with one mask, checked against another mask, or with one element perturbed, must not pass.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "bench.hpp"
#include "mask.hpp"

namespace fabench {
namespace {

struct Problem {
  Case c{"cpu", "fwd", FLASH_DTYPE_FP32, 1, 2, 2, 70, 90, 32, MaskSpec{}};
  std::vector<float> q, k, v, o, d_o, dq, dk, dv, lse;
  void run(const MaskSpec& m, bool backward) {
    c.mask = m;
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> u(-1, 1);
    const size_t nq = size_t(c.batch * c.seqlen_q * c.heads_q * c.head_dim), nk = size_t(c.batch * c.seqlen_k * c.heads_kv * c.head_dim);
    for (auto* t : {&q, &o, &d_o, &dq}) t->resize(nq);
    for (auto* t : {&k, &v, &dk, &dv}) t->resize(nk);
    lse.resize(size_t(c.batch * c.heads_q * c.seqlen_q));
    for (auto* t : {&q, &k, &v, &d_o})
      for (float& x : *t) x = u(rng);
    const int64_t qs[4] = {c.batch, c.seqlen_q, c.heads_q, c.head_dim}, ks[4] = {c.batch, c.seqlen_k, c.heads_kv, c.head_dim};
    const int64_t ls[3] = {c.batch, c.heads_q, c.seqlen_q};
    flash_fwd_args a;
    flash_fwd_args_init(&a);
    a.q = flash_tensor_contiguous(q.data(), FLASH_DTYPE_FP32, FLASH_DEVICE_CPU, 0, 4, qs);
    a.k = flash_tensor_contiguous(k.data(), FLASH_DTYPE_FP32, FLASH_DEVICE_CPU, 0, 4, ks);
    a.v = flash_tensor_contiguous(v.data(), FLASH_DTYPE_FP32, FLASH_DEVICE_CPU, 0, 4, ks);
    a.o = flash_tensor_contiguous(o.data(), FLASH_DTYPE_FP32, FLASH_DEVICE_CPU, 0, 4, qs);
    a.lse = flash_tensor_contiguous(lse.data(), FLASH_DTYPE_FP32, FLASH_DEVICE_CPU, 0, 3, ls);
    a.causal = m.causal, a.causal_alignment = m.alignment, a.window_left = m.window_left, a.window_right = m.window_right;
    a.algorithm = FLASH_ALGO_CPU;
    ASSERT_EQ(flash_fwd(&a), FLASH_OK) << flash_last_error_message();
    if (!backward) return;
    flash_bwd_args b;
    flash_bwd_args_init(&b);
    b.q = a.q, b.k = a.k, b.v = a.v, b.o = a.o, b.lse = a.lse;
    b.d_o = flash_tensor_contiguous(d_o.data(), FLASH_DTYPE_FP32, FLASH_DEVICE_CPU, 0, 4, qs);
    b.dq = flash_tensor_contiguous(dq.data(), FLASH_DTYPE_FP32, FLASH_DEVICE_CPU, 0, 4, qs);
    b.dk = flash_tensor_contiguous(dk.data(), FLASH_DTYPE_FP32, FLASH_DEVICE_CPU, 0, 4, ks);
    b.dv = flash_tensor_contiguous(dv.data(), FLASH_DTYPE_FP32, FLASH_DEVICE_CPU, 0, 4, ks);
    b.causal = a.causal, b.causal_alignment = a.causal_alignment, b.window_left = a.window_left, b.window_right = a.window_right;
    b.algorithm = FLASH_ALGO_CPU;
    ASSERT_EQ(flash_bwd(&b), FLASH_OK) << flash_last_error_message();
  }
  CheckResult check(const std::string& spec) {
    const MaskSpec m = parse_mask_spec(spec);
    Case cc = c;
    cc.mask = m;
    return check_against_reference(cc, MaskModel(m, c.seqlen_q, c.seqlen_k, nullptr), q.data(), k.data(), v.data(), o.data(), 1);
  }
  GradCheckResult grad_check() {
    return check_backward_against_reference(c, MaskModel(c.mask, c.seqlen_q, c.seqlen_k, nullptr), q.data(), k.data(),
                                            v.data(), d_o.data(), dq.data(), dk.data(), dv.data(), 1);
  }
};

TEST(Reference, AgreesWithTheLibraryAndCatchesTheWrongMask) {
  Problem p;
  p.run(parse_mask_spec("causal"), false);
  EXPECT_TRUE(p.check("causal").passed);
  EXPECT_LT(p.check("causal").max_rel_error, 1e-5);
  EXPECT_FALSE(p.check("none").passed);
  EXPECT_FALSE(p.check("causal-tl").passed);  // sq != sk: the alignment matters
  p.run(parse_mask_spec("window-tl:7,3"), false);
  EXPECT_TRUE(p.check("window-tl:7,3").passed);
  EXPECT_FALSE(p.check("window-tl:7,4").passed);
}

TEST(Reference, CatchesOneWrongElement) {
  Problem p;
  p.run(parse_mask_spec("none"), false);
  p.o[123] += 0.01f;
  EXPECT_FALSE(p.check("none").passed);
  p.o[123] = std::numeric_limits<float>::quiet_NaN();  // an unwritten (poisoned) output
  EXPECT_FALSE(p.check("none").passed);
}

TEST(Reference, GradientsAgreeWithTheLibraryAndCatchErrors) {
  if (flash_version_number() < 10100) GTEST_SKIP() << "no flash_bwd";
  Problem p;
  p.run(parse_mask_spec("causal"), true);
  GradCheckResult g = p.grad_check();
  EXPECT_TRUE(g.passed);
  EXPECT_LT(g.dq_rel_error, 1e-5);
  EXPECT_LT(g.dk_rel_error, 1e-5);
  EXPECT_LT(g.dv_rel_error, 1e-5);
  p.dk[77] += 0.05f;
  EXPECT_FALSE(p.grad_check().passed);
  p.dk[77] -= 0.05f;
  p.dv[5] *= 1.5f;
  EXPECT_FALSE(p.grad_check().passed);
}

}  // namespace
}  // namespace fabench
