// tests/support/reference_bwd.hpp -- the fp64 reference backward and its "naive same-dtype" twin.
//
// Header-only, written from the definitions, sharing no code with the library (it reuses only the
// test-side conversions and mask of reference.hpp). Everything is materialised per (batch, head):
//
//   S = scale * Q K^T (masked), P = softmax(S), O = P V
//   dV = P^T dO,  dP = dO V^T,  D_i = sum_j P_ij dP_ij (= rowsum(dO o O)),  dS = P o (dP - D)
//   dQ = scale * dS K,  dK = scale * dS^T Q,  dK and dV of a kv head summed over its GQA group.
//
//   mode 0 (exact):  double everywhere.
//   mode 1 (naive same-dtype): standard attention's backward as a framework runs it in the input dtype,
//     matching reference.hpp's naive forward: S rounded to the dtype, P rounded to the dtype; every GEMM
//     accumulates in fp32 and rounds its result to the dtype (dV, dP, dQ, dK per head); D accumulated in
//     fp32; dS = P o (dP - D) computed in fp32 and rounded; the GQA group sum of the per-head dK, dV in
//     fp32, rounded once more. Its error against mode 0 is the yardstick for the library's error.
//
// Tensors are dense double arrays in [b, s, h, d] order (to_dense converts a flash_tensor), so the
// finite-difference checks can perturb inputs in double.
//
// Speed, as in reference.hpp, without changing a bit of any result: each row's visible keys are found once
// (Mask::row) for S and P; the dot products over e are formed a tile of keys at a time, as independent chains
// (dot_tile_bwd); every sum of rows (dQ_i, dK_j, dV_j and the sensitivities) is its list of terms in order, summed
// by add_rows. dP and dS are formed for every key, seen or not, as the definition has them (0 x dP_ij is not an
// exact 0 when dP_ij or D_i is inf or NaN).
//
// Input sensitivity (mode 0, when the O and LSE the backward was given are passed): a backward is handed
// the forward's O (rounded to the dtype, with the forward's error) and LSE (fp32), not the exact ones;
// no algorithm can undo that. dq_in, dk_in, dv_in bound, to first order and element by element, how much
// those given inputs move the exact gradients when P is recomputed from the given LSE and
// D = rowsum(dO o O) from the given O (FlashAttention's formulation):
//   dL_i = |LSE_given - LSE|,  dD_i = |rowsum(dO o O_given) - D_i|,
//   r_ij = dL_i + g_d scale |Q_i|.|K_j|                   (relative error of the recomputed P_ij)
//   t_ij = P_ij (r_ij (|dP_ij - D_i| + |D_i|) + dD_i + g_d (|dO_i|.|V_j| + |dO_i|.|O_i|))
//   dv_in = sum_i P_ij r_ij |dO_i|,  dq_in = scale sum_j t_ij |K_j|,  dk_in = scale sum_i t_ij |Q_i|.
// |D_i| covers D = rowsum(P o dP), as naive has it. The g_d terms are the worst-case fp32 rounding of a
// dot of d terms (g_d = d u32 / (1 - d u32), u32 = 2^-24) of the magnitudes behind the fp32 dots S_ij,
// dP_ij and D_i. (One rounding was not enough: a row with a single key, exact dS = 0, gave 2.08x that
// bound at d = 8 on the mma.sync and wgmma backward alike; seed 8288798731798789772, session 14.) They
// matter in fp32 only: there the recomputed S_ij - LSE_i (the LSE came from another summation) and, with
// D = rowsum(dO o O) (the fused formulation: P is never whole), dP_ij - D_i no longer cancel their
// roundings the way a materialised softmax does (exactly, for a row that sees a single key, where the
// exact dS is 0).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "reference.hpp"

namespace flash_ref {

// A packed [b, s, h, d] tensor of doubles.
struct Dense {
  int64_t b = 0, s = 0, h = 0, d = 0;
  std::vector<double> x;
  Dense() = default;
  Dense(int64_t b_, int64_t s_, int64_t h_, int64_t d_) : b(b_), s(s_), h(h_), d(d_), x(b_ * s_ * h_ * d_, 0.0) {}
  double& at(int64_t i, int64_t j, int64_t k, int64_t e) { return x[((i * s + j) * h + k) * d + e]; }
  double at(int64_t i, int64_t j, int64_t k, int64_t e) const { return x[((i * s + j) * h + k) * d + e]; }
  double* row(int64_t i, int64_t j, int64_t k) { return &x[((i * s + j) * h + k) * d]; }  // its d elements
};

inline Dense to_dense(const flash_tensor& t) {
  Dense r(t.shape[0], t.shape[1], t.shape[2], t.shape[3]);
  for (int64_t a = 0; a < r.b; ++a)
    for (int64_t b = 0; b < r.s; ++b)
      for (int64_t c = 0; c < r.h; ++c)
        for (int64_t e = 0; e < r.d; ++e) r.at(a, b, c, e) = load(t.data, t.dtype, offset4(t, a, b, c, e));
  return r;
}

struct Grads {
  Dense dq, dk, dv;
  // dq_empty[(b*sq + i)*hq + h]: row i of head h sees no key (its gradient must be exactly 0).
  // dk_unseen[(b*sk + j)*hkv + hk]: no query of the group sees key j (dk, dv exactly 0).
  std::vector<uint8_t> dq_empty, dk_unseen;
  Dense dq_in, dk_in, dv_in;  // input sensitivity (see the top of this file); zero when not asked for
};

// The exact forward O (mode 0 only): used by the finite-difference checks.
inline Dense forward_exact(const Problem& pr, const Dense& q, const Dense& k, const Dense& v) {
  const int64_t B = pr.batch, SQ = pr.seqlen_q, SK = pr.seqlen_k, H = pr.heads_q, D = pr.head_dim;
  const int64_t ratio = pr.heads_q / pr.heads_kv;
  const double inf = std::numeric_limits<double>::infinity();
  Dense o(B, SQ, H, D);
  std::vector<double> s(SK);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < SQ; ++i) {
        double mx = -inf;
        for (int64_t j = 0; j < SK; ++j) {
          if (!pr.mask.visible(b, h, i, j, SQ, SK)) { s[j] = -inf; continue; }
          double dot = 0;
          for (int64_t e = 0; e < D; ++e) dot += q.at(b, i, h, e) * k.at(b, j, h / ratio, e);
          s[j] = dot * pr.scale;
          mx = std::max(mx, s[j]);
        }
        if (mx == -inf) continue;
        double sum = 0;
        for (int64_t j = 0; j < SK; ++j) sum += (s[j] = s[j] == -inf ? 0.0 : std::exp(s[j] - mx));
        for (int64_t j = 0; j < SK; ++j)
          if (s[j] != 0.0)
            for (int64_t e = 0; e < D; ++e) o.at(b, i, h, e) += s[j] / sum * v.at(b, j, h / ratio, e);
      }
  return o;
}

// Keys whose dot products are formed together in the backward (reference.hpp, kTile): twice as many in mode 1,
// whose every step (an add and two conversions, double to float and back) is a longer dependency chain.
template <bool naive>
constexpr int64_t kTileBwd = naive ? 2 * kTile : kTile;

// dot[l] = sum_e a[e] rows[l][e] and (with mag) mag[l] = sum_e |a[e] rows[l][e]| for the kTileBwd rows at `rows`
// (row stride d), every sum in order over e; mode 1 accumulates in fp32 (each step's sum formed in double,
// rounded to float).
template <bool naive, bool with_mag>
inline void dot_tile_bwd(const double* a, const double* rows, int64_t d, double* dot, double* mag) {
  constexpr int64_t W = kTileBwd<naive>;
  Acc<naive> acc[W] = {};
  double m[W] = {};
  for (int64_t e = 0; e < d; ++e)
    for (int64_t l = 0; l < W; ++l) {
      const double x = a[e] * rows[l * d + e];
      acc[l] = static_cast<Acc<naive>>(acc[l] + x);
      if (with_mag) m[l] += std::fabs(x);
    }
  for (int64_t l = 0; l < W; ++l) {
    dot[l] = acc[l];
    if (with_mag) mag[l] = m[l];
  }
}

// Rows [0, t.s) of head h of batch b of t as a dense [t.s + pad][d] array, the pad rows 0 (reference.hpp, rows_of);
// absolute: their absolute values.
inline std::vector<double> rows_of(const Dense& t, int64_t b, int64_t h, int64_t pad, bool absolute = false) {
  std::vector<double> r((t.s + pad) * t.d, 0.0);
  for (int64_t j = 0; j < t.s; ++j)
    for (int64_t e = 0; e < t.d; ++e) r[j * t.d + e] = absolute ? std::fabs(t.at(b, j, h, e)) : t.at(b, j, h, e);
  return r;
}

// One (batch, KV head) pair of attention_backward (naive: mode 1), its query heads in order; every write lands in
// that pair's own rows of g.
template <bool naive>
inline void backward_pair(const Problem& pr, const Dense& q, const Dense& k, const Dense& v, const Dense& dout,
                          int32_t dtype, const Dense* o_given, const std::vector<double>* lse_given, bool sensitivity,
                          int64_t b, int64_t hk, Grads& g) {
  using A = Acc<naive>;
  const int64_t SQ = pr.seqlen_q, SK = pr.seqlen_k, H = pr.heads_q, HK = pr.heads_kv, D = pr.head_dim;
  const int64_t ratio = H / HK;
  const double inf = std::numeric_limits<double>::infinity();
  auto rnd = [&](double x) { return naive ? round_to(dtype, static_cast<float>(x)) : x; };  // result of an op
  auto f32 = [](double x) { return naive ? static_cast<double>(static_cast<float>(x)) : x; };  // fp32 accumulator
  // One fp32 rounding, and the worst-case rounding of an fp32 dot product of D terms (Higham's gamma_D =
  // D u / (1 - D u), about D u): the fused kernels' S, dP and D = rowsum(dO o O) are such dots, summed in
  // an order (tensor-core accumulation, the preprocess's loop) that no reference can reproduce.
  const double u32 = std::ldexp(1.0, -24);
  const double dot32 = static_cast<double>(D) * u32 / (1.0 - static_cast<double>(D) * u32);
  constexpr int64_t W = kTileBwd<naive>;
  const std::vector<double> K = rows_of(k, b, hk, W - 1), V = rows_of(v, b, hk, W - 1);
  const std::vector<double> absK = sensitivity ? rows_of(k, b, hk, 0, true) : std::vector<double>();
  std::vector<double> Q, dO, absQ, absdO;
  std::vector<double> P(SQ * SK), dP(SQ * SK), lse(SQ), dL(SQ), dD(SQ), t(sensitivity ? SQ * SK : 0),
      rel(sensitivity ? SQ * SK : 0);
  std::vector<A> acc(D), dk_h(SK * D), dv_h(SK * D);
  std::vector<double> dk_sum(SK * D, 0.0), dv_sum(SK * D, 0.0);
  double dot[W] = {}, mag[W] = {};
  Terms terms, terms2;
  for (int64_t h = hk * ratio; h < (hk + 1) * ratio; ++h) {
    Q = rows_of(q, b, h, 0), dO = rows_of(dout, b, h, 0);
    if (sensitivity) absQ = rows_of(q, b, h, 0, true), absdO = rows_of(dout, b, h, 0, true);
    // P (the forward's, as reference.hpp computes it in each mode); 0 outside the row's visible keys.
    std::fill(P.begin(), P.end(), 0.0);
    for (int64_t i = 0; i < SQ; ++i) {
      double* s = &P[i * SK];
      const Mask::Row m = pr.mask.row(b, h, i, SQ, SK);
      double mx = -inf;
      for (int64_t j0 = m.lo; j0 <= m.hi; j0 += W) {
        const int64_t n = std::min(W, m.hi + 1 - j0);
        bool any = false;
        for (int64_t l = 0; l < n; ++l) any = any || m.sees(j0 + l);
        if (any) {
          if (sensitivity) dot_tile_bwd<naive, true>(&Q[i * D], &K[j0 * D], D, dot, mag);
          else dot_tile_bwd<naive, false>(&Q[i * D], &K[j0 * D], D, dot, mag);
        }
        for (int64_t l = 0; l < n; ++l) {
          const int64_t j = j0 + l;
          if (!m.sees(j)) { s[j] = -inf; continue; }
          g.dk_unseen[(b * SK + j) * HK + hk] = 0;
          if (sensitivity) rel[i * SK + j] = dot32 * pr.scale * mag[l];
          s[j] = naive ? round_to(dtype, static_cast<float>(dot[l] * pr.scale)) : dot[l] * pr.scale;
          mx = std::max(mx, s[j]);
        }
      }
      lse[i] = -inf;
      if (mx == -inf) {
        g.dq_empty[(b * SQ + i) * H + h] = 1;
        std::fill(s, s + SK, 0.0);
        continue;
      }
      double sum = 0;
      for (int64_t j = m.lo; j <= m.hi; ++j) {
        s[j] = s[j] == -inf ? 0.0 : f32(std::exp(s[j] - mx));
        sum += s[j];
      }
      sum = f32(sum);
      lse[i] = mx + std::log(sum);
      for (int64_t j = m.lo; j <= m.hi; ++j) s[j] = s[j] == 0.0 ? 0.0 : rnd(s[j] / sum);
    }
    // dP = dO V^T, D = rowsum(P o dP), dS = P o (dP - D) (into dP), for every key: where P_ij = 0 too (its
    // 0 x dP_ij is an exact zero only while dP_ij and D_i are finite).
    for (int64_t i = 0; i < SQ; ++i) {
      const double* p = &P[i * SK];
      double* dp = &dP[i * SK];
      double Di = 0;
      for (int64_t j0 = 0; j0 < SK; j0 += W) {
        if (sensitivity) dot_tile_bwd<naive, true>(&dO[i * D], &V[j0 * D], D, dot, mag);
        else dot_tile_bwd<naive, false>(&dO[i * D], &V[j0 * D], D, dot, mag);
        for (int64_t j = j0; j < std::min(j0 + W, SK); ++j) {
          dp[j] = rnd(dot[j - j0]);
          if (sensitivity) t[i * SK + j] = mag[j - j0];  // |dO_i|.|V_j| until t is formed below
          Di = f32(Di + p[j] * dp[j]);
        }
      }
      if (sensitivity) {
        dL[i] = lse[i] == -inf ? 0.0 : std::fabs((*lse_given)[(b * H + h) * SQ + i] - lse[i]);
        double given_D = 0, D_mag = 0;
        for (int64_t e = 0; e < D; ++e) {
          given_D += dout.at(b, i, h, e) * o_given->at(b, i, h, e);
          D_mag += std::fabs(dout.at(b, i, h, e) * o_given->at(b, i, h, e));
        }
        dD[i] = lse[i] == -inf ? 0.0 : std::fabs(given_D - Di);
        for (int64_t j = 0; j < SK; ++j) {
          rel[i * SK + j] += dL[i];
          t[i * SK + j] = p[j] * (rel[i * SK + j] * (std::fabs(dp[j] - Di) + std::fabs(Di)) + dD[i] +
                                  dot32 * (t[i * SK + j] + D_mag));
        }
      }
      for (int64_t j = 0; j < SK; ++j) dp[j] = rnd(p[j] * (dp[j] - Di));
    }
    // The input sensitivities: dq_in_i += scale t_ij |K_j| over j, dk_in_j += scale t_ij |Q_i| and
    // dv_in_j += P_ij r_ij |dO_i| over i (the entries where t_ij or P_ij r_ij is not 0).
    if (sensitivity) {
      auto counts = [&](int64_t i, int64_t j) {
        return !(t[i * SK + j] == 0.0 && P[i * SK + j] * rel[i * SK + j] == 0.0);
      };
      for (int64_t i = 0; i < SQ; ++i) {
        terms.clear();
        for (int64_t j = 0; j < SK; ++j)
          if (counts(i, j)) terms.add(pr.scale * t[i * SK + j], &absK[j * D]);
        add_rows(g.dq_in.row(b, i, h), D, terms);
      }
      for (int64_t j = 0; j < SK; ++j) {
        terms.clear(), terms2.clear();
        for (int64_t i = 0; i < SQ; ++i)
          if (counts(i, j)) {
            terms.add(pr.scale * t[i * SK + j], &absQ[i * D]);
            terms2.add(P[i * SK + j] * rel[i * SK + j], &absdO[i * D]);
          }
        add_rows(g.dk_in.row(b, j, hk), D, terms);
        add_rows(g.dv_in.row(b, j, hk), D, terms2);
      }
    }
    // dQ = scale * dS K.
    for (int64_t i = 0; i < SQ; ++i) {
      terms.clear();
      for (int64_t j = 0; j < SK; ++j)
        if (dP[i * SK + j] != 0.0) terms.add(dP[i * SK + j], &K[j * D]);
      std::fill(acc.begin(), acc.end(), A(0));
      add_rows(acc.data(), D, terms);
      for (int64_t e = 0; e < D; ++e) g.dq.at(b, i, h, e) = rnd(acc[e] * pr.scale);
    }
    // This head's dK = scale * dS^T Q and dV = P^T dO, each summed over i in order.
    std::fill(dk_h.begin(), dk_h.end(), A(0));
    std::fill(dv_h.begin(), dv_h.end(), A(0));
    for (int64_t j = 0; j < SK; ++j) {
      terms.clear(), terms2.clear();
      for (int64_t i = 0; i < SQ; ++i) {
        if (dP[i * SK + j] != 0.0) terms.add(dP[i * SK + j], &Q[i * D]);
        if (P[i * SK + j] != 0.0) terms2.add(P[i * SK + j], &dO[i * D]);
      }
      add_rows(&dk_h[j * D], D, terms);
      add_rows(&dv_h[j * D], D, terms2);
    }
    for (int64_t x = 0; x < SK * D; ++x) {
      dk_sum[x] = f32(dk_sum[x] + rnd(dk_h[x] * pr.scale));
      dv_sum[x] = f32(dv_sum[x] + rnd(dv_h[x]));
    }
  }
  for (int64_t j = 0; j < SK; ++j)
    for (int64_t e = 0; e < D; ++e) {
      g.dk.at(b, j, hk, e) = ratio == 1 ? dk_sum[j * D + e] : rnd(dk_sum[j * D + e]);
      g.dv.at(b, j, hk, e) = ratio == 1 ? dv_sum[j * D + e] : rnd(dv_sum[j * D + e]);
    }
}

// Gradients of sum(O o dO) with respect to q, k, v. `dtype` is the one rounded to in mode 1.
// o_given / lse_given (lse [b, hq, sq] packed): the forward outputs the backward under test was given,
// for the input sensitivity (mode 0 only).
inline Grads attention_backward(const Problem& pr, const Dense& q, const Dense& k, const Dense& v, const Dense& dout,
                                int32_t dtype, int mode, const Dense* o_given = nullptr,
                                const std::vector<double>* lse_given = nullptr) {
  const int64_t B = pr.batch, SQ = pr.seqlen_q, SK = pr.seqlen_k, H = pr.heads_q, HK = pr.heads_kv, D = pr.head_dim;
  const bool naive = mode == 1;
  Grads g;
  g.dq = Dense(B, SQ, H, D);
  g.dk = Dense(B, SK, HK, D);
  g.dv = Dense(B, SK, HK, D);
  g.dq_empty.assign(B * SQ * H, 0);
  g.dk_unseen.assign(B * SK * HK, 1);
  g.dq_in = Dense(B, SQ, H, D);
  g.dk_in = Dense(B, SK, HK, D);
  g.dv_in = Dense(B, SK, HK, D);
  const bool sensitivity = !naive && o_given != nullptr && lse_given != nullptr;
  // One (batch, KV head) per task (reference.hpp, parallel_for): every write lands in that pair's own rows.
  parallel_for(B * HK, [&](int64_t pair) {
    const int64_t b = pair / HK, hk = pair % HK;
    if (naive) backward_pair<true>(pr, q, k, v, dout, dtype, o_given, lse_given, false, b, hk, g);
    else backward_pair<false>(pr, q, k, v, dout, dtype, o_given, lse_given, sensitivity, b, hk, g);
  });
  return g;
}

}  // namespace flash_ref
