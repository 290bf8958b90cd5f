// libflash/cuda/runtime.h -- the thin layer between libflash and the CUDA runtime (linked statically).
//
// Everything here is safe on a machine with no GPU and no driver: it reports "no CUDA device" rather
// than failing. Only compiled when FLASH_WITH_CUDA is on.
#pragma once
#include <cstddef>
#include <cstdint>

#include "../../flash.h"

namespace flash::cuda {

int device_count();                                // 0 without a driver or device; never fails
int32_t require_device(int device_id);            // FLASH_OK, or FLASH_ERROR_NO_CUDA_DEVICE with a message
int compute_capability(int device_id);            // major*10 + minor, e.g. 90; 0 if unknown
int multiprocessor_count(int device_id);
// CTAs of the persistent kernels' grid: at most LIBFLASH_MAX_CTAS (a positive number smaller than the SM count;
// read at every call), default one per SM. For running compute-sanitizer on the tile schedules -- the split last
// round, the dynamic order -- at a scale it finishes (tests: GpuSmallGrid), or to leave SMs to other work.
int persistent_ctas(int device_id);
int64_t shared_mem_per_sm(int device_id);         // bytes
int64_t shared_mem_per_block_optin(int device_id);
int64_t l2_cache_bytes(int device_id);            // 0 if unknown
int32_t device_info(int device_id, flash_device_info* info);
// `ptr` must be device (or managed) memory usable from device_id.
int32_t check_device_pointer(const void* ptr, int device_id, const char* name);
// Stream-ordered allocation: no device synchronisation (cudaMallocAsync / cudaFreeAsync).
int32_t malloc_async(void** ptr, size_t bytes, void* stream);
void free_async(void* ptr, void* stream);
// Copies device memory to the host in `stream`'s order and waits for it (so the stream's earlier work, and the copy, are
// done on return). Synchronising: for the naive reference algorithm only (its varlen path reads cu_seqlens on the host).
int32_t copy_to_host(void* dst, const void* src, size_t bytes, void* stream);
// FLASH_ERROR_CUDA with the runtime's message if the last launch failed.
int32_t check_launch(const char* what);
// Turns a cudaError_t value into a status (FLASH_OK for cudaSuccess).
int32_t status_from(int cuda_error, const char* what);

// Makes device_id current for the scope, restoring the caller's device after.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device_id);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

}  // namespace flash::cuda
