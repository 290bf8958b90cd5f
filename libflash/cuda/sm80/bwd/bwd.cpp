// libflash/cuda/sm80/bwd/bwd.cpp -- the backward family's plan, and the entry points of the sm80 and sm90
// Algorithm records that call it: what it supports, its workspace, and the launch of one compiled main kernel.
#include <cstdint>
#include <string>

#include "../../../../flash.h"
#include "../../../error.h"
#include "bwd.h"
#if defined(FLASH_BWD_WGMMA)
#include "../../sm90/bwd/bwd_sm90.h"
#endif

namespace flash::bwd {
namespace {

BwdPlan refuse(std::string* why, std::string reason) {
  if (why) *why = std::move(reason);
  return {};
}

}  // namespace

WsLayout ws_layout(const BwdParams& p) {
  WsLayout w;
  auto align = [](size_t x) { return (x + 255) / 256 * 256; };
  w.dc = bwd_compiled_head_dim(p.head_dim);
  w.sq_pad = (int64_t(p.seqlen_q > 0 ? p.seqlen_q : 1) + 127) / 128 * 128;
  const size_t bh = size_t(p.batch) * size_t(p.heads_q);
  w.ws_head = p.varlen ? (int64_t(p.total_q) + 128 * int64_t(p.batch) + 127) / 128 * 128 : w.sq_pad;
  // Rows of dq_acc, lse2 and dsum: dense [b * hq][sq_pad], varlen [hq][ws_head].
  const size_t rows = p.varlen ? size_t(p.heads_q) * size_t(w.ws_head) : bh * size_t(w.sq_pad);
  size_t off = 0;
  w.dq_acc = off, off = align(off + rows * size_t(w.dc) * 4);
  w.lse2 = off, off = align(off + rows * 4);
  w.dsum = off, off = align(off + rows * 4);
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

BwdPlan plan(const BwdParams& p, const cuda::DeviceLimits& dev, std::string* why) {
  if (p.dtype != DType::FP16 && p.dtype != DType::BF16) return refuse(why, "the sm80 backward supports fp16 and bf16 only");
  const int d = bwd_compiled_head_dim(p.head_dim);
  if (d == 0 || p.head_dim % 8 != 0)
    return refuse(why, "head_dim " + std::to_string(p.head_dim) + " is not a multiple of 8 in [8, 256]");
  // The mma.sync kernel: every head dim, every target.
  const BwdShape s = bwd_shape(d);
  if (int64_t(s.smem_bytes()) > dev.smem_per_block_optin)
    return refuse(why, "the sm80 backward at head_dim " + std::to_string(p.head_dim) + " needs " +
                           std::to_string(s.smem_bytes()) + " bytes of shared memory per block; this device offers " +
                           std::to_string(dev.smem_per_block_optin));
  if (p.has_block_mask && (p.block_mask.block_m % s.block_m != 0 || p.block_mask.block_n % 16 != 0))
    return refuse(why, "the sm80 backward needs block-sparse block_m a multiple of " + std::to_string(s.block_m) +
                           " and block_n a multiple of 16");
  BwdPlan pl;
  pl.kernel = MainKernel::kMma;
  pl.row = bwd_shape_index(d);
  pl.ws = ws_layout(p);
#if defined(FLASH_BWD_WGMMA)
  // sm_90 (H100, H200): the wgmma main kernel for d64 and d128, 1.27-1.38x the mma.sync one on the H100 at
  // seqlen >= 2k (docs/kernels.md). Its query blocks are block_m rows: a block-sparse mask's must nest.
  if (dev.compute_capability == 90) {
    const int row = wgmma_bwd_row(d, p.deterministic);
    if (row >= 0) {
      const WgmmaBwdShape& w = kWgmmaBwdShapes[row];
      if ((!p.has_block_mask || p.block_mask.block_m % w.block_m == 0) &&
          int64_t(w.smem_bytes()) <= dev.smem_per_block_optin) {
        pl.kernel = MainKernel::kWgmma;
        pl.row = row;
      }
    }
  }
#endif
  return pl;
}

bool supports(const BwdParams& p, std::string* why) {
  if (!plan(p, cuda::device_limits(p.device_id), why).ok()) return false;
  // Rows a stride steps over: a dense call's seqlen, a varlen call's total (its sequences start at any row).
  const int64_t B = p.batch, SQ = p.varlen ? p.total_q : p.seqlen_q, SK = p.varlen ? p.total_k : p.seqlen_k;
  const int64_t HQ = p.heads_q, HK = p.heads_kv;
  if (!cuda::aligned16(p.q, {{p.q_batch_stride, B}, {p.q_row_stride, SQ}, {p.q_head_stride, HQ}}) ||
      !cuda::aligned16(p.k, {{p.k_batch_stride, B}, {p.k_row_stride, SK}, {p.k_head_stride, HK}}) ||
      !cuda::aligned16(p.v, {{p.v_batch_stride, B}, {p.v_row_stride, SK}, {p.v_head_stride, HK}}) ||
      !cuda::aligned16(p.o, {{p.o_batch_stride, B}, {p.o_row_stride, SQ}, {p.o_head_stride, HQ}}) ||
      !cuda::aligned16(p.d_o, {{p.do_batch_stride, B}, {p.do_row_stride, SQ}, {p.do_head_stride, HQ}}) ||
      !cuda::aligned16(p.dq, {{p.dq_batch_stride, B}, {p.dq_row_stride, SQ}, {p.dq_head_stride, HQ}})) {
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
  return true;
}

size_t workspace(const BwdParams& p) { return plan(p, cuda::device_limits(p.device_id)).ws.total; }

int32_t run(const BwdParams& p) {
  if (p.batch == 0 || p.heads_q == 0) return FLASH_OK;
  std::string why;
  const BwdPlan pl = plan(p, cuda::device_limits(p.device_id), &why);
  if (!pl.ok()) return fail(FLASH_ERROR_INTERNAL, "sm80 bwd: run called on a problem it does not support: ", why);
  if (p.workspace_size < pl.ws.total || (pl.ws.total > 0 && p.workspace == nullptr))
    return fail(FLASH_ERROR_INTERNAL, "sm80 bwd: workspace of ", p.workspace_size, " bytes, need ", pl.ws.total);
  return cuda::with_dtype(p.dtype, [&](auto dtype) {
    constexpr DType T = decltype(dtype)::value;
#if defined(FLASH_BWD_WGMMA)
    if (pl.kernel == MainKernel::kWgmma)
      return cuda::with_index<kWgmmaBwdShapeCount>(pl.row, [&](auto row) {
        constexpr WgmmaBwdShape s = kWgmmaBwdShapes[decltype(row)::value];
        return launch_bwd_sm90<s.head_dim, s.pipe, T>(p, pl);
      });
#endif
    return cuda::with_index<kBwdShapeCount>(pl.row, [&](auto row) {
      return launch_bwd<kBwdShapes[decltype(row)::value].head_dim, T>(p, pl);
    });
  });
}

}  // namespace flash::bwd
