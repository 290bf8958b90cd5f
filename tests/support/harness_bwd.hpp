// tests/support/harness_bwd.hpp -- backward-test helpers shared by the GPU backward tests: a backward case
// (a forward case whose O and LSE come from the cpu forward, plus dO and poisoned gradients), the fp64 and
// naive same-dtype references (reference_bwd.hpp), and the element-wise gradient check with its bound (2 x (naive same-dtype error + input sensitivity) + half an ulp of max |ref|).
// Header-only; used by the CPU and the GPU backward tests.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "support/harness.hpp"
#include "support/reference_bwd.hpp"

namespace flash_test::bwd {

// ---- A backward case: a forward case (its O and LSE from flash_fwd, algorithm cpu), dO, gradients ---
struct BwdCase {
  Case c;
  HostTensor d_o, dq, dk, dv;
};

// A tensor with t's shape and strides, poisoned (0xFF bytes: NaN in every dtype).
inline HostTensor like(const HostTensor& t) {
  HostTensor r;
  r.bytes.assign(t.bytes.size(), 0xFF);
  r.desc = t.desc;
  r.desc.data = r.bytes.data();
  return r;
}

inline void fill_normal(HostTensor& t, std::mt19937_64& rng) {
  std::normal_distribution<double> dist(0.0, 1.0);
  const flash_tensor& d = t.desc;
  for (int64_t a = 0; a < d.shape[0]; ++a)
    for (int64_t b = 0; b < d.shape[1]; ++b)
      for (int64_t c = 0; c < d.shape[2]; ++c)
        for (int64_t e = 0; e < d.shape[3]; ++e) {
          const int64_t off = flash_ref::offset4(d, a, b, c, e);
          const double x = dist(rng);
          if (d.dtype == FLASH_DTYPE_FP32) reinterpret_cast<float*>(t.bytes.data())[off] = static_cast<float>(x);
          else if (d.dtype == FLASH_DTYPE_FP16) reinterpret_cast<uint16_t*>(t.bytes.data())[off] = flash_ref::fp16_round(x);
          else reinterpret_cast<uint16_t*>(t.bytes.data())[off] = flash_ref::bf16_round(x);
        }
}

// Builds the case and runs the forward that the backward consumes. Returns the forward's status.
inline int32_t make_bwd_case(CaseSpec spec, std::mt19937_64& rng, BwdCase* bc, int32_t fwd_algorithm = FLASH_ALGO_CPU) {
  spec.want_lse = true;  // the backward needs it
  bc->c = make_case(spec, rng);
  const int32_t s = run_cpu(bc->c, fwd_algorithm);
  bc->d_o = like(bc->c.o);
  fill_normal(bc->d_o, rng);
  bc->dq = like(bc->c.q);
  bc->dk = like(bc->c.k);
  bc->dv = like(bc->c.v);
  return s;
}

inline void fill_bwd_args(BwdCase& bc, flash_bwd_args* args, int32_t algorithm, uint32_t flags = 0) {
  flash_bwd_args_init(args);
  const Case& c = bc.c;
  args->q = c.q.desc;
  args->k = c.k.desc;
  args->v = c.v.desc;
  args->o = c.o.desc;
  args->d_o = bc.d_o.desc;
  args->lse = c.lse.desc;
  args->dq = bc.dq.desc;
  args->dk = bc.dk.desc;
  args->dv = bc.dv.desc;
  args->softmax_scale = c.spec.softmax_scale;
  args->causal = c.spec.mask.causal;
  args->causal_alignment = c.spec.mask.alignment;
  args->window_left = c.spec.mask.window_left;
  args->window_right = c.spec.mask.window_right;
  args->algorithm = algorithm;
  args->flags = flags;
  if (c.has_block_mask) args->block_mask = &bc.c.block_mask;
}

inline flash_ref::Problem problem(const CaseSpec& s) {
  return {s.batch, s.seqlen_q, s.seqlen_k, s.heads_q, s.heads_kv, s.head_dim,
          s.softmax_scale != 0.0f ? static_cast<double>(s.softmax_scale) : 1.0 / std::sqrt(double(s.head_dim)), s.mask};
}

struct References {
  flash_ref::Grads exact, naive;
};

inline References references(const BwdCase& bc) {
  const CaseSpec& s = bc.c.spec;
  const flash_ref::Problem pr = problem(s);
  const flash_ref::Dense q = flash_ref::to_dense(bc.c.q.desc), k = flash_ref::to_dense(bc.c.k.desc),
                         v = flash_ref::to_dense(bc.c.v.desc), d_o = flash_ref::to_dense(bc.d_o.desc),
                         o = flash_ref::to_dense(bc.c.o.desc);
  std::vector<double> lse(s.batch * s.heads_q * s.seqlen_q);
  const flash_tensor& l = bc.c.lse.desc;
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.heads_q; ++h)
      for (int64_t i = 0; i < s.seqlen_q; ++i)
        lse[(b * s.heads_q + h) * s.seqlen_q + i] =
            static_cast<const float*>(l.data)[b * l.strides[0] + h * l.strides[1] + i * l.strides[2]];
  return {flash_ref::attention_backward(pr, q, k, v, d_o, s.dtype, 0, &o, &lse),
          flash_ref::attention_backward(pr, q, k, v, d_o, bc.c.spec.dtype, 1)};
}

// One gradient against the reference. Bound, element by element: `multiple` x (the naive same-dtype error
// plus the element's sensitivity to the O and LSE the backward was given, which no algorithm can undo:
// see reference_bwd.hpp) plus one rounding of the output (half an ulp of max |ref|). NaN/inf never pass;
// rows that must be zero (a query row that sees no key; a key no query sees) must be exactly 0.
struct GradCheck {
  bool ok = true;
  double err = 0, naive_err = 0, bound = 0;
  std::string message;
};

inline GradCheck check_grad(const char* name, const HostTensor& got_t, const flash_ref::Dense& exact, const flash_ref::Dense& naive,
                     const flash_ref::Dense& input_sensitivity, const std::vector<uint8_t>& must_be_zero, int32_t dtype,
                     double multiple) {
  GradCheck ch;
  std::ostringstream msg;
  double max_ref = 0, max_sens = 0;
  int bad = 0;
  for (int64_t a = 0; a < exact.b; ++a)
    for (int64_t s = 0; s < exact.s; ++s)
      for (int64_t h = 0; h < exact.h; ++h) {
        const bool zero_row = must_be_zero[(a * exact.s + s) * exact.h + h] != 0;
        for (int64_t e = 0; e < exact.d; ++e) {
          const double got = flash_ref::load(got_t.bytes.data(), dtype, flash_ref::offset4(got_t.desc, a, s, h, e));
          const double ref = exact.at(a, s, h, e);
          if (!std::isfinite(got) || (zero_row && got != 0.0)) {
            if (bad++ < 3) msg << name << "[" << a << "," << s << "," << h << "," << e << "] = " << got << " (ref " << ref << "); ";
            ch.ok = false;
            continue;
          }
          ch.naive_err = std::max(ch.naive_err, std::fabs(naive.at(a, s, h, e) - ref));
          max_ref = std::max(max_ref, std::fabs(ref));
        }
      }
  const double ulp = dtype == FLASH_DTYPE_FP32 ? std::ldexp(1.0, -24) : dtype == FLASH_DTYPE_FP16 ? std::ldexp(1.0, -11)
                                                                                                : std::ldexp(1.0, -8);
  const double base_bound = multiple * ch.naive_err + ulp * max_ref;
  // Second pass: the element-wise bound; report the worst element relative to its own bound.
  double worst = -1;
  for (int64_t a = 0; a < exact.b; ++a)
    for (int64_t s = 0; s < exact.s; ++s)
      for (int64_t h = 0; h < exact.h; ++h)
        for (int64_t e = 0; e < exact.d; ++e) {
          const double got = flash_ref::load(got_t.bytes.data(), dtype, flash_ref::offset4(got_t.desc, a, s, h, e));
          if (!std::isfinite(got)) continue;
          const double err = std::fabs(got - exact.at(a, s, h, e));
          const double sens = input_sensitivity.at(a, s, h, e);
          const double bound = base_bound + multiple * sens;
          max_sens = std::max(max_sens, sens);
          if (err - bound > worst) worst = err - bound, ch.err = err, ch.bound = bound;
        }
  ch.ok = ch.ok && worst <= 0;
  msg << name << ": worst element |err|=" << ch.err << " vs its bound " << ch.bound << " (naive same-dtype max "
      << ch.naive_err << ", max input sensitivity " << max_sens << ", max|ref| " << max_ref << ")";
  ch.message = msg.str();
  return ch;
}

// Checks dq, dk, dv of bc against the references; returns "" when all pass, else the messages.
inline std::string check_bwd(const BwdCase& bc, const References& r, double multiple = 2.0) {
  const int32_t dt = bc.c.spec.dtype;
  const GradCheck cq = check_grad("dq", bc.dq, r.exact.dq, r.naive.dq, r.exact.dq_in, r.exact.dq_empty, dt, multiple);
  const GradCheck ck = check_grad("dk", bc.dk, r.exact.dk, r.naive.dk, r.exact.dk_in, r.exact.dk_unseen, dt, multiple);
  const GradCheck cv = check_grad("dv", bc.dv, r.exact.dv, r.naive.dv, r.exact.dv_in, r.exact.dk_unseen, dt, multiple);
  if (cq.ok && ck.ok && cv.ok) return "";
  return cq.message + "\n  " + ck.message + "\n  " + cv.message;
}

// Random block mask over spec's shape: block sizes 64/128, broadcast or per batch/head, ~2/3 listed.
inline void add_block_mask(CaseSpec& s, std::mt19937_64& rng, int pattern = 2) {
  flash_ref::Mask& m = s.mask;
  m.block_m = rng() % 2 ? 64 : 128;
  m.block_n = rng() % 2 ? 64 : 128;
  m.n_qb = static_cast<int>((s.seqlen_q + m.block_m - 1) / m.block_m);
  m.n_kb = static_cast<int>((s.seqlen_k + m.block_n - 1) / m.block_n);
  m.mask_batch = rng() % 2 ? 1 : static_cast<int>(s.batch);
  m.mask_heads = rng() % 2 ? 1 : static_cast<int>(s.heads_q);
  m.listed.resize(size_t(m.mask_batch) * m.mask_heads * m.n_qb * m.n_kb);
  for (auto& x : m.listed) x = pattern == 0 ? 1 : pattern == 1 ? 0 : (rng() % 3 != 0);
}

// The backward reference costs ~10 x the forward's: cap b * hq * sq * sk * d lower than random_spec does.
inline void cap_size(CaseSpec& s, int64_t cap = 12'000'000) {
  while (s.batch * s.heads_q * s.seqlen_q * s.seqlen_k * s.head_dim > cap) {
    if (s.batch > 1) --s.batch;
    else if (s.heads_q > s.heads_kv) s.heads_q /= 2;
    else if (s.heads_kv > 1) s.heads_kv = s.heads_q = 1;
    else if (s.seqlen_k >= s.seqlen_q) s.seqlen_k = std::max<int64_t>(1, s.seqlen_k * 2 / 3);
    else s.seqlen_q = std::max<int64_t>(1, s.seqlen_q * 2 / 3);
  }
}

}  // namespace flash_test::bwd
