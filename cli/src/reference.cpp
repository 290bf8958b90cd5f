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
#include "numeric.hpp"

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

CheckResult check_against_reference(const Case& c, const MaskModel& mask, const void* q, const void* k, const void* v,
                                    const void* o, uint64_t seed) {
  CheckResult r;
  r.tolerance = check_tolerance(c.dtype);
  const int64_t d = c.head_dim, sq = c.seqlen_q, sk = c.seqlen_k, hq = c.heads_q, hkv = c.heads_kv;
  const int64_t ratio = hq / hkv;
  const double scale = 1.0 / std::sqrt(double(d));

  // Which (batch, head) pairs.
  std::vector<std::pair<int64_t, int64_t>> heads;
  const int64_t all_heads = c.batch * hq;
  const double per_head = 2.0 * double(sq) * double(sk) * double(d);
  if (all_heads * per_head <= kBudget || all_heads <= 4) {
    for (int64_t b = 0; b < c.batch; ++b)
      for (int64_t h = 0; h < hq; ++h) heads.emplace_back(b, h);
  } else {
    std::mt19937_64 rng(seed ^ 0xC0FFEEull);
    std::vector<int64_t> picks{0, all_heads - 1, int64_t(rng() % uint64_t(all_heads)), int64_t(rng() % uint64_t(all_heads))};
    std::sort(picks.begin(), picks.end());
    picks.erase(std::unique(picks.begin(), picks.end()), picks.end());
    for (int64_t x : picks) heads.emplace_back(x / hq, x % hq);
  }
  // Which rows.
  std::vector<int64_t> rows;
  const double cost = double(heads.size()) * per_head;
  if (cost <= kBudget) {
    for (int64_t i = 0; i < sq; ++i) rows.push_back(i);
  } else {
    const int64_t n = std::max<int64_t>(16, int64_t(kBudget / (double(heads.size()) * 2.0 * double(sk) * double(d))));
    for (int64_t t = 0; t < n; ++t) rows.push_back(n == 1 ? 0 : t * (sq - 1) / (n - 1));
    rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  }
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

}  // namespace fabench
