// libflash/cuda/sm80/fwd/fwd.cpp -- the sm80 forward's plan, and the entry points of the sm80 Algorithm record
// (../sm80.cpp) that call it: what it supports, its workspace, and the launch of one compiled instantiation.
#include <cstdint>
#include <string>

#include "../../../../flash.h"
#include "../../../error.h"
#include "fwd.h"

namespace flash::sm80 {
namespace {

FwdPlan refuse(std::string* why, std::string reason) {
  if (why) *why = std::move(reason);
  return {};
}

}  // namespace

FwdPlan plan(const FwdParams& p, const cuda::DeviceLimits& dev, std::string* why) {
  if (p.dtype != DType::FP16 && p.dtype != DType::BF16) return refuse(why, "supports fp16 and bf16 only");
  const int d = compiled_head_dim(p.head_dim);
  if (d == 0 || p.head_dim % 8 != 0)
    return refuse(why, "head_dim " + std::to_string(p.head_dim) + " is not a multiple of 8 in [8, 256]");
  FwdPlan pl;
  pl.tile = pick_tile(d, dev.smem_per_block_optin, dev.smem_per_sm);
  if (pl.tile < 0)
    return refuse(why, "no tile shape for head_dim " + std::to_string(p.head_dim) +
                           " fits this device's shared memory (" + std::to_string(dev.smem_per_block_optin) +
                           " bytes per block)");
  const TileShape t = pl.shape = kTileTable[pl.tile];
  long long smem = t.smem_bytes();
  if (p.has_block_mask) {
    // A CTA covers 1 or 2 mask query blocks and a key tile 1 or 2 mask key blocks (or part of one): any
    // mix of 64 and 128 against the tiles of 64 and 128 (blocks.cuh, SparseBlocks).
    const BlockMaskParams& m = p.block_mask;
    const auto nests = [](int a, int b) { return a > 0 && b > 0 && (a % b == 0 || b % a == 0) && a <= 2 * b; };
    if (!nests(t.block_m, m.block_m) || !nests(t.block_n, m.block_n))
      return refuse(why, "block-sparse masks of " + std::to_string(m.block_m) + " x " + std::to_string(m.block_n) +
                             " do not nest in the " + std::to_string(t.block_m) + " x " + std::to_string(t.block_n) +
                             " tiles at head_dim " + std::to_string(p.head_dim));
    // After the Q, K and V tiles, the list bitmaps.
    const long long bytes = sparse_smem_bytes(t.block_m, t.block_n, m.block_m, m.block_n, p.seqlen_k);
    if (bytes > kMaxSparseSmemBytes || smem + bytes > dev.smem_per_block_optin)
      return refuse(why, "block-sparse mask over seqlen_k " + std::to_string(p.seqlen_k) + " needs " +
                             std::to_string(bytes) + " bytes of shared memory for its block bitmaps (at most " +
                             std::to_string(kMaxSparseSmemBytes) + ")");
    smem += bytes;
  }
  pl.smem_bytes = int(smem);
  // (varlen: seqlen_q is max_seqlen_q, so every sequence gets the longest one's query blocks; those past a sequence's
  // end exit at once)
  pl.ctas = int64_t{(p.seqlen_q + t.block_m - 1) / t.block_m} * p.heads_q * p.batch;
  if (pl.ctas > 0x7fffffff)
    return refuse(why, std::to_string(pl.ctas) + " query blocks exceed one launch (2^31-1 CTAs)");
  return pl;
}

bool supports(const FwdParams& p, std::string* why) {
  if (!plan(p, cuda::device_limits(p.device_id), why).ok()) return false;
  // Rows a stride steps over: a dense call's seqlen, a varlen call's total (its sequences start at any row).
  const int64_t rows_q = p.varlen ? p.total_q : p.seqlen_q, rows_k = p.varlen ? p.total_k : p.seqlen_k;
  if (!cuda::aligned16(p.q, {{p.q_batch_stride, p.batch}, {p.q_row_stride, rows_q}, {p.q_head_stride, p.heads_q}}) ||
      !cuda::aligned16(p.k, {{p.k_batch_stride, p.batch}, {p.k_row_stride, rows_k}, {p.k_head_stride, p.heads_kv}}) ||
      !cuda::aligned16(p.v, {{p.v_batch_stride, p.batch}, {p.v_row_stride, rows_k}, {p.v_head_stride, p.heads_kv}}) ||
      !cuda::aligned16(p.o, {{p.o_batch_stride, p.batch}, {p.o_row_stride, rows_q}, {p.o_head_stride, p.heads_q}})) {
    *why = "needs 16-byte aligned q/k/v/o pointers and batch/row/head strides that are multiples of 8 elements "
           "(cp.async moves 16-byte chunks)";
    return false;
  }
  if (p.batch > 65535 || p.heads_q > 65535) {
    *why = "batch and heads_q must be at most 65535 (grid dimensions)";
    return false;
  }
  return true;
}

size_t workspace(const FwdParams& p) { return plan(p, cuda::device_limits(p.device_id)).workspace; }

int32_t fwd(const FwdParams& p) {
  if (p.seqlen_q == 0 || p.batch == 0 || p.heads_q == 0) return FLASH_OK;
  std::string why;
  const FwdPlan pl = plan(p, cuda::device_limits(p.device_id), &why);
  if (!pl.ok()) return fail(FLASH_ERROR_INTERNAL, "sm80: fwd called on a problem it does not support: ", why);
  return cuda::with_dtype(p.dtype, [&](auto dtype) {
    return cuda::with_index<kTileCount>(pl.tile, [&](auto tile) {
      constexpr TileShape t = kTileTable[decltype(tile)::value];
      return launch_fwd<t.head_dim, t.variant, decltype(dtype)::value>(p, pl);
    });
  });
}

}  // namespace flash::sm80
