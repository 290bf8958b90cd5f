// cli/src/reference.cpp -- the fp64 reference: softmax(scale * q k^T + mask) v computed in double from
// the very inputs the library saw (already rounded to the dtype), one row at a time.
//
// Large shapes are sampled so a check costs about kBudget multiply-adds: at most four (batch, head)
// pairs (the first, the last and two drawn from the seed) and, when that is still too much, rows evenly
// spaced over the sequence (the first and last row always among them).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "bench.hpp"

namespace fabench {
namespace {
constexpr double kBudget = 4e8;

double load(const void* base, int32_t dtype, int64_t idx) {
  switch (dtype) {
    case FLASH_DTYPE_FP32: return static_cast<const float*>(base)[idx];
    case FLASH_DTYPE_FP16: return fp16_to_float(static_cast<const uint16_t*>(base)[idx]);
    default: return bf16_to_float(static_cast<const uint16_t*>(base)[idx]);
  }
}
}  // namespace

double check_tolerance(int32_t dtype) {
  // Normwise (max |o - ref| / max |ref|). The output is rounded to the dtype once (2^-8 for bf16,
  // 2^-11 for fp16) and P is rounded before P V on the GPU; these leave a margin of a few ulps.
  switch (dtype) {
    case FLASH_DTYPE_FP32: return 1e-4;
    case FLASH_DTYPE_FP16: return 5e-3;
    default: return 3e-2;
  }
}

namespace {
struct Sample {
  std::vector<std::pair<int64_t, int64_t>> heads;  // (batch, query head)
  std::vector<int64_t> rows;
};

// At most four (batch, head) pairs and evenly spaced rows once the full check would pass kBudget.
Sample choose_sample(const Case& c, uint64_t seed, double cost_per_row_element) {
  Sample s;
  const int64_t d = c.head_dim, sq = c.seqlen_q, sk = c.seqlen_k, hq = c.heads_q;
  const int64_t all_heads = c.batch * hq;
  const double per_head = cost_per_row_element * double(sq) * double(sk) * double(d);
  if (all_heads * per_head <= kBudget || all_heads <= 4) {
    for (int64_t b = 0; b < c.batch; ++b)
      for (int64_t h = 0; h < hq; ++h) s.heads.emplace_back(b, h);
  } else {
    std::mt19937_64 rng(seed ^ 0xC0FFEEull);
    std::vector<int64_t> picks{0, all_heads - 1, int64_t(rng() % uint64_t(all_heads)), int64_t(rng() % uint64_t(all_heads))};
    std::sort(picks.begin(), picks.end());
    picks.erase(std::unique(picks.begin(), picks.end()), picks.end());
    for (int64_t x : picks) s.heads.emplace_back(x / hq, x % hq);
  }
  if (double(s.heads.size()) * per_head <= kBudget) {
    for (int64_t i = 0; i < sq; ++i) s.rows.push_back(i);
  } else {
    const int64_t n = std::max<int64_t>(
        16, int64_t(kBudget / (double(s.heads.size()) * cost_per_row_element * double(sk) * double(d))));
    for (int64_t t = 0; t < n; ++t) s.rows.push_back(n == 1 ? 0 : t * (sq - 1) / (n - 1));
    s.rows.erase(std::unique(s.rows.begin(), s.rows.end()), s.rows.end());
  }
  return s;
}

double rel(double err, double ref_max) { return ref_max > 0.0 ? err / ref_max : err; }
}  // namespace

GradCheckResult check_backward_against_reference(const Case& c, const MaskModel& mask, const void* q, const void* k,
                                                 const void* v, const void* d_o, const void* dq, const void* dk,
                                                 const void* dv, uint64_t seed) {
  GradCheckResult r;
  r.tolerance = 2.0 * check_tolerance(c.dtype);
  const int64_t d = c.head_dim, sq = c.seqlen_q, sk = c.seqlen_k, hq = c.heads_q, hkv = c.heads_kv;
  const int64_t ratio = hq / hkv;
  const double scale = 1.0 / std::sqrt(double(d));
  const Sample smp = choose_sample(c, seed, 4.0);
  r.sampled_heads = static_cast<int64_t>(smp.heads.size());
  r.sampled_rows = static_cast<int64_t>(smp.rows.size());
  // dK, dV: whole kv heads (every query head of the group, every row) when that fits the budget.
  std::vector<std::pair<int64_t, int64_t>> kv_heads;
  for (const auto& [b, h] : smp.heads) kv_heads.emplace_back(b, h / ratio);
  std::sort(kv_heads.begin(), kv_heads.end());
  kv_heads.erase(std::unique(kv_heads.begin(), kv_heads.end()), kv_heads.end());
  const bool full_kv = double(kv_heads.size()) * double(ratio) * 4.0 * double(sq) * double(sk) * double(d) <= 2 * kBudget;

  double dq_err = 0, dq_max = 0, dk_err = 0, dk_max = 0, dv_err = 0, dv_max = 0;
  std::vector<double> s(sk), p(sk), qi(d), doi(d), oref(d), dqi(d);
  auto row_grads = [&](int64_t b, int64_t h, int64_t i, std::vector<double>* dk_acc, std::vector<double>* dv_acc) {
    const int64_t hk = h / ratio, qbase = ((b * sq + i) * hq + h) * d;
    for (int64_t e = 0; e < d; ++e) qi[e] = load(q, c.dtype, qbase + e), doi[e] = load(d_o, c.dtype, qbase + e);
    std::vector<std::pair<int64_t, int64_t>> runs;
    mask.for_each_run(i, [&](int64_t a, int64_t z) { runs.emplace_back(a, z); });
    double mx = -INFINITY, sum = 0;
    for (const auto& [a, z] : runs)
      for (int64_t j = a; j < z; ++j) {
        const int64_t kb = ((b * sk + j) * hkv + hk) * d;
        double dot = 0;
        for (int64_t e = 0; e < d; ++e) dot += qi[e] * load(k, c.dtype, kb + e);
        s[j] = dot * scale;
        mx = std::max(mx, s[j]);
      }
    std::fill(oref.begin(), oref.end(), 0.0);
    for (const auto& [a, z] : runs)
      for (int64_t j = a; j < z; ++j) {
        p[j] = std::exp(s[j] - mx);
        sum += p[j];
      }
    for (const auto& [a, z] : runs)
      for (int64_t j = a; j < z; ++j) {
        p[j] /= sum;
        const int64_t vb = ((b * sk + j) * hkv + hk) * d;
        for (int64_t e = 0; e < d; ++e) oref[e] += p[j] * load(v, c.dtype, vb + e);
      }
    double D = 0;
    for (int64_t e = 0; e < d; ++e) D += doi[e] * oref[e];
    std::fill(dqi.begin(), dqi.end(), 0.0);
    for (const auto& [a, z] : runs)
      for (int64_t j = a; j < z; ++j) {
        const int64_t kb = ((b * sk + j) * hkv + hk) * d;
        double dp = 0;
        for (int64_t e = 0; e < d; ++e) dp += doi[e] * load(v, c.dtype, kb + e);
        const double ds = p[j] * (dp - D);
        for (int64_t e = 0; e < d; ++e) dqi[e] += scale * ds * load(k, c.dtype, kb + e);
        if (dk_acc) {
          double* dkj = dk_acc->data() + j * d;
          double* dvj = dv_acc->data() + j * d;
          for (int64_t e = 0; e < d; ++e) dkj[e] += scale * ds * qi[e], dvj[e] += p[j] * doi[e];
        }
      }
    for (int64_t e = 0; e < d; ++e) {
      const double got = load(dq, c.dtype, qbase + e);
      dq_err = std::max(dq_err, std::isfinite(got) ? std::fabs(got - dqi[e]) : INFINITY);
      dq_max = std::max(dq_max, std::fabs(dqi[e]));
    }
  };
  for (const auto& [b, h] : smp.heads)
    for (int64_t i : smp.rows) row_grads(b, h, i, nullptr, nullptr);
  if (full_kv) {
    std::vector<double> dk_acc(size_t(sk * d)), dv_acc(size_t(sk * d));
    for (const auto& [b, hk] : kv_heads) {
      std::fill(dk_acc.begin(), dk_acc.end(), 0.0);
      std::fill(dv_acc.begin(), dv_acc.end(), 0.0);
      for (int64_t h = hk * ratio; h < (hk + 1) * ratio; ++h)
        for (int64_t i = 0; i < sq; ++i) row_grads(b, h, i, &dk_acc, &dv_acc);
      for (int64_t j = 0; j < sk; ++j)
        for (int64_t e = 0; e < d; ++e) {
          const int64_t idx = ((b * sk + j) * hkv + hk) * d + e;
          const double gk = load(dk, c.dtype, idx), gv = load(dv, c.dtype, idx);
          dk_err = std::max(dk_err, std::isfinite(gk) ? std::fabs(gk - dk_acc[j * d + e]) : INFINITY);
          dv_err = std::max(dv_err, std::isfinite(gv) ? std::fabs(gv - dv_acc[j * d + e]) : INFINITY);
          dk_max = std::max(dk_max, std::fabs(dk_acc[j * d + e]));
          dv_max = std::max(dv_max, std::fabs(dv_acc[j * d + e]));
        }
    }
    r.dk_rel_error = rel(dk_err, dk_max);
    r.dv_rel_error = rel(dv_err, dv_max);
  }
  r.dq_rel_error = rel(dq_err, dq_max);
  r.passed = r.dq_rel_error <= r.tolerance && r.dk_rel_error <= r.tolerance && r.dv_rel_error <= r.tolerance;
  return r;
}

CheckResult check_against_reference(const Case& c, const MaskModel& mask, const void* q, const void* k, const void* v,
                                    const void* o, uint64_t seed) {
  CheckResult r;
  r.tolerance = check_tolerance(c.dtype);
  const int64_t d = c.head_dim, sq = c.seqlen_q, sk = c.seqlen_k, hq = c.heads_q, hkv = c.heads_kv;
  const int64_t ratio = hq / hkv;
  const double scale = 1.0 / std::sqrt(double(d));

  const Sample smp = choose_sample(c, seed, 2.0);
  const auto& heads = smp.heads;
  const auto& rows = smp.rows;
  r.sampled_heads = static_cast<int64_t>(heads.size());
  r.sampled_rows = static_cast<int64_t>(rows.size());

  double max_ref = 0.0;
  std::vector<double> s(sk), acc(d), qi(d);
  for (const auto& [b, h] : heads) {
    const int64_t hk = h / ratio;
    for (int64_t i : rows) {
      const int64_t qbase = ((b * sq + i) * hq + h) * d;
      for (int64_t e = 0; e < d; ++e) qi[e] = load(q, c.dtype, qbase + e);
      double mx = -INFINITY;
      std::vector<std::pair<int64_t, int64_t>> runs;
      mask.for_each_run(i, [&](int64_t a, int64_t z) { runs.emplace_back(a, z); });
      for (const auto& [a, z] : runs)
        for (int64_t j = a; j < z; ++j) {
          const int64_t kbase = ((b * sk + j) * hkv + hk) * d;
          double dot = 0.0;
          for (int64_t e = 0; e < d; ++e) dot += qi[e] * load(k, c.dtype, kbase + e);
          s[j] = dot * scale;
          mx = std::max(mx, s[j]);
        }
      std::fill(acc.begin(), acc.end(), 0.0);
      double sum = 0.0;
      for (const auto& [a, z] : runs)
        for (int64_t j = a; j < z; ++j) {
          const double p = std::exp(s[j] - mx);
          sum += p;
          const int64_t vbase = ((b * sk + j) * hkv + hk) * d;
          for (int64_t e = 0; e < d; ++e) acc[e] += p * load(v, c.dtype, vbase + e);
        }
      for (int64_t e = 0; e < d; ++e) {
        const double ref = sum > 0.0 ? acc[e] / sum : 0.0;  // a row that sees no key is 0 (flash.h)
        const double got = load(o, c.dtype, qbase + e);
        const double err = std::isfinite(got) ? std::fabs(got - ref) : INFINITY;
        r.max_abs_error = std::max(r.max_abs_error, err);
        max_ref = std::max(max_ref, std::fabs(ref));
      }
    }
  }
  r.max_rel_error = max_ref > 0.0 ? r.max_abs_error / max_ref : r.max_abs_error;
  r.passed = r.max_rel_error <= r.tolerance;
  return r;
}

CheckResult check_decode_against_reference(const Case& c, const std::vector<int64_t>& keys, const int32_t* block_table,
                                           const void* q, const void* k_cache, const void* v_cache, const void* k_new,
                                           const void* v_new, const void* o, uint64_t seed) {
  CheckResult r;
  r.tolerance = check_tolerance(c.dtype);
  const int64_t d = c.head_dim, sq = c.seqlen_q, sk = c.seqlen_k, hq = c.heads_q, hkv = c.heads_kv, ps = c.page_size;
  const int64_t ratio = hq / hkv, pps = decode_pages_per_seq(c);
  const double scale = 1.0 / std::sqrt(double(d));
  // The same sampling as the other modes, at the longest sequence's cost.
  Case shape = c;
  shape.seqlen_k = *std::max_element(keys.begin(), keys.end());
  const Sample smp = choose_sample(shape, seed, 2.0);
  r.sampled_heads = static_cast<int64_t>(smp.heads.size());
  r.sampled_rows = static_cast<int64_t>(smp.rows.size());

  // Element offset of key position t of sequence b, kv head hk, in the cache (gathered through the block table for a
  // paged cache), or in k_new/v_new for the positions the call appended.
  auto at = [&](int64_t b, int64_t t, int64_t hk, const void* cache, const void* fresh, const void** base) -> int64_t {
    const int64_t before = c.append ? keys[size_t(b)] - sq : keys[size_t(b)];
    if (c.append && t >= before) {
      *base = fresh;
      return ((b * sq + (t - before)) * hkv + hk) * d;
    }
    *base = cache;
    const int64_t row = ps > 0 ? int64_t(block_table[b * pps + t / ps]) * ps + t % ps : b * sk + t;
    return (row * hkv + hk) * d;
  };

  double max_ref = 0.0;
  std::vector<double> s, acc(d), qi(d);
  for (const auto& [b, h] : smp.heads) {
    const int64_t hk = h / ratio, L = keys[size_t(b)];
    const MaskModel mask(c.mask, sq, L, nullptr);  // bottom-right per sequence
    s.assign(size_t(L), 0.0);
    for (int64_t i : smp.rows) {
      const int64_t qbase = ((b * sq + i) * hq + h) * d;
      for (int64_t e = 0; e < d; ++e) qi[e] = load(q, c.dtype, qbase + e);
      double mx = -INFINITY;
      std::vector<std::pair<int64_t, int64_t>> runs;
      mask.for_each_run(i, [&](int64_t a, int64_t z) { runs.emplace_back(a, z); });
      for (const auto& [a, z] : runs)
        for (int64_t j = a; j < z; ++j) {
          const void* base = nullptr;
          const int64_t kb = at(b, j, hk, k_cache, k_new, &base);
          double dot = 0.0;
          for (int64_t e = 0; e < d; ++e) dot += qi[e] * load(base, c.dtype, kb + e);
          s[j] = dot * scale;
          mx = std::max(mx, s[j]);
        }
      std::fill(acc.begin(), acc.end(), 0.0);
      double sum = 0.0;
      for (const auto& [a, z] : runs)
        for (int64_t j = a; j < z; ++j) {
          const double p = std::exp(s[j] - mx);
          sum += p;
          const void* base = nullptr;
          const int64_t vb = at(b, j, hk, v_cache, v_new, &base);
          for (int64_t e = 0; e < d; ++e) acc[e] += p * load(base, c.dtype, vb + e);
        }
      for (int64_t e = 0; e < d; ++e) {
        const double ref = sum > 0.0 ? acc[e] / sum : 0.0;  // a row that sees no key is 0 (flash.h)
        const double got = load(o, c.dtype, qbase + e);
        const double err = std::isfinite(got) ? std::fabs(got - ref) : INFINITY;
        r.max_abs_error = std::max(r.max_abs_error, err);
        max_ref = std::max(max_ref, std::fabs(ref));
      }
    }
  }
  r.max_rel_error = max_ref > 0.0 ? r.max_abs_error / max_ref : r.max_abs_error;
  r.passed = r.max_rel_error <= r.tolerance;
  return r;
}

}  // namespace fabench
