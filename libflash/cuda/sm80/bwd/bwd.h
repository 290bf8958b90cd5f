// libflash/cuda/sm80/bwd/bwd.h -- the host entry points of the sm80 backward (FlashAttention-2's backward
// with mma.sync), registered in the sm80 Algorithm record (libflash/cuda/sm80/sm80.cpp). No CUDA headers.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "../../../params.h"

namespace flash::bwd {

bool supports(const BwdParams& p, std::string* why);
size_t workspace(const BwdParams& p);
int32_t run(const BwdParams& p);

// One instantiation per (compiled head dim, dtype), each in its own bwd_hdim*_*.cu.
template <int kHeadDim, int kVariant, DType kDType>
int32_t launch_bwd(const BwdParams& p);
// The wgmma main kernel (bwd_kernel_sm90.cuh; sm_90a builds only): head dims 64 and 128 on sm_90 devices.
template <int kHeadDim, int kBlockM, int kWGs, bool kBulkDQ, bool kOverlap, DType kDType, int kPipe, bool kRed>
int32_t launch_bwd_sm90(const BwdParams& p);

// Tile shapes of the mma.sync main kernel (shared by the host code and the kernels). The wgmma main kernel
// on sm_90 (bwd_kernel_sm90.cuh, BwdTraits90) uses 128 keys per CTA as well, 64 query rows per step at d128
// and 128 at d64; its shared memory (v5, two dS^T buffers: ~162 KB at d64 and d128; 131-146 KB with one, in
// deterministic mode) fits every sm_90 device (227 KB).
struct BwdShape {
  int head_dim;
  int variant;    // 0: 8 warps, one CTA per SM; 1: 4 warps, two CTAs per SM   // compiled head dim (a smaller multiple of 8 runs with zero-filled columns)
  int block_m;    // query rows per step of the main loop
  int block_n;    // key rows per CTA (16 per warp, or per pair of warps when split_d = 2)
  int warps;
  int split_d;    // warps sharing 16 key rows, each accumulating dK/dV for head_dim / split_d columns
  int q_stages;   // Q/dO buffers: 2 = the next query block loads during this one
  int dq_cols;    // columns of a dQ work item (16 rows x dq_cols per warp at a time)
  constexpr size_t smem_bytes() const {
    return size_t(2) * block_n * head_dim * 2 + size_t(q_stages) * (2 * block_m * head_dim * 2 + 2 * block_m * 4) +
           size_t(block_n) * block_m * 2;
  }
};

// clang-format off
inline constexpr BwdShape kBwdShapes[] = {
  //  d  var block_m block_n warps split_d q_stages dq_cols
  {  64,  0,  64,     128,    8,    1,      2,       64 },
  {  64,  1,  64,      64,    4,    1,      2,       64 },
  { 128,  0,  64,     128,    8,    1,      2,       64 },
  { 128,  1,  64,      64,    4,    1,      2,       64 },
  { 256,  0,  64,      64,    8,    2,      1,       64 },
};
// clang-format on

constexpr BwdShape bwd_shape(int d, int variant = 0) {
  for (const BwdShape& s : kBwdShapes)
    if (s.head_dim == d && s.variant == variant) return s;
  return BwdShape{0, 0, 0, 0, 0, 0, 0, 0};
}
constexpr int bwd_compiled_head_dim(int d) { return d <= 0 ? 0 : d <= 64 ? 64 : d <= 128 ? 128 : d <= 256 ? 256 : 0; }

}  // namespace flash::bwd

namespace flash::bwd {

// Workspace layout (bytes from p.workspace), shared by workspace() and the launch.
//   dq_acc fp32 [b * hq][sq_pad][dc]     the dQ accumulator (atomics), zeroed by the preprocess
//   lse2   fp32 [b * hq][sq_pad]         LSE * log2(e); +inf for rows that see no key and for padding
//   dsum   fp32 [b * hq][sq_pad]         D = rowsum(dO o O)
//   sem    int32 [b * hq][sq_pad / 64]   deterministic mode: how many key blocks have added into a query block
//   bmap   uint8 [mb][mh][n_qb][n_kb]    block-sparse mask as a dense byte map (built from the compact lists)
struct WsLayout {
  size_t dq_acc = 0, lse2 = 0, dsum = 0, sem = 0, bmap = 0, total = 0;
  int64_t sq_pad = 0;
  int dc = 0;
  int bm_b = 0, bm_h = 0, n_mqb = 0, n_mkb = 0;
};

inline WsLayout ws_layout(const BwdParams& p) {
  WsLayout w;
  auto align = [](size_t x) { return (x + 255) / 256 * 256; };
  w.dc = bwd_compiled_head_dim(p.head_dim);
  w.sq_pad = (int64_t(p.seqlen_q > 0 ? p.seqlen_q : 1) + 127) / 128 * 128;
  const size_t bh = size_t(p.batch) * size_t(p.heads_q);
  size_t off = 0;
  w.dq_acc = off, off = align(off + bh * size_t(w.sq_pad) * size_t(w.dc) * 4);
  w.lse2 = off, off = align(off + bh * size_t(w.sq_pad) * 4);
  w.dsum = off, off = align(off + bh * size_t(w.sq_pad) * 4);
  w.sem = off;
  if (p.deterministic) off = align(off + bh * size_t(w.sq_pad / 64) * 4);
  w.bmap = off;
  if (p.has_block_mask) {
    const BlockMaskParams& m = p.block_mask;
    w.bm_b = (m.num_batch_stride == 0 && m.idx_batch_stride == 0) ? 1 : p.batch;
    w.bm_h = (m.num_head_stride == 0 && m.idx_head_stride == 0) ? 1 : p.heads_q;
    w.n_mqb = m.num_q_blocks;
    w.n_mkb = int((int64_t(p.seqlen_k) + m.block_n - 1) / m.block_n);
    off = align(off + size_t(w.bm_b) * w.bm_h * w.n_mqb * w.n_mkb);
  }
  w.total = off;
  return w;
}

}  // namespace flash::bwd
