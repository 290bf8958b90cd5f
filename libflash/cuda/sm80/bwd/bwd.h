// libflash/cuda/sm80/bwd/bwd.h -- the host side of the backward family (no CUDA headers): FlashAttention-2's
// backward with mma.sync (bwd_kernel.cuh, every target) and its wgmma main kernel on sm_90 (../../sm90/bwd).
// Its plan picks one; the entry points below are the backward of both the sm80 and the sm90 Algorithm records.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "../../../params.h"
#include "../../ptx/plan.h"

namespace flash::bwd {

// Tile shapes of the mma.sync main kernel (shared by the host code and the kernels), one per compiled head
// dim; each is instantiated for fp16 and bf16 (generate_kernels.py, family SM80_BWD). One CTA of 8 warps per
// SM: 4 warps x 64 keys with two CTAs per SM measured 10-25% slower on the H100 (docs/kernels.md).
struct BwdShape {
  int head_dim;   // compiled head dim (a smaller multiple of 8 runs with zero-filled columns)
  int block_m;    // query rows per step of the main loop
  int block_n;    // key rows per CTA (16 per warp, or per pair of warps when split_d = 2)
  int warps;
  int split_d;    // warps sharing 16 key rows, each accumulating dK/dV for head_dim / split_d columns
  int q_stages;   // Q/dO buffers: 2 = the next query block loads during this one
  int dq_cols;    // columns of a dQ work item (16 rows x dq_cols per warp at a time)
  constexpr size_t smem_bytes() const {
    return size_t(2) * block_n * head_dim * 2 + size_t(q_stages) * (2 * block_m * head_dim * 2 + 2 * block_m * 4) +
           size_t(block_n) * block_m * 2 + 32;  // + a varlen sequence's bounds
  }
};

// clang-format off
inline constexpr BwdShape kBwdShapes[] = {
  //  d  block_m block_n warps split_d q_stages dq_cols
  {  64,  64,     128,    8,    1,      2,       64 },
  { 128,  64,     128,    8,    1,      2,       64 },
  { 256,  64,      64,    8,    2,      1,       64 },
};
// clang-format on
inline constexpr int kBwdShapeCount = int(sizeof(kBwdShapes) / sizeof(kBwdShapes[0]));

constexpr int bwd_compiled_head_dim(int d) { return d <= 0 ? 0 : d <= 64 ? 64 : d <= 128 ? 128 : d <= 256 ? 256 : 0; }
constexpr int bwd_shape_index(int d) {
  for (int i = 0; i < kBwdShapeCount; ++i)
    if (kBwdShapes[i].head_dim == d) return i;
  return -1;
}
constexpr BwdShape bwd_shape(int d) {
  const int i = bwd_shape_index(d);
  return i >= 0 ? kBwdShapes[i] : BwdShape{0, 0, 0, 0, 0, 0, 0};
}

// Workspace layout (bytes from p.workspace), the same for both main kernels.
//   dq_acc fp32 [b * hq][sq_pad][dc]     the dQ accumulator (atomics), zeroed by the preprocess; the sm90 pipelined
//                                        kernel at d64 keeps each tile of block_m rows in its accumulators' order
//                                        (sm90/bwd/bwd_kernel.cuh: dq_bulk; bwd_common.cuh: bwd_convert_dq_frag)
//   lse2   fp32 [b * hq][sq_pad]         LSE * log2(e); +inf for rows that see no key and for padding
//   dsum   fp32 [b * hq][sq_pad]         D = rowsum(dO o O)
//   sem    int32 [b * hq][sq_pad / 64]   deterministic mode: how many key blocks have added into a query block
//   bmap   uint8 [mb][mh][n_qb][n_kb]    block-sparse mask as a dense byte map (built from the compact lists)
// sq_pad = seqlen_q (varlen: max_seqlen_q) rounded up to 128. A varlen call's dq_acc, lse2 and dsum are instead
// [hq][ws_head] rows, ws_head = total_q + 128 * batch rounded up to 128 (FlashAttention-2's padded total): sequence b's
// rows start at floor128(cu_seqlens_q[b]) + 128 b (bwd_common.cuh, ws_row), at least 128 rows past the previous
// sequence's start plus its length, and its padded rows (at most ceil128(seqlen_q)) end before ws_head for any
// clamped offsets. Its counters stay per (sequence, head): [b * hq][sq_pad / 64], never addressed through an offset.
struct WsLayout {
  size_t dq_acc = 0, lse2 = 0, dsum = 0, sem = 0, bmap = 0, total = 0;
  int64_t sq_pad = 0;
  int64_t ws_head = 0;  // rows between heads of dq_acc, lse2, dsum (dense: sq_pad, by batch then head)
  int dc = 0;
  int bm_b = 0, bm_h = 0, n_mqb = 0, n_mkb = 0;
};
WsLayout ws_layout(const BwdParams& p);

// What runs a backward call: the main kernel (mma.sync or wgmma), the row of its instantiation table, and the
// workspace layout. The preprocess and convert kernels around it are the same for both.
enum class MainKernel { kMma, kWgmma };
struct BwdPlan {
  MainKernel kernel = MainKernel::kMma;
  int row = -1;     // kBwdShapes (kMma) or kWgmmaBwdShapes (kWgmma, ../../sm90/bwd/bwd_sm90.h); -1: none runs it
  WsLayout ws;
  bool ok() const { return row >= 0; }
};

// The one place the main kernel is chosen: supports(), workspace() and run() all call it.
BwdPlan plan(const BwdParams& p, const cuda::DeviceLimits& dev, std::string* why = nullptr);

bool supports(const BwdParams& p, std::string* why);
size_t workspace(const BwdParams& p);
int32_t run(const BwdParams& p);

// One instantiation per (kBwdShapes head dim, dtype), each in its own generated .cu file.
template <int kHeadDim, DType kDType>
int32_t launch_bwd(const BwdParams& p, const BwdPlan& plan);

}  // namespace flash::bwd
