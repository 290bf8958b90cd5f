// libflash/cpu/key_block.h -- one key block K_j, V_j through FlashAttention's backward (flash_cpu.cpp's bwd_item):
// per query tile Q_i, dO_i (one query head's rows of a query block), with c = |scale| log2(e),
//   S  = sign(scale) Q_i K_j^T              the forward's S bit for bit (the same product in the same type)
//   P  = 2^(S c - LSE_i log2(e))            0 where masked and past the block's keys
//   dV_j += P^T dO_i
//   dP = dO_i V_j^T,  dS = P o (dP - D_i)
//   dK_j += dS^T Q_i                        (times scale when written)
//   dQ tile = dS K_j                         (times scale at the very end: flash_cpu.cpp)
// The five products run on kernels.h's tile kernels; dK_j and dV_j stay here, fp32, for the item's whole life.
// Types as in query_block.h: SA = ScoreType<T> (fp32 products, S summed in double for fp32 inputs) or Bf16Dot
// (bf16 inputs on AVX512-BF16: every product on vdpbf16ps, P and dS rounded to bf16 for theirs, as the GPU
// kernels and the baseline do).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "convert.h"
#include "kernels.h"
#include "query_block.h"

namespace flash::cpu {

template <DType T, class SA>
class KeyBlockGrads {
  using St = typename Elem<T>::storage;
  static constexpr bool kBf16 = std::is_same_v<SA, Bf16Dot>;
  static_assert(!kBf16 || T == DType::BF16, "bf16 products take bf16 inputs");

 public:
  // A key block of `keys` keys (at most block_n), head_dim d, query tiles of at most block_m rows.
  void begin(const Kernels& k, int d, int block_m, int block_n, int keys, float scale) {
    kern_ = &k;
    if constexpr (kBf16) bf16_ = bf16_kernels();
    d_ = d, keys_ = keys;
    sign_ = scale < 0 ? -1.0f : 1.0f;
    c_ = log2_scale(std::fabs(static_cast<double>(scale)));
    dp_ = static_cast<int>(round_up(d, kVec));
    ldn_ = static_cast<int>(round_up(block_n, kVec));
    rows_cap_ = block_m, half_n_ = (block_n + 1) / 2;
    const size_t bm = size_t(block_m), bn = size_t(block_n), half_m = (bm + 1) / 2, half_n = size_t(half_n_);
    // In floats; every array starts on a 64-byte boundary (dp and ldn are multiples of 16, d of 8, the blocks 64 or
    // 128). K_j^T and V_j^T; K_j's rows (B of dQ); Q_i's and dO_i's rows (A of S and dP; B of dK and dV).
    size_t kt, vt, kr, qr;
    if constexpr (kBf16) {
      kt = vt = size_t(d / 2) * ldn_;               // bf16 pairs along d
      kr = half_n * dp_ + bn * d / 2;               // K_j paired along keys; K_j's rows as they are
      qr = bm * d / 2 + half_m * dp_;               // rows as they are; paired along queries
    } else {
      kt = size_t(d) * ldn_ * sizeof(SA) / 4, vt = size_t(d) * ldn_;  // K_j^T in SA, V_j^T in fp32
      kr = bn * dp_;
      qr = bm * d * sizeof(SA) / 4 + bm * dp_;     // Q_i in SA (A of S), in fp32 (B of dK); dO_i likewise
    }
    const size_t pairs = kBf16 ? half_m * ldn_ + bm * ldn_ / 2 : 0;  // P, dS paired along queries; dS in bf16
    float* base = buf_.get(kt + vt + kr + 2 * qr + 2 * bm * ldn_ + 2 * bn * dp_ + 3 * bm + 2 * pairs);
    kt_ = base, vt_ = kt_ + kt, kr_ = vt_ + vt, q_ = kr_ + kr, do_ = q_ + qr;
    s_ = do_ + qr, ds_ = s_ + bm * ldn_, dk_ = ds_ + bm * ldn_, dv_ = dk_ + bn * dp_;
    lse_hi_ = dv_ + bn * dp_, lse_lo_ = lse_hi_ + bm, D_ = lse_lo_ + bm;
    pp_ = reinterpret_cast<uint32_t*>(D_ + bm), pds_ = pp_ + pairs;
    std::fill(kt_, kt_ + kt + vt, 0.0f);  // zero past the block's keys (all-zero bits are 0 in every type here)
    std::fill(dk_, dk_ + 2 * bn * dp_, 0.0f);
  }

  int padded_dim() const { return dp_; }

  // Key row c of K_j and V_j (d elements of the inputs' dtype each); keys_done() once all are set.
  void set_key(int c, const St* k, const St* v) {
    if constexpr (kBf16) {
      uint32_t* kt = reinterpret_cast<uint32_t*>(kt_);
      uint32_t* vt = reinterpret_cast<uint32_t*>(vt_);
      for (int t = 0; t < d_ / 2; ++t) {
        std::memcpy(&kt[size_t(t) * ldn_ + c], k + 2 * t, 4);
        std::memcpy(&vt[size_t(t) * ldn_ + c], v + 2 * t, 4);
      }
      std::memcpy(key_rows() + size_t(c) * d_, k, sizeof(St) * d_);
    } else {
      float* row = kr_ + size_t(c) * dp_;  // K_j's row, zero past d
      load_row<T>(*kern_, k, d_, dp_, row);
      SA* kt = reinterpret_cast<SA*>(kt_);
      for (int e = 0; e < d_; ++e) kt[size_t(e) * ldn_ + c] = row[e];
      float* vrow = ds_;  // free until the first tile
      load_row<T>(*kern_, v, d_, dp_, vrow);
      for (int e = 0; e < d_; ++e) vt_[size_t(e) * ldn_ + c] = vrow[e];
    }
  }
  void keys_done() {
    if constexpr (kBf16) {
      const uint16_t* rows = key_rows();
      for (int t = 0; t < (keys_ + 1) / 2; ++t)
        bf16_->pair_rows_bf16(rows + size_t(2 * t) * d_, 2 * t + 1 < keys_ ? rows + size_t(2 * t + 1) * d_ : nullptr,
                              d_, dp_, reinterpret_cast<uint32_t*>(kr_) + size_t(t) * dp_);
    }
  }

  // Query row r of the next tile: Q_i's and dO_i's rows, the forward's LSE and D = rowsum(dO o O).
  void set_query(int r, const St* q, const St* dO, float lse, float D) {
    if constexpr (kBf16) {
      std::memcpy(reinterpret_cast<uint16_t*>(q_) + size_t(r) * d_, q, sizeof(St) * d_);
      std::memcpy(reinterpret_cast<uint16_t*>(do_) + size_t(r) * d_, dO, sizeof(St) * d_);
    } else {
      float* qrow = q_ + qs_floats() + size_t(r) * dp_;
      load_row<T>(*kern_, q, d_, dp_, qrow);
      std::copy(qrow, qrow + d_, reinterpret_cast<SA*>(q_) + size_t(r) * d_);
      load_row<T>(*kern_, dO, d_, dp_, do_ + qs_floats() + size_t(r) * dp_);
    }
    // LSE log2(e) as hi + lo, so S c - LSE log2(e) loses nothing to the conversion; a row that saw no key: P = 0.
    if (lse == -std::numeric_limits<float>::infinity()) {
      lse_hi_[r] = std::numeric_limits<float>::infinity(), lse_lo_[r] = 0.0f;
    } else {
      const double lse2 = double(lse) * 1.4426950408889634;
      lse_hi_[r] = static_cast<float>(lse2);
      lse_lo_[r] = static_cast<float>(lse2 - double(lse_hi_[r]));
    }
    D_[r] = D;
  }

  // The tile's products, for its `rows` queries from q_begin against the block's keys from k_begin; a window
  // given means the tile is partly masked. Writes the dQ tile (unscaled) to dq [rows][padded_dim()].
  void tile(int rows, int64_t q_begin, int64_t k_begin, const Window* window, float* dq) {
    const Kernels& kn = *kern_;
    const int d = d_, dp = dp_, ldn = ldn_, keys = keys_;
    // S = sign(scale) Q_i K_j^T.
    if constexpr (kBf16) {
      run_bf16(rows, ldn, d / 2, reinterpret_cast<const uint32_t*>(q_), d / 2, 1, reinterpret_cast<uint32_t*>(kt_), ldn,
               s_, ldn, Epilogue::kStore, sign_);
    } else {
      GemmOf<SA, float> g;
      g.m = rows, g.n = ldn, g.k = d;
      g.a = reinterpret_cast<const SA*>(q_), g.a_rs = d, g.a_ks = 1;
      g.b = reinterpret_cast<const SA*>(kt_), g.ldb = ldn;
      g.c = s_, g.ldc = ldn;
      g.epilogue = Epilogue::kStore, g.alpha = sign_;
      if constexpr (std::is_same_v<SA, double>) kn.scores_f64(g);
      else kn.gemm(g);
    }
    // Masked scores and the padding keys past the block: -inf, so P = 0 there.
    const int64_t k_end = k_begin + keys;
    for (int r = 0; r < rows; ++r) {
      int64_t lo = k_begin, hi = k_end;
      if (window) window->keys_seen(q_begin + r, k_begin, k_end, &lo, &hi);
      if (hi <= lo) lo = hi = k_begin;
      float* sr = s_ + size_t(r) * ldn;
      std::fill(sr, sr + (lo - k_begin), -std::numeric_limits<float>::infinity());
      std::fill(sr + (hi - k_begin), sr + ldn, -std::numeric_limits<float>::infinity());
    }
    kn.probabilities(s_, ldn, rows, ldn, c_, lse_hi_, lse_lo_);  // P = 2^(S c - LSE log2(e))

    if constexpr (kBf16) {
      // Rows of P, dS, Q_i, dO_i paired along queries (the k of dV's and dK's products); dS in bf16 for dQ's.
      const int half = (rows + 1) / 2;
      const uint16_t* qrows = reinterpret_cast<const uint16_t*>(q_);
      const uint16_t* dorows = reinterpret_cast<const uint16_t*>(do_);
      uint32_t* q_pairs = reinterpret_cast<uint32_t*>(q_) + size_t(rows_cap()) * d / 2;
      uint32_t* do_pairs = reinterpret_cast<uint32_t*>(do_) + size_t(rows_cap()) * d / 2;
      for (int u = 0; u < half; ++u) {
        const bool two = 2 * u + 1 < rows;
        bf16_->pair_rows_f32(s_ + size_t(2 * u) * ldn, two ? s_ + size_t(2 * u + 1) * ldn : nullptr, ldn,
                             pp_ + size_t(u) * ldn);
        bf16_->pair_rows_bf16(qrows + size_t(2 * u) * d, two ? qrows + size_t(2 * u + 1) * d : nullptr, d, dp,
                              q_pairs + size_t(u) * dp);
        bf16_->pair_rows_bf16(dorows + size_t(2 * u) * d, two ? dorows + size_t(2 * u + 1) * d : nullptr, d, dp,
                              do_pairs + size_t(u) * dp);
      }
      // dV_j += P^T dO_i
      run_bf16(keys, dp, half, pp_, 1, ldn, do_pairs, dp, dv_, dp, Epilogue::kAdd, 1.0f);
      // dP = dO_i V_j^T, dS = P o (dP - D)
      run_bf16(rows, ldn, d / 2, reinterpret_cast<const uint32_t*>(do_), d / 2, 1, reinterpret_cast<uint32_t*>(vt_), ldn,
               ds_, ldn, Epilogue::kStore, 1.0f);
      kn.softmax_grad(ds_, s_, ldn, rows, ldn, D_);
      uint16_t* ds16 = reinterpret_cast<uint16_t*>(pds_ + size_t(half) * ldn);
      for (int u = 0; u < half; ++u)
        bf16_->pair_rows_f32(ds_ + size_t(2 * u) * ldn, 2 * u + 1 < rows ? ds_ + size_t(2 * u + 1) * ldn : nullptr, ldn,
                             pds_ + size_t(u) * ldn);
      for (int r = 0; r < rows; ++r) bf16_->round_row_f32(ds_ + size_t(r) * ldn, ldn, ds16 + size_t(r) * ldn);
      // dK_j += dS^T Q_i
      run_bf16(keys, dp, half, pds_, 1, ldn, q_pairs, dp, dk_, dp, Epilogue::kAdd, 1.0f);
      // dQ tile = dS K_j
      run_bf16(rows, dp, (keys + 1) / 2, reinterpret_cast<const uint32_t*>(ds16), ldn / 2, 1,
               reinterpret_cast<uint32_t*>(kr_), dp, dq, dp, Epilogue::kStore, 1.0f);
    } else {
      const float* qp = q_ + qs_floats();   // Q_i's rows, fp32
      const float* dop = do_ + qs_floats();  // dO_i's rows
      Gemm g;  // dV_j += P^T dO_i
      g.m = keys, g.n = dp, g.k = rows;
      g.a = s_, g.a_rs = 1, g.a_ks = ldn;
      g.b = dop, g.ldb = dp;
      g.c = dv_, g.ldc = dp;
      g.epilogue = Epilogue::kAdd;
      kn.gemm(g);
      g = Gemm{};  // dP = dO_i V_j^T
      g.m = rows, g.n = ldn, g.k = d;
      g.a = dop, g.a_rs = dp, g.a_ks = 1;
      g.b = vt_, g.ldb = ldn;
      g.c = ds_, g.ldc = ldn;
      kn.gemm(g);
      kn.softmax_grad(ds_, s_, ldn, rows, ldn, D_);  // dS = P o (dP - D)
      g = Gemm{};  // dK_j += dS^T Q_i
      g.m = keys, g.n = dp, g.k = rows;
      g.a = ds_, g.a_rs = 1, g.a_ks = ldn;
      g.b = qp, g.ldb = dp;
      g.c = dk_, g.ldc = dp;
      g.epilogue = Epilogue::kAdd;
      kn.gemm(g);
      g = Gemm{};  // dQ tile = dS K_j
      g.m = rows, g.n = dp, g.k = keys;
      g.a = ds_, g.a_rs = ldn, g.a_ks = 1;
      g.b = kr_, g.ldb = dp;
      g.c = dq, g.ldc = dp;
      kn.gemm(g);
    }
  }

  // After the last tile: dK_j (unscaled) and dV_j, element e of key c.
  float dk(int c, int e) const { return dk_[size_t(c) * dp_ + e]; }
  float dv(int c, int e) const { return dv_[size_t(c) * dp_ + e]; }

 private:
  // Floats before the fp32 copy of the Q_i / dO_i rows in q_ / do_ (the SA copy of Q_i, or dO_i's unused one).
  size_t qs_floats() const { return size_t(rows_cap_) * d_ * sizeof(SA) / 4; }
  int rows_cap() const { return rows_cap_; }
  uint16_t* key_rows() { return reinterpret_cast<uint16_t*>(reinterpret_cast<uint32_t*>(kr_) + size_t(half_n_) * dp_); }
  void run_bf16(int m, int n, int k, const uint32_t* a, int64_t a_rs, int64_t a_ks, const uint32_t* b, int64_t ldb,
                float* c, int64_t ldc, Epilogue e, float alpha) const {
    GemmOf<uint32_t, float> g;
    g.m = m, g.n = n, g.k = k;
    g.a = a, g.a_rs = a_rs, g.a_ks = a_ks;
    g.b = b, g.ldb = ldb;
    g.c = c, g.ldc = ldc;
    g.epilogue = e, g.alpha = alpha;
    bf16_->gemm(g);
  }

  const Kernels* kern_ = nullptr;
  const Bf16Kernels* bf16_ = nullptr;
  Scratch buf_;
  int d_ = 0, keys_ = 0, dp_ = 0, ldn_ = 0, rows_cap_ = 0, half_n_ = 0;
  float sign_ = 1.0f;
  Log2Scale c_{};
  float *kt_ = nullptr, *vt_ = nullptr, *kr_ = nullptr, *q_ = nullptr, *do_ = nullptr;
  float *s_ = nullptr, *ds_ = nullptr, *dk_ = nullptr, *dv_ = nullptr;
  float *lse_hi_ = nullptr, *lse_lo_ = nullptr, *D_ = nullptr;
  uint32_t *pp_ = nullptr, *pds_ = nullptr;
};

}  // namespace flash::cpu
