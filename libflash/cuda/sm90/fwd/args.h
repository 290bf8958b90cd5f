// libflash/cuda/sm90/fwd/args.h -- the Hopper forward kernel's arguments (tensor maps, FwdParams, the launch's tile
// schedule) and the host function that encodes a tensor map (tma.cpp). Host-safe: no device code.
#pragma once
#include <cuda.h>

#include <cstdint>

#include "../../../params.h"
#include "schedule.h"

namespace flash::sm90 {

// ---- Kernel arguments ------------------------------------------------------------------------------
// Tensor maps view q, k, v as 4-D tensors {head_dim, then seq/head/batch sorted by stride} so any
// layout whose strides are multiples of 16 bytes is expressible; `pos` says where each axis went.
struct TensorPos {
  int32_t seq, head, batch;  // dimension index (1..3) of each axis in the tensor map
};
struct Args {
  CUtensorMap tq, tk, tv;  // first: 64-byte aligned inside the parameter space
  CUtensorMap to;          // O, for the TMA-store epilogue (Traits::kTmaStoreO; 64-row boxes)
  FwdParams p;
  TensorPos q_pos, k_pos, v_pos, o_pos;
  int32_t num_tiles;     // query blocks x heads x batch
  int32_t num_m_blocks;  // query blocks per (batch, head)
  int32_t sched_stride;  // block-sparse: ints per schedule buffer (1 + key blocks of kBlockN)
  int32_t q_shift;       // the first tile starts at row -q_shift (masks with a right edge; see launch)
  int32_t ring_tail_heads;  // two rings: the (batch, head) pairs whose last 256 rows run as two 128-row tiles at the
                            // launch's end (schedule.h ring_tail_plan); 0: the plain order
  int32_t l2_group;      // causal-like order: (batch, head) pairs per group whose K and V fit in L2 together
  int32_t l2_full_groups;  // groups of exactly l2_group pairs; one last group takes the rest (any size)
  unsigned long long* tile_counter;  // dynamic order (causal-like and block-sparse masks), in the workspace: the
                         // launch's epoch and the tiles it handed out (tile_scheduler.cuh, take_claim). nullptr: static
  uint32_t epoch;        // dynamic order: this launch's (next_tile_epoch)
  TailSplit tail;        // static order: the last round split into pieces (schedule.h); tail.units == 0: none
  int32_t* tail_count;   // per split tile and consumer warpgroup: its pieces finished (zeroed by launch: a pair's, ahead
                         // of its primary)
  float* tail_part;      // two partial slots per CTA (schedule.h, tail_workspace_bytes)
};

// A launch's epoch for the dynamic order's counter (Args::epoch; tile_scheduler.cuh, take_claim): a process-wide sequence
// from a random start, skipping [0, 2^16) and [2^32 - 2^16, 2^32): 0 is what every launch leaves in the word, small
// values are what the tail split's counts (which share the workspace's first bytes) leave there, and all-ones is the
// usual poison of fresh memory -- so none of those is ever read as a claim.
uint32_t next_tile_epoch();

// cuTensorMapEncodeTiled through the runtime's driver entry point, so libflash links no libcuda
// (tma.cpp). Returns FLASH_OK or FLASH_ERROR_UNSUPPORTED / FLASH_ERROR_CUDA with a message.
int32_t encode_tensor_map(CUtensorMap* map, TensorPos* pos, const void* base, DType dtype, int head_dim, int64_t seq,
                          int64_t heads, int64_t batch, int64_t row_stride, int64_t head_stride, int64_t batch_stride,
                          int box_rows, const char* name);

}  // namespace flash::sm90
