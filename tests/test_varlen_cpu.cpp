// tests/test_varlen_cpu.cpp -- packed variable-length batches (flash.h, since 1.3) on the host: flash_fwd and flash_bwd
// with cu_seqlens_q / cu_seqlens_k / seqused_k, algorithms cpu and naive, against the fp64 reference of
// tests/support/reference.hpp and reference_bwd.hpp run sequence by sequence (each sequence is its own attention
// problem of batch 1: the references see 4-D views of its rows and know nothing of varlen). Random length mixes with
// 0, 1 and odd lengths, seqlen_q != seqlen_k per sequence, GQA/MQA, causal in both alignments, windows, strided and
// head-major layouts, seqused_k, rows after the last sequence; outputs poisoned (NaN) before every call, and every
// byte of an output outside the sequences' rows checked untouched afterwards. Then: each sequence bitwise equal to the
// dense call of batch 1 it is, bitwise determinism across thread counts, every refusal, and the CUDA algorithms'
// refusal message (host code: no GPU needed).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "libflash/cuda/sm90/fwd/plan.h"
#include "libflash/varlen.h"
#include "support/harness.hpp"
#include "support/harness_bwd.hpp"
#include "support/reference.hpp"
#include "support/reference_bwd.hpp"

using flash_test::HostTensor;
using flash_test::base_seed;

namespace {

size_t esize(int32_t dtype) { return dtype == FLASH_DTYPE_FP32 ? 4 : 2; }
const double kInf = std::numeric_limits<double>::infinity();

// ---- A varlen problem -------------------------------------------------------------------------------------------

struct VSpec {
  std::vector<int64_t> lq, lk;  // per sequence: query rows, key slot rows
  std::vector<int64_t> used;    // seqused_k (empty: none)
  int64_t extra_q = 0, extra_k = 0;  // rows after the last sequence (never read, never written)
  int64_t hq = 2, hkv = 1, d = 32;
  int32_t dtype = FLASH_DTYPE_FP32;
  float scale = 0.0f;
  flash_ref::Mask mask;  // causal, alignment, window (no block mask: varlen refuses it)
  int layout = 0;        // 0 packed, 1 padded rows and heads, 2 head-major ([h, total, d] in memory)
  int64_t max_slack = 0;  // max_seqlen_* = longest + this
  bool want_lse = true;

  int64_t batch() const { return static_cast<int64_t>(lq.size()); }
  int64_t keys(int64_t i) const { return used.empty() ? lk[i] : used[i]; }  // seqlen_k_i
  std::string describe() const {
    std::ostringstream s;
    s << "lq={";
    for (size_t i = 0; i < lq.size(); ++i) s << (i ? "," : "") << lq[i];
    s << "} lk={";
    for (size_t i = 0; i < lk.size(); ++i) s << (i ? "," : "") << lk[i];
    s << "}";
    if (!used.empty()) {
      s << " used={";
      for (size_t i = 0; i < used.size(); ++i) s << (i ? "," : "") << used[i];
      s << "}";
    }
    s << " extra=(" << extra_q << "," << extra_k << ") hq=" << hq << " hkv=" << hkv << " d=" << d
      << " dtype=" << dtype << " scale=" << scale << " causal=" << mask.causal
      << " align=" << (mask.alignment == FLASH_ALIGN_TOP_LEFT ? "tl" : "br") << " window=(" << mask.window_left << ","
      << mask.window_right << ") layout=" << layout << " slack=" << max_slack << " lse=" << want_lse;
    return s.str();
  }
};

// A [rows, heads, d] host tensor in a layout, poisoned (0xFF bytes: NaN in every dtype).
HostTensor make3(int32_t dtype, int64_t rows, int64_t heads, int64_t d, int layout, std::mt19937_64& rng) {
  HostTensor t;
  flash_tensor& x = t.desc;
  x.dtype = dtype, x.device_type = FLASH_DEVICE_CPU, x.device_id = 0, x.ndim = 3;
  x.shape[0] = rows, x.shape[1] = heads, x.shape[2] = d;
  if (layout == 0) {
    x.strides[0] = heads * d, x.strides[1] = d, x.strides[2] = 1;
  } else if (layout == 1) {
    const int64_t head_pad = 8 * static_cast<int64_t>(rng() % 3), row_pad = 8 * static_cast<int64_t>(1 + rng() % 3);
    x.strides[2] = 1, x.strides[1] = d + head_pad, x.strides[0] = heads * (d + head_pad) + row_pad;
  } else {
    x.strides[2] = 1, x.strides[0] = d, x.strides[1] = rows * d;
  }
  t.bytes.assign(static_cast<size_t>(t.span_elements()) * esize(dtype), 0xFF);
  x.data = t.bytes.data();
  return t;
}

// The LSE: fp32 [heads, total_q]; head-major layouts write it transposed ([total_q, heads] in memory).
HostTensor make_lse(int64_t heads, int64_t rows, int layout) {
  HostTensor t;
  flash_tensor& x = t.desc;
  x.dtype = FLASH_DTYPE_FP32, x.device_type = FLASH_DEVICE_CPU, x.device_id = 0, x.ndim = 2;
  x.shape[0] = heads, x.shape[1] = rows;
  if (layout == 2) x.strides[0] = 1, x.strides[1] = heads;
  else x.strides[0] = rows + (layout == 1 ? 5 : 0), x.strides[1] = 1;
  t.bytes.assign(static_cast<size_t>(t.span_elements()) * 4, 0xFF);
  x.data = t.bytes.data();
  return t;
}

int64_t off3(const flash_tensor& t, int64_t r, int64_t h, int64_t e) {
  return r * t.strides[0] + h * t.strides[1] + e * t.strides[2];
}

void fill_normal(HostTensor& t, double magnitude, std::mt19937_64& rng) {
  std::normal_distribution<double> dist(0.0, magnitude);
  const flash_tensor& x = t.desc;
  for (int64_t r = 0; r < x.shape[0]; ++r)
    for (int64_t h = 0; h < x.shape[1]; ++h)
      for (int64_t e = 0; e < x.shape[2]; ++e) {
        const int64_t o = off3(x, r, h, e);
        const double v = dist(rng);
        if (x.dtype == FLASH_DTYPE_FP32) reinterpret_cast<float*>(t.bytes.data())[o] = static_cast<float>(v);
        else if (x.dtype == FLASH_DTYPE_FP16) reinterpret_cast<uint16_t*>(t.bytes.data())[o] = flash_ref::fp16_round(v);
        else reinterpret_cast<uint16_t*>(t.bytes.data())[o] = flash_ref::bf16_round(v);
      }
}

// Rows [row0, row0 + rows) of a packed [total, h, d] tensor as the 4-D [1, rows, h, d] tensor the references read.
flash_tensor view4(const flash_tensor& t, int64_t row0, int64_t rows) {
  flash_tensor v = t;
  v.ndim = 4;
  v.data = static_cast<char*>(t.data) + row0 * t.strides[0] * static_cast<int64_t>(esize(t.dtype));
  v.shape[0] = 1, v.shape[1] = rows, v.shape[2] = t.shape[1], v.shape[3] = t.shape[2];
  v.strides[0] = 0, v.strides[1] = t.strides[0], v.strides[2] = t.strides[1], v.strides[3] = t.strides[2];
  return v;
}

struct VCase {
  VSpec spec;
  std::vector<int32_t> cu_q, cu_k, used;
  int64_t total_q = 0, total_k = 0;
  HostTensor q, k, v, o, lse;
  // Backward.
  HostTensor d_o, dq, dk, dv;
};

VCase make_vcase(const VSpec& s, std::mt19937_64& rng) {
  VCase c;
  c.spec = s;
  c.cu_q.assign(1, 0);
  c.cu_k.assign(1, 0);
  for (int64_t i = 0; i < s.batch(); ++i) {
    c.cu_q.push_back(static_cast<int32_t>(c.cu_q.back() + s.lq[i]));
    c.cu_k.push_back(static_cast<int32_t>(c.cu_k.back() + s.lk[i]));
  }
  for (int64_t u : s.used) c.used.push_back(static_cast<int32_t>(u));
  // A tensor has at least one row (flash.h: shapes are positive), even when every sequence is empty.
  c.total_q = std::max<int64_t>(1, c.cu_q.back() + s.extra_q);
  c.total_k = std::max<int64_t>(1, c.cu_k.back() + s.extra_k);
  c.q = make3(s.dtype, c.total_q, s.hq, s.d, s.layout, rng);
  c.k = make3(s.dtype, c.total_k, s.hkv, s.d, s.layout, rng);
  c.v = make3(s.dtype, c.total_k, s.hkv, s.d, s.layout, rng);
  c.o = make3(s.dtype, c.total_q, s.hq, s.d, s.layout, rng);
  c.lse = make_lse(s.hq, c.total_q, s.layout);
  fill_normal(c.q, 1.0, rng);
  fill_normal(c.k, 1.0, rng);
  fill_normal(c.v, 1.0, rng);
  return c;
}

int64_t longest(const std::vector<int64_t>& x) { return x.empty() ? 0 : *std::max_element(x.begin(), x.end()); }

template <class Args>
void set_varlen(VCase& c, Args* a) {
  const VSpec& s = c.spec;
  a->cu_seqlens_q = c.cu_q.data();
  a->cu_seqlens_k = c.cu_k.data();
  a->seqused_k = c.used.empty() ? nullptr : c.used.data();
  a->varlen_batch = static_cast<int32_t>(s.batch());
  a->max_seqlen_q = static_cast<int32_t>(longest(s.lq) + s.max_slack);
  std::vector<int64_t> keys;
  for (int64_t i = 0; i < s.batch(); ++i) keys.push_back(s.keys(i));
  a->max_seqlen_k = static_cast<int32_t>(longest(keys) + s.max_slack);
  a->softmax_scale = s.scale;
  a->causal = s.mask.causal;
  a->causal_alignment = s.mask.alignment;
  a->window_left = s.mask.window_left;
  a->window_right = s.mask.window_right;
}

void fill_fwd(VCase& c, flash_fwd_args* a, int32_t algorithm) {
  flash_fwd_args_init(a);
  a->q = c.q.desc, a->k = c.k.desc, a->v = c.v.desc, a->o = c.o.desc;
  if (c.spec.want_lse) a->lse = c.lse.desc;
  a->algorithm = algorithm;
  set_varlen(c, a);
}

int32_t run_fwd(VCase& c, int32_t algorithm, int32_t* used = nullptr) {
  std::fill(c.o.bytes.begin(), c.o.bytes.end(), 0xFF);
  std::fill(c.lse.bytes.begin(), c.lse.bytes.end(), 0xFF);
  flash_fwd_args a;
  fill_fwd(c, &a, algorithm);
  const int32_t s = flash_fwd(&a);
  if (used) *used = a.algorithm_used;
  return s;
}

// Every byte of `t` outside the elements of rows [0, rows) must still hold the poison (0xFF): rows past the last
// sequence, and the gaps of a strided layout. "" or a description of the first written byte.
std::string untouched_outside(const HostTensor& t, int64_t rows, const char* name) {
  std::vector<uint8_t> mine(t.bytes.size(), 0);
  const flash_tensor& x = t.desc;
  const int64_t es = x.dtype == FLASH_DTYPE_FP32 ? 4 : 2;
  if (x.ndim == 3) {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t h = 0; h < x.shape[1]; ++h)
        for (int64_t e = 0; e < x.shape[2]; ++e)
          std::fill_n(mine.begin() + off3(x, r, h, e) * es, es, uint8_t{1});
  } else {  // the LSE [heads, total_q]
    for (int64_t h = 0; h < x.shape[0]; ++h)
      for (int64_t r = 0; r < rows; ++r) std::fill_n(mine.begin() + (h * x.strides[0] + r * x.strides[1]) * 4, 4, uint8_t{1});
  }
  for (size_t b = 0; b < t.bytes.size(); ++b)
    if (!mine[b] && t.bytes[b] != 0xFF) return std::string(name) + ": byte " + std::to_string(b) + " outside its rows was written";
  return "";
}

// The forward's output against the fp64 reference, sequence by sequence; the bound (2 x the naive same-dtype error
// plus half an ulp of max |O|, as harness.cpp's check_case) over the whole call. "" when it passes.
std::string check_fwd(const VCase& c) {
  const VSpec& s = c.spec;
  double err = 0, naive_err = 0, max_ref = 0, lse_err = 0, lse_naive = 0, max_lse = 0;
  std::ostringstream msg;
  int bad = 0;
  for (int64_t i = 0; i < s.batch(); ++i) {
    const int64_t sq = s.lq[i], sk = s.keys(i);
    if (sq == 0) continue;
    flash_ref::Problem pr{1, sq, sk, s.hq, s.hkv, s.d,
                          s.scale != 0.0f ? static_cast<double>(s.scale) : 1.0 / std::sqrt(double(s.d)), s.mask};
    const flash_tensor q = view4(c.q.desc, c.cu_q[i], sq), k = view4(c.k.desc, c.cu_k[i], sk),
                       v = view4(c.v.desc, c.cu_k[i], sk);
    // A sequence without keys: every row sees nothing (O = 0, LSE = -inf), by definition; the reference is written for
    // positive lengths (a dense call's), so it is not asked.
    flash_ref::Result exact, naive;
    if (sk == 0) {
      exact.o.assign(sq * s.hq * s.d, 0.0), exact.lse.assign(s.hq * sq, -kInf);
      naive = exact;
    } else {
      exact = flash_ref::attention(pr, q, k, v, 0), naive = flash_ref::attention(pr, q, k, v, 1);
    }
    for (int64_t r = 0; r < sq; ++r)
      for (int64_t h = 0; h < s.hq; ++h) {
        const int64_t row = c.cu_q[i] + r;
        const bool empty = exact.lse[h * sq + r] == -kInf;
        for (int64_t e = 0; e < s.d; ++e) {
          const double got = flash_ref::load(c.o.bytes.data(), s.dtype, off3(c.o.desc, row, h, e));
          const double ref = exact.o[(r * s.hq + h) * s.d + e];
          if (!std::isfinite(got) || (empty && got != 0.0)) {
            if (bad++ < 3) msg << "O[seq " << i << ", row " << r << ", head " << h << ", " << e << "] = " << got << " (ref " << ref << "); ";
            err = kInf;
            continue;
          }
          err = std::max(err, std::fabs(got - ref));
          naive_err = std::max(naive_err, std::fabs(naive.o[(r * s.hq + h) * s.d + e] - ref));
          max_ref = std::max(max_ref, std::fabs(ref));
        }
        if (!s.want_lse) continue;
        const flash_tensor& l = c.lse.desc;
        const double got = reinterpret_cast<const float*>(c.lse.bytes.data())[h * l.strides[0] + row * l.strides[1]];
        const double ref = exact.lse[h * sq + r];
        if (ref == -kInf) {
          if (got != -kInf && bad++ < 3) msg << "LSE[seq " << i << ", row " << r << ", head " << h << "] = " << got << " (want -inf); ";
          if (got != -kInf) lse_err = kInf;
          continue;
        }
        if (!std::isfinite(got)) {
          if (bad++ < 3) msg << "LSE[seq " << i << ", row " << r << ", head " << h << "] = " << got << "; ";
          lse_err = kInf;
          continue;
        }
        lse_err = std::max(lse_err, std::fabs(got - ref));
        lse_naive = std::max(lse_naive, std::fabs(naive.lse[h * sq + r] - ref));
        max_lse = std::max(max_lse, std::fabs(ref));
      }
  }
  const double ulp = s.dtype == FLASH_DTYPE_FP32 ? std::ldexp(1.0, -24) : s.dtype == FLASH_DTYPE_FP16 ? std::ldexp(1.0, -11)
                                                                                                      : std::ldexp(1.0, -8);
  const double bound = 2 * naive_err + ulp * max_ref;
  const double lse_bound = 2 * lse_naive + std::ldexp(1.0, -23) * std::max(1.0, max_lse) * 4;
  std::string out;
  if (!(err <= bound) || (s.want_lse && !(lse_err <= lse_bound))) {
    msg << "max|O-ref|=" << err << " bound=" << bound << " (naive " << naive_err << ") max|LSE-ref|=" << lse_err
        << " bound=" << lse_bound;
    out = msg.str();
  }
  for (const std::string& u : {untouched_outside(c.o, c.cu_q.back(), "o"),
                               s.want_lse ? untouched_outside(c.lse, c.cu_q.back(), "lse") : std::string()})
    if (!u.empty()) out += (out.empty() ? "" : "; ") + u;
  return out;
}

// ---- Random specs -------------------------------------------------------------------------------------------

int64_t uni(std::mt19937_64& rng, int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); }

// A length: 0, 1, small odd, around a block (63..65, 127..129), or anything up to `hi`.
int64_t random_length(std::mt19937_64& rng, int64_t hi) {
  switch (uni(rng, 0, 5)) {
    case 0: return 0;
    case 1: return 1;
    case 2: return 2 * uni(rng, 0, 8) + 1;
    case 3: return std::min<int64_t>(hi, 64 * uni(rng, 1, 2) + uni(rng, -1, 1));
    default: return uni(rng, 0, hi);
  }
}

VSpec random_vspec(std::mt19937_64& rng, int64_t max_len) {
  VSpec s;
  const int64_t batch = uni(rng, 1, 6);
  for (int64_t i = 0; i < batch; ++i) {
    s.lq.push_back(random_length(rng, max_len));
    s.lk.push_back(uni(rng, 0, 3) == 0 ? s.lq.back() : random_length(rng, max_len));
  }
  if (uni(rng, 0, 3) == 0)
    for (int64_t i = 0; i < batch; ++i) s.used.push_back(uni(rng, 0, 2) == 0 ? s.lk[i] : uni(rng, 0, s.lk[i]));
  if (uni(rng, 0, 2) == 0) s.extra_q = uni(rng, 1, 9), s.extra_k = uni(rng, 0, 9);
  const int64_t ratios[] = {1, 2, 4};
  s.hkv = uni(rng, 1, 2);
  s.hq = s.hkv * ratios[uni(rng, 0, 2)];
  const int64_t dims[] = {8, 16, 32, 40, 64, 96, 128};
  s.d = dims[uni(rng, 0, 6)];
  const int32_t dtypes[] = {FLASH_DTYPE_FP32, FLASH_DTYPE_FP16, FLASH_DTYPE_BF16};
  s.dtype = dtypes[uni(rng, 0, 2)];
  const float scales[] = {0.0f, 0.0f, 0.3f, 1.0f};
  s.scale = scales[uni(rng, 0, 3)];
  s.layout = static_cast<int>(uni(rng, 0, 2));
  s.mask.causal = static_cast<int>(uni(rng, 0, 1));
  s.mask.alignment = uni(rng, 0, 1) ? FLASH_ALIGN_TOP_LEFT : FLASH_ALIGN_BOTTOM_RIGHT;
  if (uni(rng, 0, 2) == 0) {
    s.mask.window_left = uni(rng, 0, 1) ? static_cast<int>(uni(rng, 0, 80)) : -1;
    s.mask.window_right = s.mask.causal ? 0 : (uni(rng, 0, 1) ? static_cast<int>(uni(rng, 0, 80)) : -1);
  }
  s.max_slack = uni(rng, 0, 3) == 0 ? uni(rng, 1, 20) : 0;
  s.want_lse = uni(rng, 0, 4) != 0;
  return s;
}

// ---- The backward -------------------------------------------------------------------------------------------

// The forward (algorithm cpu: O and LSE) the backward consumes, dO, and poisoned gradients.
int32_t make_bwd_vcase(VSpec s, std::mt19937_64& rng, VCase* c) {
  s.want_lse = true;
  *c = make_vcase(s, rng);
  const int32_t st = run_fwd(*c, FLASH_ALGO_CPU);
  c->d_o = make3(s.dtype, c->total_q, s.hq, s.d, s.layout, rng);
  fill_normal(c->d_o, 1.0, rng);
  c->dq = make3(s.dtype, c->total_q, s.hq, s.d, s.layout, rng);
  c->dk = make3(s.dtype, c->total_k, s.hkv, s.d, s.layout, rng);
  c->dv = make3(s.dtype, c->total_k, s.hkv, s.d, s.layout, rng);
  return st;
}

void fill_bwd(VCase& c, flash_bwd_args* a, int32_t algorithm, uint32_t flags = 0) {
  flash_bwd_args_init(a);
  a->q = c.q.desc, a->k = c.k.desc, a->v = c.v.desc, a->o = c.o.desc, a->d_o = c.d_o.desc, a->lse = c.lse.desc;
  a->dq = c.dq.desc, a->dk = c.dk.desc, a->dv = c.dv.desc;
  a->algorithm = algorithm;
  a->flags = flags;
  set_varlen(c, a);
}

int32_t run_bwd(VCase& c, int32_t algorithm, uint32_t flags = 0, int32_t* used = nullptr) {
  for (HostTensor* t : {&c.dq, &c.dk, &c.dv}) std::fill(t->bytes.begin(), t->bytes.end(), 0xFF);
  flash_bwd_args a;
  fill_bwd(c, &a, algorithm, flags);
  const int32_t s = flash_bwd(&a);
  if (used) *used = a.algorithm_used;
  return s;
}

// The whole call's gradients as [1, rows, h, d] references: each sequence's from reference_bwd.hpp at its rows.
struct PackedRefs {
  flash_ref::Dense dq, dk, dv, dq_naive, dk_naive, dv_naive, dq_in, dk_in, dv_in;
  std::vector<uint8_t> dq_empty, dk_unseen;
};

PackedRefs packed_references(const VCase& c) {
  const VSpec& s = c.spec;
  const int64_t rq = c.cu_q.back(), rk = c.cu_k.back();
  PackedRefs p;
  for (flash_ref::Dense* x : {&p.dq, &p.dq_naive, &p.dq_in}) *x = flash_ref::Dense(1, rq, s.hq, s.d);
  for (flash_ref::Dense* x : {&p.dk, &p.dk_naive, &p.dk_in, &p.dv, &p.dv_naive, &p.dv_in}) *x = flash_ref::Dense(1, rk, s.hkv, s.d);
  p.dq_empty.assign(rq * s.hq, 0);
  p.dk_unseen.assign(rk * s.hkv, 1);  // slot rows past seqused_k stay "must be 0"
  for (int64_t i = 0; i < s.batch(); ++i) {
    const int64_t sq = s.lq[i], sk = s.keys(i);
    // Without queries, or without keys, every gradient of the sequence is 0 by definition (rows that see no key, keys
    // no query sees: dq_empty and dk_unseen, as set above for zeros): the reference, written for a dense call's
    // positive lengths, is not asked.
    if (sk == 0) {
      for (int64_t r = 0; r < sq; ++r)
        for (int64_t h = 0; h < s.hq; ++h) p.dq_empty[(c.cu_q[i] + r) * s.hq + h] = 1;
      continue;
    }
    if (sq == 0) continue;
    const flash_ref::Problem pr{1, sq, sk, s.hq, s.hkv, s.d,
                                s.scale != 0.0f ? static_cast<double>(s.scale) : 1.0 / std::sqrt(double(s.d)), s.mask};
    const flash_ref::Dense q = flash_ref::to_dense(view4(c.q.desc, c.cu_q[i], sq)),
                           k = flash_ref::to_dense(view4(c.k.desc, c.cu_k[i], sk)),
                           v = flash_ref::to_dense(view4(c.v.desc, c.cu_k[i], sk)),
                           d_o = flash_ref::to_dense(view4(c.d_o.desc, c.cu_q[i], sq)),
                           o = flash_ref::to_dense(view4(c.o.desc, c.cu_q[i], sq));
    std::vector<double> lse(s.hq * sq);
    for (int64_t h = 0; h < s.hq; ++h)
      for (int64_t r = 0; r < sq; ++r)
        lse[h * sq + r] = reinterpret_cast<const float*>(
            c.lse.bytes.data())[h * c.lse.desc.strides[0] + (c.cu_q[i] + r) * c.lse.desc.strides[1]];
    const flash_ref::Grads ex = flash_ref::attention_backward(pr, q, k, v, d_o, s.dtype, 0, &o, &lse);
    const flash_ref::Grads nv = flash_ref::attention_backward(pr, q, k, v, d_o, s.dtype, 1);
    auto place = [&](flash_ref::Dense& to, const flash_ref::Dense& from, int64_t row0) {
      for (int64_t r = 0; r < from.s; ++r)
        for (int64_t h = 0; h < from.h; ++h)
          for (int64_t e = 0; e < from.d; ++e) to.at(0, row0 + r, h, e) = from.at(0, r, h, e);
    };
    place(p.dq, ex.dq, c.cu_q[i]), place(p.dq_naive, nv.dq, c.cu_q[i]), place(p.dq_in, ex.dq_in, c.cu_q[i]);
    place(p.dk, ex.dk, c.cu_k[i]), place(p.dk_naive, nv.dk, c.cu_k[i]), place(p.dk_in, ex.dk_in, c.cu_k[i]);
    place(p.dv, ex.dv, c.cu_k[i]), place(p.dv_naive, nv.dv, c.cu_k[i]), place(p.dv_in, ex.dv_in, c.cu_k[i]);
    for (int64_t r = 0; r < sq; ++r)
      for (int64_t h = 0; h < s.hq; ++h) p.dq_empty[(c.cu_q[i] + r) * s.hq + h] = ex.dq_empty[r * s.hq + h];
    for (int64_t r = 0; r < sk; ++r)
      for (int64_t h = 0; h < s.hkv; ++h) p.dk_unseen[(c.cu_k[i] + r) * s.hkv + h] = ex.dk_unseen[r * s.hkv + h];
  }
  return p;
}

// A copy of a packed gradient's buffer with a [1, rows, h, d] descriptor (check_grad reads bytes.data() + offset).
HostTensor as4(const HostTensor& t, int64_t rows) {
  HostTensor r;
  r.bytes = t.bytes;
  r.desc = view4(t.desc, 0, rows);
  r.desc.data = r.bytes.data();
  return r;
}

// dq, dk, dv against the references (harness_bwd.hpp's check_grad: its element-wise bound over the whole call) and
// every byte outside the sequences' rows untouched. "" when all pass.
std::string check_bwd(const VCase& c, const PackedRefs& r) {
  using flash_test::bwd::check_grad;
  const int32_t dt = c.spec.dtype;
  const int64_t rq = c.cu_q.back(), rk = c.cu_k.back();
  std::string out;
  const flash_test::bwd::GradCheck cq = check_grad("dq", as4(c.dq, rq), r.dq, r.dq_naive, r.dq_in, r.dq_empty, dt, 2.0);
  const flash_test::bwd::GradCheck ck = check_grad("dk", as4(c.dk, rk), r.dk, r.dk_naive, r.dk_in, r.dk_unseen, dt, 2.0);
  const flash_test::bwd::GradCheck cv = check_grad("dv", as4(c.dv, rk), r.dv, r.dv_naive, r.dv_in, r.dk_unseen, dt, 2.0);
  if (!(cq.ok && ck.ok && cv.ok)) out = cq.message + "\n  " + ck.message + "\n  " + cv.message;
  for (const std::string& u : {untouched_outside(c.dq, rq, "dq"), untouched_outside(c.dk, rk, "dk"),
                               untouched_outside(c.dv, rk, "dv")})
    if (!u.empty()) out += (out.empty() ? "" : "; ") + u;
  return out;
}

void expect_fwd_ok(const VSpec& s, uint64_t salt, std::vector<int32_t> algorithms = {FLASH_ALGO_CPU, FLASH_ALGO_NAIVE}) {
  std::mt19937_64 rng(base_seed() ^ (0x7a11 + salt));
  VCase c = make_vcase(s, rng);
  for (int32_t algo : algorithms) {
    int32_t used = -1;
    const int32_t st = run_fwd(c, algo, &used);
    ASSERT_EQ(st, FLASH_OK) << flash_status_string(st) << ": " << flash_last_error_message() << "\n  case: " << s.describe();
    EXPECT_EQ(used, algo);
    const std::string problems = check_fwd(c);
    EXPECT_TRUE(problems.empty()) << flash_algorithm_name(algo) << ": " << problems << "\n  case: " << s.describe()
                                  << "\n  LIBFLASH_TEST_SEED=" << base_seed();
  }
}

void expect_bwd_ok(const VSpec& s, uint64_t salt, std::vector<int32_t> algorithms = {FLASH_ALGO_CPU, FLASH_ALGO_NAIVE}) {
  std::mt19937_64 rng(base_seed() ^ (0xb7a1 + salt));
  VCase c;
  ASSERT_EQ(make_bwd_vcase(s, rng, &c), FLASH_OK) << flash_last_error_message() << "\n  case: " << s.describe();
  const PackedRefs r = packed_references(c);
  for (int32_t algo : algorithms) {
    int32_t used = -1;
    const int32_t st = run_bwd(c, algo, 0, &used);
    ASSERT_EQ(st, FLASH_OK) << flash_status_string(st) << ": " << flash_last_error_message() << "\n  case: " << s.describe();
    EXPECT_EQ(used, algo);
    const std::string problems = check_bwd(c, r);
    EXPECT_TRUE(problems.empty()) << flash_algorithm_name(algo) << ": " << problems << "\n  case: " << s.describe()
                                  << "\n  LIBFLASH_TEST_SEED=" << base_seed();
  }
}

VSpec fixed(std::vector<int64_t> lq, std::vector<int64_t> lk, int32_t dtype = FLASH_DTYPE_FP32) {
  VSpec s;
  s.lq = std::move(lq), s.lk = std::move(lk), s.dtype = dtype;
  s.hq = 4, s.hkv = 2, s.d = 32;
  return s;
}

}  // namespace

// ---- Random mixes ---------------------------------------------------------------------------------------------

class VarlenForwardSweep : public ::testing::TestWithParam<int> {};
TEST_P(VarlenForwardSweep, MatchesReferencePerSequence) {
  std::mt19937_64 rng(base_seed() + 7919u * static_cast<uint64_t>(GetParam() + 1));
  expect_fwd_ok(random_vspec(rng, 300), static_cast<uint64_t>(GetParam()));
}
INSTANTIATE_TEST_SUITE_P(Random, VarlenForwardSweep, ::testing::Range(0, 24));

class VarlenBackwardSweep : public ::testing::TestWithParam<int> {};
TEST_P(VarlenBackwardSweep, MatchesReferencePerSequence) {
  std::mt19937_64 rng(base_seed() + 104729u * static_cast<uint64_t>(GetParam() + 1));
  expect_bwd_ok(random_vspec(rng, 160), static_cast<uint64_t>(GetParam()));
}
INSTANTIATE_TEST_SUITE_P(Random, VarlenBackwardSweep, ::testing::Range(0, 16));

// ---- Chosen cases -----------------------------------------------------------------------------------------------

TEST(Varlen, ZeroAndOneLengthSequences) {
  // Empty sequences at the start, middle and end; a sequence with queries and no keys (O = 0, LSE = -inf, dq = 0);
  // one with keys and no queries (dk = dv = 0); single rows and single keys.
  VSpec s = fixed({0, 5, 0, 1, 7, 3, 0}, {4, 0, 6, 1, 1, 9, 0});
  expect_fwd_ok(s, 1);
  expect_bwd_ok(s, 1);
  s.mask.causal = 1;
  expect_fwd_ok(s, 2);
  expect_bwd_ok(s, 2);
  VSpec all_empty = fixed({0, 0}, {0, 0});  // nothing to do (the tensors still have one row, left untouched)
  expect_fwd_ok(all_empty, 3);
  expect_bwd_ok(all_empty, 3);
}

TEST(Varlen, CausalBothAlignmentsPerSequence) {
  // seqlen_q > seqlen_k and < per sequence: bottom-right leaves each sequence's first rows empty, top-left its last
  // keys unseen; the diagonal must follow each sequence's own lengths, not the call's maxima.
  for (int align : {FLASH_ALIGN_BOTTOM_RIGHT, FLASH_ALIGN_TOP_LEFT})
    for (int32_t dt : {FLASH_DTYPE_FP32, FLASH_DTYPE_BF16}) {
      VSpec s = fixed({70, 3, 130, 64}, {20, 65, 129, 1}, dt);
      s.mask.causal = 1;
      s.mask.alignment = align;
      s.max_slack = 11;
      expect_fwd_ok(s, 10 + align);
      expect_bwd_ok(s, 10 + align);
    }
}

TEST(Varlen, SlidingWindowsPerSequence) {
  const int windows[][2] = {{0, 0}, {16, 0}, {-1, 5}, {3, -1}, {40, 40}};
  for (const auto& w : windows)
    for (int align : {FLASH_ALIGN_BOTTOM_RIGHT, FLASH_ALIGN_TOP_LEFT}) {
      VSpec s = fixed({90, 17, 1, 150}, {120, 17, 33, 70}, FLASH_DTYPE_FP16);
      s.mask.window_left = w[0], s.mask.window_right = w[1], s.mask.alignment = align;
      expect_fwd_ok(s, 20 + w[0]);
      expect_bwd_ok(s, 20 + w[1]);
    }
}

TEST(Varlen, GqaAndMqa) {
  VSpec s = fixed({33, 80, 5}, {47, 12, 100}, FLASH_DTYPE_BF16);
  s.hq = 8, s.hkv = 1;
  expect_fwd_ok(s, 30);
  expect_bwd_ok(s, 30);
  s.hq = 6, s.hkv = 3, s.mask.causal = 1;
  expect_fwd_ok(s, 31);
  expect_bwd_ok(s, 31);
}

TEST(Varlen, StridedAndHeadMajorLayouts) {
  for (int layout : {1, 2}) {
    VSpec s = fixed({40, 0, 77}, {63, 9, 65}, FLASH_DTYPE_FP16);
    s.layout = layout;
    s.extra_q = 3, s.extra_k = 5;  // rows after the last sequence: never written
    expect_fwd_ok(s, 40 + layout);
    expect_bwd_ok(s, 40 + layout);
  }
}

TEST(Varlen, SequsedK) {
  // Key slots with room to spare: only the first seqused_k[i] keys count (0 included: the rows see no key); the
  // backward writes dk = dv = 0 in the rest of each slot.
  VSpec s = fixed({20, 31, 8, 5}, {50, 31, 64, 10});
  s.used = {13, 31, 0, 10};
  expect_fwd_ok(s, 50);
  expect_bwd_ok(s, 50);
  s.mask.causal = 1, s.mask.alignment = FLASH_ALIGN_BOTTOM_RIGHT, s.dtype = FLASH_DTYPE_BF16;
  expect_fwd_ok(s, 51);
  expect_bwd_ok(s, 51);
}

TEST(Varlen, LargerMaxSeqlensAreAllowed) {
  VSpec s = fixed({10, 3}, {4, 12});
  s.max_slack = 200;
  expect_fwd_ok(s, 60);
  expect_bwd_ok(s, 60);
}

// Each sequence of a varlen call is the dense call of batch 1 on its rows: with algorithm cpu, bit for bit.
TEST(Varlen, EachSequenceIsBitwiseTheDenseCall) {
  std::mt19937_64 rng(base_seed() ^ 0xde45e);
  VSpec s = fixed({70, 0, 129, 1, 33}, {65, 8, 100, 0, 40}, FLASH_DTYPE_BF16);
  s.used = {60, 8, 100, 0, 21};
  s.mask.causal = 1;
  s.layout = 1;
  VCase c;
  ASSERT_EQ(make_bwd_vcase(s, rng, &c), FLASH_OK) << flash_last_error_message();
  ASSERT_EQ(run_bwd(c, FLASH_ALGO_CPU), FLASH_OK) << flash_last_error_message();
  for (int64_t i = 0; i < s.batch(); ++i) {
    const int64_t sq = s.lq[i], sk = s.keys(i);
    if (sq == 0 || sk == 0) continue;  // (a dense call has positive lengths)
    SCOPED_TRACE("sequence " + std::to_string(i));
    const int64_t es = static_cast<int64_t>(esize(s.dtype));
    std::vector<unsigned char> o(sq * s.hq * s.d * es, 0xFF), dq(o.size(), 0xFF), dk(sk * s.hkv * s.d * es, 0xFF),
        dv(dk.size(), 0xFF);
    std::vector<float> lse(s.hq * sq);
    const int64_t qshape[4] = {1, sq, s.hq, s.d}, kshape[4] = {1, sk, s.hkv, s.d}, lshape[3] = {1, s.hq, sq};
    flash_fwd_args f;
    flash_fwd_args_init(&f);
    f.q = view4(c.q.desc, c.cu_q[i], sq), f.k = view4(c.k.desc, c.cu_k[i], sk), f.v = view4(c.v.desc, c.cu_k[i], sk);
    f.o = flash_tensor_contiguous(o.data(), s.dtype, FLASH_DEVICE_CPU, 0, 4, qshape);
    f.lse = flash_tensor_contiguous(lse.data(), FLASH_DTYPE_FP32, FLASH_DEVICE_CPU, 0, 3, lshape);
    f.causal = 1;
    f.algorithm = FLASH_ALGO_CPU;
    ASSERT_EQ(flash_fwd(&f), FLASH_OK) << flash_last_error_message();
    for (int64_t r = 0; r < sq; ++r)
      for (int64_t h = 0; h < s.hq; ++h) {
        ASSERT_EQ(0, std::memcmp(&o[((r * s.hq + h) * s.d) * es], &c.o.bytes[off3(c.o.desc, c.cu_q[i] + r, h, 0) * es], s.d * es))
            << "o row " << r << " head " << h;
        const float packed = reinterpret_cast<const float*>(
            c.lse.bytes.data())[h * c.lse.desc.strides[0] + (c.cu_q[i] + r) * c.lse.desc.strides[1]];
        ASSERT_EQ(0, std::memcmp(&lse[h * sq + r], &packed, 4)) << "lse row " << r << " head " << h;
      }
    flash_bwd_args b;
    flash_bwd_args_init(&b);
    b.q = f.q, b.k = f.k, b.v = f.v, b.o = f.o, b.lse = f.lse;
    b.d_o = view4(c.d_o.desc, c.cu_q[i], sq);
    b.dq = flash_tensor_contiguous(dq.data(), s.dtype, FLASH_DEVICE_CPU, 0, 4, qshape);
    b.dk = flash_tensor_contiguous(dk.data(), s.dtype, FLASH_DEVICE_CPU, 0, 4, kshape);
    b.dv = flash_tensor_contiguous(dv.data(), s.dtype, FLASH_DEVICE_CPU, 0, 4, kshape);
    b.causal = 1;
    b.algorithm = FLASH_ALGO_CPU;
    ASSERT_EQ(flash_bwd(&b), FLASH_OK) << flash_last_error_message();
    for (int64_t r = 0; r < sq; ++r)
      for (int64_t h = 0; h < s.hq; ++h)
        ASSERT_EQ(0, std::memcmp(&dq[((r * s.hq + h) * s.d) * es], &c.dq.bytes[off3(c.dq.desc, c.cu_q[i] + r, h, 0) * es],
                                 s.d * es))
            << "dq row " << r << " head " << h;
    for (int64_t r = 0; r < sk; ++r)
      for (int64_t h = 0; h < s.hkv; ++h) {
        ASSERT_EQ(0, std::memcmp(&dk[((r * s.hkv + h) * s.d) * es], &c.dk.bytes[off3(c.dk.desc, c.cu_k[i] + r, h, 0) * es],
                                 s.d * es))
            << "dk row " << r << " head " << h;
        ASSERT_EQ(0, std::memcmp(&dv[((r * s.hkv + h) * s.d) * es], &c.dv.bytes[off3(c.dv.desc, c.cu_k[i] + r, h, 0) * es],
                                 s.d * es))
            << "dv row " << r << " head " << h;
      }
  }
}

TEST(Varlen, DeterministicAcrossThreadCounts) {
  const char* old = std::getenv("LIBFLASH_NUM_THREADS");
  const std::string saved = old ? old : "";
  std::mt19937_64 rng(base_seed() ^ 0xd37);
  VSpec s = fixed({150, 0, 64, 1, 200, 37}, {130, 20, 65, 5, 260, 0}, FLASH_DTYPE_BF16);
  s.hq = 8, s.hkv = 2, s.mask.causal = 1;
  for (int32_t algo : {FLASH_ALGO_CPU, FLASH_ALGO_NAIVE}) {
    VCase c;
    ASSERT_EQ(make_bwd_vcase(s, rng, &c), FLASH_OK);
    std::vector<unsigned char> first[5];
    const char* threads[] = {"1", "3", "8"};
    for (int run = 0; run < 3; ++run) {
      setenv("LIBFLASH_NUM_THREADS", threads[run], 1);
      ASSERT_EQ(run_fwd(c, algo), FLASH_OK) << flash_last_error_message();
      ASSERT_EQ(run_bwd(c, algo, FLASH_FLAG_DETERMINISTIC), FLASH_OK) << flash_last_error_message();
      const HostTensor* out[5] = {&c.o, &c.lse, &c.dq, &c.dk, &c.dv};
      for (int t = 0; t < 5; ++t) {
        if (run == 0) first[t] = out[t]->bytes;
        else EXPECT_TRUE(first[t] == out[t]->bytes) << flash_algorithm_name(algo) << ": output " << t
                                                     << " differs with LIBFLASH_NUM_THREADS=" << threads[run];
      }
    }
  }
  if (old) setenv("LIBFLASH_NUM_THREADS", saved.c_str(), 1);
  else unsetenv("LIBFLASH_NUM_THREADS");
}

TEST(Varlen, AutoPicksCpuAndWorkspaceIsHonoured) {
  std::mt19937_64 rng(base_seed() ^ 0x3a5);
  VSpec s = fixed({70, 0, 9}, {30, 40, 70});
  VCase c;
  ASSERT_EQ(make_bwd_vcase(s, rng, &c), FLASH_OK);
  int32_t used = -1;
  ASSERT_EQ(run_fwd(c, FLASH_ALGO_AUTO, &used), FLASH_OK);
  EXPECT_EQ(used, FLASH_ALGO_CPU);
  ASSERT_EQ(run_bwd(c, FLASH_ALGO_AUTO, 0, &used), FLASH_OK) << flash_last_error_message();
  EXPECT_EQ(used, FLASH_ALGO_CPU);
  const std::vector<unsigned char> dq = c.dq.bytes;
  flash_bwd_args a;
  fill_bwd(c, &a, FLASH_ALGO_CPU);
  size_t bytes = 0;
  ASSERT_EQ(flash_bwd_workspace_size(&a, &bytes), FLASH_OK) << flash_last_error_message();
  // The sum of the sequences' dense workspaces: fp32 dQacc and D per query row and head, one counter per
  // (kv head, query block of 64) of each sequence: sequences of 70, 0, 9 queries have 2 + 0 + 1 blocks.
  EXPECT_EQ(bytes, 4 * (size_t(4) * 79 * (32 + 1) + size_t(2) * 3));
  std::vector<unsigned char> ws(bytes, 0xFF);
  a.workspace = ws.data();
  a.workspace_size = bytes - 1;
  EXPECT_EQ(flash_bwd(&a), FLASH_ERROR_WORKSPACE_TOO_SMALL);
  a.workspace_size = bytes;
  std::fill(c.dq.bytes.begin(), c.dq.bytes.end(), 0xFF);
  ASSERT_EQ(flash_bwd(&a), FLASH_OK) << flash_last_error_message();
  EXPECT_EQ(dq, c.dq.bytes);
}

// ---- Refusals ---------------------------------------------------------------------------------------------------

namespace {

// A small valid varlen call: 3 sequences of (3, 5), (0, 2), (4, 0) rows; one extra row after each.
struct VFixture {
  std::vector<float> q, k, v, o, lse, d_o, dq, dk, dv;
  std::vector<int32_t> cu_q{0, 3, 3, 7}, cu_k{0, 5, 7, 7}, used{5, 1, 0};
  flash_fwd_args f;
  flash_bwd_args b;
  static constexpr int64_t kTq = 8, kTk = 8, kHq = 4, kHkv = 2, kD = 16;
  VFixture() {
    q.assign(kTq * kHq * kD, 0.5f), o.assign(q.size(), NAN), d_o.assign(q.size(), 0.25f), dq.assign(q.size(), NAN);
    k.assign(kTk * kHkv * kD, 0.25f), v.assign(k.size(), 1.0f), dk.assign(k.size(), NAN), dv.assign(k.size(), NAN);
    lse.assign(kHq * kTq, NAN);
    const int64_t qs[3] = {kTq, kHq, kD}, ks[3] = {kTk, kHkv, kD}, ls[2] = {kHq, kTq};
    auto t = [](std::vector<float>& x, int ndim, const int64_t* shape) {
      return flash_tensor_contiguous(x.data(), FLASH_DTYPE_FP32, FLASH_DEVICE_CPU, 0, ndim, shape);
    };
    flash_fwd_args_init(&f);
    f.q = t(q, 3, qs), f.k = t(k, 3, ks), f.v = t(v, 3, ks), f.o = t(o, 3, qs), f.lse = t(lse, 2, ls);
    f.cu_seqlens_q = cu_q.data(), f.cu_seqlens_k = cu_k.data(), f.varlen_batch = 3;
    f.max_seqlen_q = 4, f.max_seqlen_k = 5;
    flash_bwd_args_init(&b);
    b.q = f.q, b.k = f.k, b.v = f.v, b.o = t(o, 3, qs), b.lse = f.lse, b.d_o = t(d_o, 3, qs);
    b.dq = t(dq, 3, qs), b.dk = t(dk, 3, ks), b.dv = t(dv, 3, ks);
    b.cu_seqlens_q = cu_q.data(), b.cu_seqlens_k = cu_k.data(), b.varlen_batch = 3;
    b.max_seqlen_q = 4, b.max_seqlen_k = 5;
  }
  bool fwd_untouched() const {
    for (float x : o) if (!std::isnan(x)) return false;
    for (float x : lse) if (!std::isnan(x)) return false;
    return true;
  }
  bool bwd_untouched() const {
    for (const auto* x : {&dq, &dk, &dv})
      for (float y : *x) if (!std::isnan(y)) return false;
    return true;
  }
};

// The forward (and, with both = true, the backward given the same change) refused with `status` and `needle`;
// nothing written; the workspace queries refuse alike.
template <class Change>
void expect_refused(Change change, int32_t status, const std::string& needle, bool both = true) {
  VFixture x;
  change(x.f);
  int32_t s = flash_fwd(&x.f);
  EXPECT_EQ(s, status) << flash_status_string(s) << ": " << flash_last_error_message();
  EXPECT_NE(std::string(flash_last_error_message()).find(needle), std::string::npos)
      << "forward message was: " << flash_last_error_message() << " (wanted: " << needle << ")";
  EXPECT_TRUE(x.fwd_untouched()) << "a refused forward wrote its outputs";
  size_t bytes = 123;
  EXPECT_EQ(flash_fwd_workspace_size(&x.f, &bytes), status);
  EXPECT_EQ(bytes, 0u);
  if (!both) return;
  change(x.b);
  s = flash_bwd(&x.b);
  EXPECT_EQ(s, status) << flash_status_string(s) << ": " << flash_last_error_message();
  EXPECT_NE(std::string(flash_last_error_message()).find(needle), std::string::npos)
      << "backward message was: " << flash_last_error_message() << " (wanted: " << needle << ")";
  EXPECT_TRUE(x.bwd_untouched()) << "a refused backward wrote its outputs";
  bytes = 123;
  EXPECT_EQ(flash_bwd_workspace_size(&x.b, &bytes), status);
  EXPECT_EQ(bytes, 0u);
}

}  // namespace

TEST(VarlenValidation, ValidFixtureRuns) {
  VFixture x;
  ASSERT_EQ(flash_fwd(&x.f), FLASH_OK) << flash_last_error_message();
  ASSERT_EQ(flash_bwd(&x.b), FLASH_OK) << flash_last_error_message();
  // Rows after the last sequence (row 7 of q, o, dq, lse; row 7 of k, dk, dv) are not written.
  for (int64_t e = 0; e < VFixture::kHq * VFixture::kD; ++e) {
    EXPECT_TRUE(std::isnan(x.o[7 * VFixture::kHq * VFixture::kD + e]));
    EXPECT_TRUE(std::isnan(x.dq[7 * VFixture::kHq * VFixture::kD + e]));
  }
  for (int64_t h = 0; h < VFixture::kHq; ++h) EXPECT_TRUE(std::isnan(x.lse[h * VFixture::kTq + 7]));
  for (int64_t e = 0; e < VFixture::kHkv * VFixture::kD; ++e) EXPECT_TRUE(std::isnan(x.dk[7 * VFixture::kHkv * VFixture::kD + e]));
  // Sequence 2 (4 queries, no keys): O = 0, LSE = -inf, dq = 0.
  for (int64_t r = 3; r < 7; ++r) {
    EXPECT_EQ(x.o[r * VFixture::kHq * VFixture::kD], 0.0f);
    EXPECT_EQ(x.lse[r], -INFINITY);
    EXPECT_EQ(x.dq[r * VFixture::kHq * VFixture::kD], 0.0f);
  }
  // Sequence 1 (no queries, 2 keys): dk = dv = 0.
  EXPECT_EQ(x.dk[5 * VFixture::kHkv * VFixture::kD], 0.0f);
  EXPECT_EQ(x.dv[6 * VFixture::kHkv * VFixture::kD], 0.0f);
}

TEST(VarlenValidation, BadOffsets) {
  expect_refused([](auto& a) { const_cast<int32_t*>(a.cu_seqlens_q)[0] = 1; }, FLASH_ERROR_INVALID_ARGUMENT,
                 "cu_seqlens_q[0] is 1 but must be 0");
  expect_refused([](auto& a) { const_cast<int32_t*>(a.cu_seqlens_k)[0] = -2; }, FLASH_ERROR_INVALID_ARGUMENT,
                 "cu_seqlens_k[0] is -2 but must be 0");
  expect_refused([](auto& a) { const_cast<int32_t*>(a.cu_seqlens_q)[2] = 2; }, FLASH_ERROR_INVALID_ARGUMENT,
                 "cu_seqlens_q[2] is 2, less than cu_seqlens_q[1] = 3: the offsets must not decrease");
  expect_refused([](auto& a) { const_cast<int32_t*>(a.cu_seqlens_k)[3] = 6; }, FLASH_ERROR_INVALID_ARGUMENT,
                 "cu_seqlens_k[3] is 6, less than cu_seqlens_k[2] = 7");
}

TEST(VarlenValidation, OffsetsOutOfRange) {
  expect_refused([](auto& a) { const_cast<int32_t*>(a.cu_seqlens_q)[3] = 9; }, FLASH_ERROR_INVALID_ARGUMENT,
                 "cu_seqlens_q[3] is 9 but q has 8 rows (q.shape[0])");
  expect_refused([](auto& a) { const_cast<int32_t*>(a.cu_seqlens_k)[3] = 100; }, FLASH_ERROR_INVALID_ARGUMENT,
                 "cu_seqlens_k[3] is 100 but k has 8 rows (k.shape[0])");
}

TEST(VarlenValidation, MaxSeqlenTooSmall) {
  expect_refused([](auto& a) { a.max_seqlen_q = 3; }, FLASH_ERROR_INVALID_ARGUMENT,
                 "max_seqlen_q is 3 but a sequence has 4 queries");
  expect_refused([](auto& a) { a.max_seqlen_k = 4; }, FLASH_ERROR_INVALID_ARGUMENT,
                 "max_seqlen_k is 4 but a sequence has 5 keys (cu_seqlens_k)");
  expect_refused([](auto& a) { a.max_seqlen_k = -1; }, FLASH_ERROR_INVALID_ARGUMENT, "max_seqlen_k is -1 but must be >= 0");
}

TEST(VarlenValidation, SequsedK) {
  // used = {5, 1, 0}: valid, and max_seqlen_k may then be 5.
  expect_refused([](auto& a) { a.seqused_k = nullptr; a.cu_seqlens_q = nullptr; }, FLASH_ERROR_NULL_POINTER,
                 "cu_seqlens_q is NULL but cu_seqlens_k is set");
  {
    VFixture x;
    x.f.seqused_k = x.used.data();
    EXPECT_EQ(flash_fwd(&x.f), FLASH_OK) << flash_last_error_message();
  }
  expect_refused(
      [](auto& a) {
        static std::vector<int32_t> used{5, 3, 0};  // sequence 1's slot holds 2 keys
        a.seqused_k = used.data();
      },
      FLASH_ERROR_INVALID_ARGUMENT, "seqused_k[1] is 3 but sequence 1's slot holds 2 keys");
  expect_refused(
      [](auto& a) {
        static std::vector<int32_t> used{-1, 0, 0};
        a.seqused_k = used.data();
      },
      FLASH_ERROR_INVALID_ARGUMENT, "seqused_k[0] is -1");
  expect_refused(
      [](auto& a) {
        static std::vector<int32_t> used{5, 2, 0};
        a.seqused_k = used.data();
        a.max_seqlen_k = 4;
      },
      FLASH_ERROR_INVALID_ARGUMENT, "max_seqlen_k is 4 but a sequence has 5 keys (seqused_k)");
}

TEST(VarlenValidation, FieldsThatGoTogether) {
  expect_refused([](auto& a) { a.cu_seqlens_k = nullptr; }, FLASH_ERROR_NULL_POINTER,
                 "cu_seqlens_k is NULL but cu_seqlens_q is set");
  expect_refused([](auto& a) { a.varlen_batch = 0; }, FLASH_ERROR_INVALID_ARGUMENT, "varlen_batch is 0 but must be >= 1");
  expect_refused([](auto& a) { a.reserved_1_3 = 7; }, FLASH_ERROR_INVALID_ARGUMENT, "reserved_1_3 is 7 but must be 0");
  expect_refused(
      [](auto& a) {
        a.cu_seqlens_q = a.cu_seqlens_k = nullptr;
        static std::vector<int32_t> used{1, 1, 1};
        a.seqused_k = used.data();
      },
      FLASH_ERROR_INVALID_ARGUMENT, "seqused_k is set but cu_seqlens_q is NULL");
  expect_refused([](auto& a) { a.cu_seqlens_q = a.cu_seqlens_k = nullptr; }, FLASH_ERROR_INVALID_ARGUMENT,
                 "is set but cu_seqlens_q is NULL");  // varlen_batch / max_seqlen_* left set
  expect_refused(
      [](auto& a) {
        a.cu_seqlens_q = reinterpret_cast<const int32_t*>(reinterpret_cast<const char*>(a.cu_seqlens_q) + 2);
      },
      FLASH_ERROR_INVALID_ARGUMENT, "cu_seqlens_q is not aligned to its int32 elements");
}

TEST(VarlenValidation, ShapesAreThePackedOnes) {
  expect_refused([](auto& a) { a.q.ndim = 4; a.q.shape[3] = 16; a.q.strides[3] = 1; }, FLASH_ERROR_BAD_SHAPE,
                 "q.ndim is 4 but must be 3");
  expect_refused([](auto& a) { a.lse.ndim = 3; a.lse.shape[2] = 1; a.lse.strides[2] = 1; }, FLASH_ERROR_BAD_SHAPE,
                 "lse.ndim is 3 but must be 2");
  expect_refused([](auto& a) { a.lse.shape[1] = 7; }, FLASH_ERROR_BAD_SHAPE, "lse.shape[1] is 7 but q.shape[0] is 8");
  expect_refused([](auto& a) { a.v.shape[0] = 7; }, FLASH_ERROR_BAD_SHAPE, "v.shape[0] is 7 but k.shape[0] is 8");
  expect_refused([](auto& a) { a.o.shape[1] = 2; }, FLASH_ERROR_BAD_SHAPE, "o.shape[1] is 2 but q.shape[1] is 4");
  expect_refused([](auto& a) { a.k.shape[1] = 3, a.v.shape[1] = 3; }, FLASH_ERROR_BAD_SHAPE,
                 "q.shape[1] (heads_q) is 4, not a multiple of k.shape[1] (heads_kv) 3", /*both=*/false);
  {
    VFixture x;  // (the backward's own tensors)
    x.b.dk.shape[0] = 4;
    EXPECT_EQ(flash_bwd(&x.b), FLASH_ERROR_BAD_SHAPE);
    EXPECT_NE(std::string(flash_last_error_message()).find("dk.shape[0] is 4 but k.shape[0] is 8"), std::string::npos)
        << flash_last_error_message();
    EXPECT_TRUE(x.bwd_untouched());
  }
}

TEST(VarlenValidation, BlockMaskIsUnsupported) {
  flash_block_mask m;
  flash_block_mask_init(&m);
  int32_t nb = 0;
  m.num_q_blocks = 1, m.max_kv_blocks = 0, m.kv_num_blocks = &nb;
  expect_refused([&](auto& a) { a.block_mask = &m; }, FLASH_ERROR_UNSUPPORTED,
                 "block-sparse masks are not supported with packed variable-length batches");
}

TEST(VarlenValidation, OutputsMayNotOverlapTheIndexArrays) {
  {
    VFixture x;
    x.f.cu_seqlens_q = reinterpret_cast<const int32_t*>(x.o.data() + 8);  // inside o
    EXPECT_EQ(flash_fwd(&x.f), FLASH_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(flash_last_error_message()).find("o overlaps cu_seqlens_q"), std::string::npos)
        << flash_last_error_message();
  }
  {
    VFixture x;  // the LSE over cu_seqlens_k (its values copied there first, so only the overlap is wrong)
    std::memcpy(x.lse.data() + 4, x.cu_k.data(), 16);
    x.f.cu_seqlens_k = reinterpret_cast<const int32_t*>(x.lse.data() + 4);
    EXPECT_EQ(flash_fwd(&x.f), FLASH_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(flash_last_error_message()).find("lse overlaps cu_seqlens_k"), std::string::npos)
        << flash_last_error_message();
  }
  {
    VFixture x;  // a gradient over seqused_k
    std::vector<int32_t> used{5, 1, 0};
    std::memcpy(x.dv.data() + 3, used.data(), 12);
    x.b.seqused_k = reinterpret_cast<const int32_t*>(x.dv.data() + 3);
    EXPECT_EQ(flash_bwd(&x.b), FLASH_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(flash_last_error_message()).find("dv overlaps seqused_k"), std::string::npos)
        << flash_last_error_message();
  }
  {
    VFixture x;  // the workspace over cu_seqlens_q
    x.b.workspace = const_cast<int32_t*>(x.cu_q.data());
    x.b.workspace_size = 8;
    EXPECT_EQ(flash_bwd(&x.b), FLASH_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(flash_last_error_message()).find("workspace overlaps cu_seqlens_q"), std::string::npos)
        << flash_last_error_message();
  }
}

// The CUDA algorithms refuse varlen in supports() (their kernels do not read cu_seqlens yet: issue 72). Without a GPU:
// the shared refusal (libflash/varlen.h, which sm80's forward and backward plans and naive's supports() ask first) and
// the sm90 forward's plan (host code, compiled into this test), which must answer with it.
TEST(VarlenGpu, RefusalMessageWithoutAGpu) {
  flash::FwdParams p{};
  std::string why;
  EXPECT_FALSE(flash::gpu_refuses_varlen(p, &why));
  p.varlen = true;
  ASSERT_TRUE(flash::gpu_refuses_varlen(p, &why));
  EXPECT_EQ(why, "varlen runs on the cpu algorithm so far (GPU kernels: issue 72)");

  // An sm90-eligible problem (bf16, d 128, aligned): planned dense, refused as varlen.
  flash::FwdParams q{};
  q.dtype = flash::DType::BF16;
  q.head_dim = 128, q.batch = 2, q.heads_q = q.heads_kv = 4, q.head_ratio = 1;
  q.seqlen_q = q.seqlen_k = 512;
  q.window_left = q.window_right = -1;
  q.scale = 0.125f;
  q.q = q.k = q.v = reinterpret_cast<void*>(uintptr_t(1) << 20);
  q.o = reinterpret_cast<void*>(uintptr_t(1) << 20);
  q.q_row_stride = q.k_row_stride = q.v_row_stride = q.o_row_stride = 4 * 128;
  q.q_head_stride = q.k_head_stride = q.v_head_stride = q.o_head_stride = 128;
  q.q_batch_stride = q.k_batch_stride = q.v_batch_stride = q.o_batch_stride = 512 * 4 * 128;
  q.bottom_right = true;
  const flash::sm90::Device dev;  // an H100's
  const flash::sm90::FwdPlan dense = flash::sm90::plan(q, dev);
  ASSERT_TRUE(dense.ok()) << dense.why;
  q.varlen = true;
  const int32_t cu[3] = {0, 100, 512};
  q.cu_seqlens_q = q.cu_seqlens_k = cu;
  q.total_q = q.total_k = 512;
  q.q_batch_stride = q.k_batch_stride = q.v_batch_stride = q.o_batch_stride = 0;
  const flash::sm90::FwdPlan refused = flash::sm90::plan(q, dev);
  EXPECT_FALSE(refused.ok());
  EXPECT_EQ(refused.why, "varlen runs on the cpu algorithm so far (GPU kernels: issue 72)");
}

// CUDA tensors on a machine (or a build) without a GPU: the call is refused before anything runs.
TEST(VarlenGpu, CudaTensorsWithoutAGpu) {
  int32_t n = 0;
  flash_device_count(FLASH_DEVICE_CUDA, &n);
  if (n > 0) GTEST_SKIP() << "this machine has a CUDA device (tests/test_forward_gpu.cpp covers varlen there)";
  VFixture x;
  for (flash_tensor* t : {&x.f.q, &x.f.k, &x.f.v, &x.f.o, &x.f.lse}) t->device_type = FLASH_DEVICE_CUDA, t->dtype = t == &x.f.lse ? FLASH_DTYPE_FP32 : FLASH_DTYPE_BF16;
  const int32_t s = flash_fwd(&x.f);
  EXPECT_EQ(s, FLASH_ERROR_NO_CUDA_DEVICE) << flash_status_string(s) << ": " << flash_last_error_message();
}
