// libflash/cuda/sm80/fwd/tile_table.h -- the one table of tile shapes of the sm80 forward kernel.
//
// Starting point, the FlashAttention paper (Algorithm 1): with M bytes of on-chip memory, key blocks of
// B_c = M / (4 d) rows and query blocks of B_r = min(B_c, d) rows fill it. On sm_80+ M is large (163 KB
// A100, 227 KB H100 per block), so that rule asks for blocks of 200+ rows and the binding limit becomes
// the register file instead: each warp owns (block_m / warps) query rows and keeps their O accumulator
// in registers, (block_m / warps) * d / 32 fp32 per thread, plus the S tile, (block_m / warps) *
// block_n / 32. We keep both under ~200 registers (no spills, 2 CTAs per SM where shared memory allows,
// so one CTA's softmax hides the other's loads). The shapes below are the tuned result; each entry says
// why. The kernel uses (block_m + 2 * stages * block_n) * d * 2 bytes of shared memory (Q once, K and V
// buffers; cp.async overlaps loads with the math of the current step).
//
// A head dim may list several shapes in order of preference: d128's double-buffered shape only pays
// when two CTAs still fit per SM (H100's 228 KB, not A100's 164 KB), d256's needs more than the 99 KB
// of sm_86/sm_89. At run time pick_tile() (called by the plan, fwd.cpp) takes the first shape that fits the device's reported
// shared memory per block and per SM, so a new GPU gets a working choice with no code change.
// Every entry is compiled, for fp16 and bf16 (generate_kernels.py, family SM80_FWD).
#pragma once

namespace flash::sm80 {

struct TileShape {
  int head_dim;    // compiled head dim (a call with a smaller multiple of 8 runs with zero-filled columns)
  int variant;     // candidates of one head dim in order of preference
  int block_m;     // query rows per CTA
  int block_n;     // key rows per step of the main loop
  int warps;       // block_m / warps query rows per warp: 16 or 32 (1 or 2 m16 MMA tiles)
  int stages;      // K/V buffers: 1 = FA2's schedule, 2 = K_{j+1}, V_{j+1} loaded during all of step j
  int min_blocks;  // taken only if this many CTAs fit in one SM's shared memory

  constexpr int smem_bytes() const { return (block_m + 2 * stages * block_n) * head_dim * 2; }
};

// clang-format off
inline constexpr TileShape kTileTable[] = {
  // d    var  block_m block_n warps stages min_blocks  why
  {  32,  0,   128,    128,    4,    1,     1 },  // tiny O (32 regs); wide key block halves loop trips and softmax overhead. 24 KB.
  {  64,  0,   128,    128,    4,    1,     1 },  // FA2's sm80 shape: S 64 + O 64 fp32 regs. H100: 128x64 -9%, 8 warps -30%, 2 stages -5% (spills). 48 KB.
  {  96,  0,   128,    64,     4,    1,     1 },  // O 96 + S 32 regs; a 128-key block would push past 255 registers. 48 KB.
  { 128,  0,   128,    64,     4,    2,     2 },  // H100: +1-8% over 1 stage (372 vs 368 TFLOP/s non-causal 16k). 96 KB: needs 2 CTAs/SM (sm_90, not A100).
  { 128,  1,   128,    64,     4,    1,     1 },  // FA2's sm80 shape, 64 KB; 8 warps x 16 rows -30% on H100 (168 regs: 1 CTA/SM).
  { 192,  0,   128,    64,     8,    1,     1 },  // 16 rows/warp keep O at 96 regs; 8 warps keep 128 query rows per K/V load. 96 KB.
  { 256,  0,   128,    64,     8,    1,     1 },  // O 128 regs at 16 rows/warp. 128 KB: fits sm_80 (163 KB) and sm_90 (227 KB).
  { 256,  1,    64,    64,     4,    1,     1 },  // fallback for 99 KB parts (sm_86/sm_89): 96 KB.
};
// clang-format on

inline constexpr int kCompiledHeadDims[] = {32, 64, 96, 128, 192, 256};

constexpr TileShape tile_shape(int head_dim, int variant) {
  for (const TileShape& t : kTileTable)
    if (t.head_dim == head_dim && t.variant == variant) return t;
  return TileShape{0, 0, 0, 0, 0, 0, 0};
}

// Smallest compiled head dim >= d; 0 if none.
constexpr int compiled_head_dim(int d) {
  for (int c : kCompiledHeadDims)
    if (c >= d) return c;
  return 0;
}

// The entry (index into kTileTable) to run for a compiled head dim on a device with this much shared memory
// per block (opt-in) and per SM: the first in table order that fits one block and min_blocks blocks per SM
// (the runtime reserves 1 KB per block); -1 if none fits.
constexpr int pick_tile(int head_dim, long long smem_optin, long long smem_per_sm) {
  int i = 0;
  for (const TileShape& t : kTileTable) {
    if (t.head_dim == head_dim && t.smem_bytes() <= smem_optin && t.min_blocks * (t.smem_bytes() + 1024LL) <= smem_per_sm)
      return i;
    ++i;
  }
  return -1;
}
inline constexpr int kTileCount = int(sizeof(kTileTable) / sizeof(kTileTable[0]));

// Block-sparse masks: after its Q, K and V tiles the kernel keeps, in shared memory, one bitmap of the
// listed mask key blocks per mask query block its rows cover ("parts": 1, or 2 when the mask's block_m is
// half the tile's) and one bitmap of the key tiles it visits. Bytes for a mask of mask_block_m x
// mask_block_n over seqlen_k keys (32 bytes per 16k keys and part at 64-key blocks).
constexpr long long sparse_parts(int tile_block_m, int mask_block_m) {
  return tile_block_m > mask_block_m ? tile_block_m / mask_block_m : 1;
}
constexpr long long sparse_smem_bytes(int tile_block_m, int tile_block_n, int mask_block_m, int mask_block_n,
                                      long long seqlen_k) {
  const long long mask_words = (seqlen_k + mask_block_n - 1) / mask_block_n / 32 + 1;  // + a spare bit
  const long long tile_words = ((seqlen_k + tile_block_n - 1) / tile_block_n + 31) / 32;
  return 4 * (sparse_parts(tile_block_m, mask_block_m) * mask_words + tile_words);
}
// Cap on those bitmaps (seqlen_k up to ~1.4M keys at 64-key blocks); 2 d128 CTAs still fit an H100 SM.
inline constexpr long long kMaxSparseSmemBytes = 8192;

}  // namespace flash::sm80
