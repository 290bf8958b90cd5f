// libflash/cuda/sm80/sm80.cpp -- the Algorithm record of the fused mma.sync forward (FLASH_ALGO_SM80):
// what it can run, and the switch from a call's (head dim, dtype) to one compiled instantiation.
#include <cstdint>
#include <string>

#include "../../../flash.h"
#include "../../algorithm.h"
#include "../../error.h"
#include "../runtime.h"
#include "bwd/bwd.h"
#include "fwd/launch.h"
#include "fwd/tile_table.h"

namespace flash {
namespace sm80 {
namespace {

bool available(int32_t device_id, std::string* why) {
  const int cc = cuda::compute_capability(device_id);
  if (cc >= 80) return true;
  *why = "needs compute capability 8.0 or newer (device " + std::to_string(device_id) + " has " + std::to_string(cc / 10) +
         "." + std::to_string(cc % 10) + ")";
  return false;
}

// cp.async moves 16-byte chunks: every row start must be 16-byte aligned, so the base pointers must be and
// every stride that is used (extent > 1) must be a multiple of 8 elements.
bool aligned(const void* ptr, std::initializer_list<std::pair<int64_t, int64_t>> stride_extent) {
  if (reinterpret_cast<uintptr_t>(ptr) % 16 != 0) return false;
  for (const auto& [stride, extent] : stride_extent)
    if (extent > 1 && stride % 8 != 0) return false;
  return true;
}

bool supports(const FwdParams& p, std::string* why) {
  if (p.dtype != DType::FP16 && p.dtype != DType::BF16) {
    *why = "supports fp16 and bf16 only";
    return false;
  }
  const int d = compiled_head_dim(p.head_dim);
  if (d == 0 || p.head_dim % 8 != 0) {
    *why = "head_dim " + std::to_string(p.head_dim) + " is not a multiple of 8 in [8, 256]";
    return false;
  }
  const int variant = pick_variant(d, cuda::shared_mem_per_block_optin(p.device_id), cuda::shared_mem_per_sm(p.device_id));
  if (variant < 0) {
    *why = "no tile shape for head_dim " + std::to_string(p.head_dim) + " fits this device's shared memory (" +
           std::to_string(cuda::shared_mem_per_block_optin(p.device_id)) + " bytes per block)";
    return false;
  }
  if (!aligned(p.q, {{p.q_batch_stride, p.batch}, {p.q_row_stride, p.seqlen_q}, {p.q_head_stride, p.heads_q}}) ||
      !aligned(p.k, {{p.k_batch_stride, p.batch}, {p.k_row_stride, p.seqlen_k}, {p.k_head_stride, p.heads_kv}}) ||
      !aligned(p.v, {{p.v_batch_stride, p.batch}, {p.v_row_stride, p.seqlen_k}, {p.v_head_stride, p.heads_kv}}) ||
      !aligned(p.o, {{p.o_batch_stride, p.batch}, {p.o_row_stride, p.seqlen_q}, {p.o_head_stride, p.heads_q}})) {
    *why = "needs 16-byte aligned q/k/v/o pointers and batch/row/head strides that are multiples of 8 elements "
           "(cp.async moves 16-byte chunks)";
    return false;
  }
  if (p.batch > 65535 || p.heads_q > 65535) {
    *why = "batch and heads_q must be at most 65535 (grid dimensions)";
    return false;
  }
  if (p.has_block_mask) {
    // A CTA covers 1 or 2 mask query blocks and a key tile 1 or 2 mask key blocks (or part of one): any
    // mix of 64 and 128 against the tiles of 64 and 128 (fwd_kernel.cuh, SparseBlocks).
    const TileShape t = tile_shape(d, variant);
    const BlockMaskParams& m = p.block_mask;
    const auto nests = [](int a, int b) { return a > 0 && b > 0 && (a % b == 0 || b % a == 0) && a <= 2 * b; };
    if (!nests(t.block_m, m.block_m) || !nests(t.block_n, m.block_n)) {
      *why = "block-sparse masks of " + std::to_string(m.block_m) + " x " + std::to_string(m.block_n) +
             " do not nest in the " + std::to_string(t.block_m) + " x " + std::to_string(t.block_n) + " tiles at head_dim " +
             std::to_string(p.head_dim);
      return false;
    }
    const long long bytes = sparse_smem_bytes(t.block_m, t.block_n, m.block_m, m.block_n, p.seqlen_k);
    if (bytes > kMaxSparseSmemBytes || t.smem_bytes() + bytes > cuda::shared_mem_per_block_optin(p.device_id)) {
      *why = "block-sparse mask over seqlen_k " + std::to_string(p.seqlen_k) + " needs " + std::to_string(bytes) +
             " bytes of shared memory for its block bitmaps (at most " + std::to_string(kMaxSparseSmemBytes) + ")";
      return false;
    }
  }
  return true;
}

size_t workspace(const FwdParams&) { return 0; }

template <DType T>
int32_t fwd_typed(const FwdParams& p, int d, int variant) {
  switch (d) {
    case 32: return launch_fwd<32, 0, T>(p);
    case 64: return launch_fwd<64, 0, T>(p);
    case 96: return launch_fwd<96, 0, T>(p);
    case 128: return variant == 0 ? launch_fwd<128, 0, T>(p) : launch_fwd<128, 1, T>(p);
    case 192: return launch_fwd<192, 0, T>(p);
    case 256: return variant == 0 ? launch_fwd<256, 0, T>(p) : launch_fwd<256, 1, T>(p);
  }
  return fail(FLASH_ERROR_INTERNAL, "sm80: no kernel compiled for head_dim ", p.head_dim);
}

int32_t fwd(const FwdParams& p) {
  if (p.seqlen_q == 0 || p.batch == 0 || p.heads_q == 0) return FLASH_OK;
  const int d = compiled_head_dim(p.head_dim);
  const int variant = pick_variant(d, cuda::shared_mem_per_block_optin(p.device_id), cuda::shared_mem_per_sm(p.device_id));
  if (d == 0 || variant < 0) return fail(FLASH_ERROR_INTERNAL, "sm80: fwd called on an unsupported problem");
  return p.dtype == DType::BF16 ? fwd_typed<DType::BF16>(p, d, variant) : fwd_typed<DType::FP16>(p, d, variant);
}

}  // namespace
}  // namespace sm80

extern const Algorithm kCudaSm80 = {FLASH_ALGO_SM80, "sm80", FLASH_DEVICE_CUDA, sm80::available, sm80::supports,
                                    sm80::workspace, sm80::fwd,
                                    bwd::supports, bwd::workspace, bwd::run};  // bwd/

}  // namespace flash
