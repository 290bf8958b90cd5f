// libflash/cuda/sm80/bwd/bwd.cpp -- what the sm80 backward supports, its workspace, and the switch
// from a call's (head dim, dtype) to one compiled instantiation. Registered in the sm80 Algorithm record.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "../../../../flash.h"
#include "../../../error.h"
#include "../../runtime.h"
#include "bwd.h"

namespace flash::bwd {
namespace {

// cp.async and the 16-byte vector loads move 16-byte chunks: every row start must be 16-byte aligned, so
// the base pointers must be and every stride that is used (extent > 1) must be a multiple of 8 elements.
bool aligned(const void* ptr, std::initializer_list<std::pair<int64_t, int64_t>> stride_extent) {
  if (reinterpret_cast<uintptr_t>(ptr) % 16 != 0) return false;
  for (const auto& [stride, extent] : stride_extent)
    if (extent > 1 && stride % 8 != 0) return false;
  return true;
}

}  // namespace

bool supports(const BwdParams& p, std::string* why) {
  if (p.dtype != DType::FP16 && p.dtype != DType::BF16) {
    *why = "the sm80 backward supports fp16 and bf16 only";
    return false;
  }
  const int d = bwd_compiled_head_dim(p.head_dim);
  if (d == 0 || p.head_dim % 8 != 0) {
    *why = "head_dim " + std::to_string(p.head_dim) + " is not a multiple of 8 in [8, 256]";
    return false;
  }
  const int64_t optin = cuda::shared_mem_per_block_optin(p.device_id);
  if (int64_t(bwd_shape(d).smem_bytes()) > optin) {
    *why = "the sm80 backward at head_dim " + std::to_string(p.head_dim) + " needs " +
           std::to_string(bwd_shape(d).smem_bytes()) + " bytes of shared memory per block; this device offers " +
           std::to_string(optin);
    return false;
  }
  const int64_t B = p.batch, SQ = p.seqlen_q, SK = p.seqlen_k, HQ = p.heads_q, HK = p.heads_kv;
  if (!aligned(p.q, {{p.q_batch_stride, B}, {p.q_row_stride, SQ}, {p.q_head_stride, HQ}}) ||
      !aligned(p.k, {{p.k_batch_stride, B}, {p.k_row_stride, SK}, {p.k_head_stride, HK}}) ||
      !aligned(p.v, {{p.v_batch_stride, B}, {p.v_row_stride, SK}, {p.v_head_stride, HK}}) ||
      !aligned(p.o, {{p.o_batch_stride, B}, {p.o_row_stride, SQ}, {p.o_head_stride, HQ}}) ||
      !aligned(p.d_o, {{p.do_batch_stride, B}, {p.do_row_stride, SQ}, {p.do_head_stride, HQ}}) ||
      !aligned(p.dq, {{p.dq_batch_stride, B}, {p.dq_row_stride, SQ}, {p.dq_head_stride, HQ}})) {
    *why = "the sm80 backward needs 16-byte aligned q/k/v/o/d_o/dq pointers and batch/row/head strides that are "
           "multiples of 8 elements (cp.async and vector loads move 16-byte chunks)";
    return false;
  }
  // dk, dv are written in pairs of elements: 4-byte alignment is enough.
  auto aligned4 = [](const void* ptr, std::initializer_list<std::pair<int64_t, int64_t>> se) {
    if (reinterpret_cast<uintptr_t>(ptr) % 4 != 0) return false;
    for (const auto& [stride, extent] : se)
      if (extent > 1 && stride % 2 != 0) return false;
    return true;
  };
  if (!aligned4(p.dk, {{p.dk_batch_stride, B}, {p.dk_row_stride, SK}, {p.dk_head_stride, HK}}) ||
      !aligned4(p.dv, {{p.dv_batch_stride, B}, {p.dv_row_stride, SK}, {p.dv_head_stride, HK}})) {
    *why = "the sm80 backward needs 4-byte aligned dk/dv pointers and even strides";
    return false;
  }
  if (B * HK > 65535 || B * HQ > 65535) {
    *why = "the sm80 backward needs batch * heads_q at most 65535 (grid dimension)";
    return false;
  }
  if (p.has_block_mask && (p.block_mask.block_m % bwd_shape(d).block_m != 0 || p.block_mask.block_n % 16 != 0)) {
    *why = "the sm80 backward needs block-sparse block_m a multiple of " + std::to_string(bwd_shape(d).block_m) +
           " and block_n a multiple of 16";
    return false;
  }
  return true;
}

size_t workspace(const BwdParams& p) { return ws_layout(p).total; }

int32_t run(const BwdParams& p) {
  if (p.batch == 0 || p.heads_q == 0) return FLASH_OK;
  const int d = bwd_compiled_head_dim(p.head_dim);
  const bool bf16 = p.dtype == DType::BF16;
#if defined(FLASH_SM80_BWD_SM90)
  // sm_90 (H100, H200): the wgmma main kernel for d64/d128 (bwd_kernel_sm90.cuh; docs/perf-log.md
  // "sm80 backward", v4: 1.27-1.38x the mma.sync kernel on the H100 at seqlen >= 2k). LIBFLASH_BWD_WGMMA=0
  // keeps the mma.sync kernel (to time the two in one run).
  static const bool use_wgmma = [] {
    const char* e = std::getenv("LIBFLASH_BWD_WGMMA");
    return e == nullptr || e[0] != '0';
  }();
  // d64 steps over 128 query rows: block-sparse masks need block_m a multiple of 128 there.
  const bool m128_ok = !p.has_block_mask || p.block_mask.block_m % 128 == 0;
  // LIBFLASH_BWD_SM90_VARIANT (development: time candidates in one run, scripts/device-bwd.sh VARIANTS):
  // 0 the default below; 3 the in-step dQ (v4's schedule, kPipe 0); bf16 only (fp16 keeps the default):
  // 7 the default schedule with returning atomics for dQ (kRed off), 8 kPipe 0 with them (v4 + the mask pass).
  static const int variant = [] {
    const char* e = std::getenv("LIBFLASH_BWD_SM90_VARIANT");
    return e == nullptr ? 0 : std::atoi(e);
  }();
  if (use_wgmma && (d == 128 || (d == 64 && m128_ok)) && cuda::compute_capability(p.device_id) == 90) {
    // Two warpgroups per CTA, dQ by fp32 reductions, dP/dV overlapping the softmax (one warpgroup per CTA was
    // 0.62x at d128, bulk reduce-adds for dQ 0.98-1.0x), the dQ of step i computed and added during step i+1
    // (kPipe; d64: at the top of the step, d128: before dK -- each the faster there; docs/perf-log.md v5).
    // Deterministic mode keeps the in-step dQ (its counters order the adds per step).
    const bool v4 = p.deterministic || variant == 3 || variant == 8;
    const bool atom = bf16 && (variant == 7 || variant == 8);
#define FLASH_BWD_SM90_LAUNCH(D, BM, PIPE, RED)                                  \
  return bf16 ? launch_bwd_sm90<D, BM, 2, false, true, DType::BF16, PIPE, RED>(p) \
              : launch_bwd_sm90<D, BM, 2, false, true, DType::FP16, PIPE, RED>(p)
    if (atom) {  // (bf16 only: the fp16 instantiations of these are not compiled)
      if (d == 64) return v4 ? launch_bwd_sm90<64, 128, 2, false, true, DType::BF16, 0, false>(p)
                             : launch_bwd_sm90<64, 128, 2, false, true, DType::BF16, 1, false>(p);
      return v4 ? launch_bwd_sm90<128, 64, 2, false, true, DType::BF16, 0, false>(p)
                : launch_bwd_sm90<128, 64, 2, false, true, DType::BF16, 2, false>(p);
    }
    if (d == 64) {
      if (v4) FLASH_BWD_SM90_LAUNCH(64, 128, 0, true);
      FLASH_BWD_SM90_LAUNCH(64, 128, 1, true);
    }
    if (v4) FLASH_BWD_SM90_LAUNCH(128, 64, 0, true);
    FLASH_BWD_SM90_LAUNCH(128, 64, 2, true);
#undef FLASH_BWD_SM90_LAUNCH
  }
#endif
  switch (d) {
    // Variant 1 (4 warps x 64 keys, two CTAs per SM) measured 10-25% slower on the H100 (docs/perf-log.md,
    // "sm80 backward"): not compiled; add bwd_hdim*_v1_*.cu files instantiating <d, 1, dtype> to time it again.
    case 64: return bf16 ? launch_bwd<64, 0, DType::BF16>(p) : launch_bwd<64, 0, DType::FP16>(p);
    case 128: return bf16 ? launch_bwd<128, 0, DType::BF16>(p) : launch_bwd<128, 0, DType::FP16>(p);
    case 256: return bf16 ? launch_bwd<256, 0, DType::BF16>(p) : launch_bwd<256, 0, DType::FP16>(p);
  }
  return fail(FLASH_ERROR_INTERNAL, "sm80 bwd: no kernel compiled for head_dim ", p.head_dim);
}

}  // namespace flash::bwd
