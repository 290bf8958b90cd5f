// libflash/cuda/sm80/tile_table.h -- the one table of tile shapes of the sm80 forward kernel.
//
// Starting point, the FlashAttention paper (Algorithm 1): with M bytes of on-chip memory, key blocks of
// B_c = M / (4 d) rows and query blocks of B_r = min(B_c, d) rows fill it. On sm_80+ M is large (163 KB
// A100, 227 KB H100 per block), so that rule asks for blocks of 200+ rows and the binding limit becomes
// the register file instead: each warp owns (block_m / warps) query rows and keeps their O accumulator
// in registers, (block_m / warps) * d / 32 fp32 per thread, plus the S tile, (block_m / warps) *
// block_n / 32. We keep both under ~200 registers (no spills, 2 CTAs per SM where shared memory allows,
// so one CTA's softmax hides the other's loads). The shapes below are the tuned result; each entry says
// why. The kernel uses (block_m + 2 * block_n) * d * 2 bytes of shared memory (Q once, one K and one V
// buffer, cp.async overlapping the V load with QK^T and the next K load with softmax and PV).
//
// A head dim has a preferred shape (variant 0) and, where that needs more shared memory than the
// smallest sm_80+ part offers per block (99 KB on sm_86/sm_89), a fallback (variant 1). At run time
// pick_variant() takes the first shape that fits cudaDevAttrMaxSharedMemoryPerBlockOptin, so a new GPU
// gets a working choice from its reported shared memory with no code change.
#pragma once

namespace flash::sm80 {

struct TileShape {
  int head_dim;  // compiled head dim (a call with a smaller multiple of 8 runs with zero-filled columns)
  int variant;   // 0 preferred, 1 small-shared-memory fallback
  int block_m;   // query rows per CTA
  int block_n;   // key rows per step of the main loop
  int warps;     // block_m / warps query rows per warp: 16 or 32 (1 or 2 m16 MMA tiles)
  int stages;    // K/V buffers: 1 = FA2's schedule, 2 = K_{j+1}, V_{j+1} loaded during all of step j

  constexpr int smem_bytes() const { return (block_m + 2 * stages * block_n) * head_dim * 2; }
};

// clang-format off
inline constexpr TileShape kTileTable[] = {
  // d    var  block_m block_n warps stages  why
  {  32,  0,   128,    128,    4,    1 },  // tiny O (32 regs); wide key block halves the loop trips and softmax overheads. 24 KB.
  {  64,  0,   128,    128,    4,    1 },  // FA2's sm80 choice: S 64 + O 64 fp32 regs/thread; 128x64 tried: more loop overhead. 48 KB.
  {  96,  0,   128,    64,     4,    1 },  // O 96 + S 32 regs; a 128-key block would push past 255 registers. 48 KB.
  { 128,  0,   128,    64,     4,    1 },  // FA2's sm80 choice: O 128 + S 64 regs, 32 rows/warp halve K/V smem reads per MMA. 64 KB, 2 CTAs/SM.
  { 192,  0,   128,    64,     8,    1 },  // 16 rows/warp keep O at 96 regs; 8 warps keep 128 query rows per K/V load. 96 KB.
  { 256,  0,   128,    64,     8,    1 },  // O 128 regs at 16 rows/warp. 128 KB: fits sm_80 (163 KB) and sm_90 (227 KB).
  { 256,  1,    64,    64,     4,    1 },  // fallback for 99 KB parts (sm_86/sm_89): 96 KB.
};
// clang-format on

inline constexpr int kCompiledHeadDims[] = {32, 64, 96, 128, 192, 256};

constexpr TileShape tile_shape(int head_dim, int variant) {
  for (const TileShape& t : kTileTable)
    if (t.head_dim == head_dim && t.variant == variant) return t;
  return TileShape{0, 0, 0, 0, 0, 0};
}

// Smallest compiled head dim >= d; 0 if none.
constexpr int compiled_head_dim(int d) {
  for (int c : kCompiledHeadDims)
    if (c >= d) return c;
  return 0;
}

// The variant to run for a compiled head dim with this much opt-in shared memory per block; -1 if none fits.
constexpr int pick_variant(int head_dim, long long smem_optin) {
  for (int v = 0; v < 2; ++v) {
    const TileShape t = tile_shape(head_dim, v);
    if (t.head_dim != 0 && t.smem_bytes() <= smem_optin) return v;
  }
  return -1;
}

}  // namespace flash::sm80
