// libflash/dispatch.h -- choosing an algorithm and running it (workspace, device, errors).
#pragma once
#include "../flash.h"
#include "algorithm.h"
#include "params.h"

namespace flash {
// Picks the algorithm for a validated problem: the requested one (checked) or, for FLASH_ALGO_AUTO,
// the first in preference order that is available and supports it.
int32_t select_algorithm(const FwdParams& p, int32_t device_type, int32_t requested, const Algorithm** out);
// Device checks common to every CUDA call (device exists, pointers live on it).
int32_t check_cuda_tensors(const flash_fwd_args& args);
// Runs the forward: workspace from the caller or allocated for the call, correct device current.
int32_t run_fwd(const Algorithm& alg, FwdParams& p, int32_t device_type);
// Bitmask of algorithms usable on a device.
uint32_t available_algorithms(int32_t device_type, int32_t device_id);

// ---- Backward: the same path. AUTO takes the first algorithm in preference order that has a backward
// (Algorithm::bwd) and supports the call; a named one without a backward is FLASH_ERROR_UNSUPPORTED.
int32_t select_bwd_algorithm(const BwdParams& p, int32_t device_type, int32_t requested, const Algorithm** out);
int32_t check_cuda_tensors(const flash_bwd_args& args);
size_t bwd_workspace(const Algorithm& alg, const BwdParams& p);
int32_t run_bwd(const Algorithm& alg, BwdParams& p, int32_t device_type);
}  // namespace flash
