// libflash/cuda/sm90/bwd/bwd_sm90.h -- the host side of the backward's wgmma main kernel (bwd_kernel.cuh; no CUDA
// headers): its instantiation table and launch. The family's plan (../../sm80/bwd/bwd.cpp) takes a row of it on
// sm_90 devices when the build has an sm_90a target (FLASH_BWD_WGMMA); the mma.sync kernel runs everything else.
#pragma once
#include <cstddef>
#include <cstdint>

#include "../../sm80/bwd/bwd.h"

namespace flash::bwd {

// 128 keys per CTA on two warpgroups (one per 64 keys), as the mma.sync kernel's 8 warps own them; block_m
// query rows per step: 64 at d128, 128 at d64 (where dQ splits its rows over the warpgroups instead of its
// columns). pipe: when step i's dQ = dS_i K is computed and added --
//   1  in step i+1, at its top, in front of S^T and dP^T (its adds run while those are on the tensor cores),
//   2  in step i+1, after dS^T, in front of dK (its adds run while dK is on the tensor cores; fewer live registers),
//   0  in step i itself, after a second CTA barrier: deterministic mode, whose counters order the adds per step.
// d64 takes 1 and d128 takes 2, each the faster there (H100; docs/kernels.md). Each row is instantiated for fp16
// and bf16 (generate_kernels.py, family SM90_BWD).
struct WgmmaBwdShape {
  int head_dim;
  int block_m;
  int pipe;
  // K, V; Q, dO (two stages); dS^T (two buffers with a pipe); LSE2, D (two stages); a varlen sequence's bounds (32);
  // d64 with a pipe, the dQ tile (fp32) of its bulk reduce-adds; + 1024 to align the base.
  constexpr size_t smem_bytes() const {
    return size_t(2) * 128 * head_dim * 2 + size_t(2) * 2 * block_m * head_dim * 2 +
           size_t(pipe ? 2 : 1) * 128 * block_m * 2 + size_t(2) * 2 * block_m * 4 + 32 +
           (dq_bulk() ? size_t(block_m) * head_dim * 4 : 0) + 1024;
  }
  // dQ out as bulk reduce-adds from a shared tile: d64 with a pipe (bwd_kernel.cuh: dq_bulk; d128 stays on red.global,
  // 0.96x with it on the H200).
  constexpr bool dq_bulk() const { return pipe != 0 && head_dim == 64; }
};

// clang-format off
inline constexpr WgmmaBwdShape kWgmmaBwdShapes[] = {
  //  d  block_m pipe
  {  64, 128,    1 },
  {  64, 128,    0 },
  { 128,  64,    2 },
  { 128,  64,    0 },
};
// clang-format on
inline constexpr int kWgmmaBwdShapeCount = int(sizeof(kWgmmaBwdShapes) / sizeof(kWgmmaBwdShapes[0]));

// The row for a compiled head dim: the pipelined dQ, or the in-step one in deterministic mode; -1 if none.
constexpr int wgmma_bwd_row(int head_dim, bool deterministic) {
  for (int i = 0; i < kWgmmaBwdShapeCount; ++i)
    if (kWgmmaBwdShapes[i].head_dim == head_dim && (kWgmmaBwdShapes[i].pipe == 0) == deterministic) return i;
  return -1;
}

constexpr WgmmaBwdShape wgmma_bwd_shape(int head_dim, int pipe) {
  for (const WgmmaBwdShape& s : kWgmmaBwdShapes)
    if (s.head_dim == head_dim && s.pipe == pipe) return s;
  return WgmmaBwdShape{0, 0, 0};
}

template <int kHeadDim, int kPipe, DType kDType>
int32_t launch_bwd_sm90(const BwdParams& p, const BwdPlan& plan);

}  // namespace flash::bwd
