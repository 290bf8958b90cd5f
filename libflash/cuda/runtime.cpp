// libflash/cuda/runtime.cpp -- see runtime.h.
#include "runtime.h"

#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "../error.h"

namespace flash::cuda {

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error so later calls start clean
    return 0;
  }
  return n;
}

int32_t require_device(int device_id) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return fail(FLASH_ERROR_NO_CUDA_DEVICE, "no CUDA device: ", cudaGetErrorString(e));
  }
  if (n == 0) return fail(FLASH_ERROR_NO_CUDA_DEVICE, "no CUDA device: the driver reports none");
  if (device_id < 0 || device_id >= n)
    return fail(FLASH_ERROR_NO_CUDA_DEVICE, "no CUDA device ", device_id, ": this machine has ", n);
  return FLASH_OK;
}

static int attribute(cudaDeviceAttr attr, int device_id) {
  int v = 0;
  if (cudaDeviceGetAttribute(&v, attr, device_id) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return v;
}

int compute_capability(int device_id) {
  return attribute(cudaDevAttrComputeCapabilityMajor, device_id) * 10 +
         attribute(cudaDevAttrComputeCapabilityMinor, device_id);
}
int multiprocessor_count(int device_id) { return attribute(cudaDevAttrMultiProcessorCount, device_id); }
int persistent_ctas(int device_id) {
  const int sms = multiprocessor_count(device_id);
  // LIBFLASH_MAX_CTAS: the persistent kernels' grid is at most this many CTAs; default one per SM.
  if (const char* e = std::getenv("LIBFLASH_MAX_CTAS")) {
    char* end = nullptr;
    const long v = std::strtol(e, &end, 10);
    if (end != e && *end == '\0' && v > 0 && (sms <= 0 || v < sms)) return int(v);
  }
  return sms;
}
int64_t l2_cache_bytes(int device_id) { return attribute(cudaDevAttrL2CacheSize, device_id); }
int64_t shared_mem_per_sm(int device_id) { return attribute(cudaDevAttrMaxSharedMemoryPerMultiprocessor, device_id); }
int64_t shared_mem_per_block_optin(int device_id) {
  return attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin, device_id);
}

int32_t device_info(int device_id, flash_device_info* info) {
  if (const int32_t s = require_device(device_id); s != FLASH_OK) return s;
  cudaDeviceProp prop;
  if (const cudaError_t e = cudaGetDeviceProperties(&prop, device_id); e != cudaSuccess)
    return status_from(e, "cudaGetDeviceProperties");
  info->device_type = FLASH_DEVICE_CUDA;
  info->device_id = device_id;
  std::strncpy(info->name, prop.name, sizeof(info->name) - 1);
  info->name[sizeof(info->name) - 1] = '\0';
  info->cc_major = prop.major;
  info->cc_minor = prop.minor;
  info->multiprocessors = prop.multiProcessorCount;
  info->clock_khz = attribute(cudaDevAttrClockRate, device_id);
  info->memory_clock_khz = attribute(cudaDevAttrMemoryClockRate, device_id);
  info->memory_bus_width_bits = attribute(cudaDevAttrGlobalMemoryBusWidth, device_id);
  info->shared_mem_per_sm = static_cast<int64_t>(prop.sharedMemPerMultiprocessor);
  info->shared_mem_per_block_optin = static_cast<int64_t>(prop.sharedMemPerBlockOptin);
  info->l2_cache_bytes = prop.l2CacheSize;
  info->total_memory_bytes = static_cast<int64_t>(prop.totalGlobalMem);
  return FLASH_OK;
}

int32_t check_device_pointer(const void* ptr, int device_id, const char* name) {
  cudaPointerAttributes attr{};
  const cudaError_t e = cudaPointerGetAttributes(&attr, ptr);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return fail(FLASH_ERROR_INVALID_ARGUMENT, name, ".data is not a CUDA pointer (", cudaGetErrorString(e), ")");
  }
  if (attr.type == cudaMemoryTypeUnregistered || attr.type == cudaMemoryTypeHost)
    return fail(FLASH_ERROR_DEVICE_MISMATCH, name, " says cuda:", device_id, " but its data is host memory");
  if (attr.type == cudaMemoryTypeDevice && attr.device != device_id)
    return fail(FLASH_ERROR_DEVICE_MISMATCH, name, " says cuda:", device_id, " but its data is on cuda:", attr.device);
  return FLASH_OK;
}

int32_t malloc_async(void** ptr, size_t bytes, void* stream) {
  const cudaError_t e = cudaMallocAsync(ptr, bytes, static_cast<cudaStream_t>(stream));
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    return fail(FLASH_ERROR_OUT_OF_MEMORY, "could not allocate ", bytes, " bytes of device workspace");
  }
  return status_from(e, "cudaMallocAsync");
}

void free_async(void* ptr, void* stream) {
  if (ptr != nullptr && cudaFreeAsync(ptr, static_cast<cudaStream_t>(stream)) != cudaSuccess) cudaGetLastError();
}

int32_t copy_to_host(void* dst, const void* src, size_t bytes, void* stream) {
  if (bytes == 0) return FLASH_OK;
  const auto s = static_cast<cudaStream_t>(stream);
  if (const int32_t st = status_from(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s), "cudaMemcpyAsync");
      st != FLASH_OK)
    return st;
  return status_from(cudaStreamSynchronize(s), "cudaStreamSynchronize");
}

int32_t status_from(int cuda_error, const char* what) {
  if (cuda_error == cudaSuccess) return FLASH_OK;
  const auto e = static_cast<cudaError_t>(cuda_error);
  if (e == cudaErrorMemoryAllocation)
    return fail(FLASH_ERROR_OUT_OF_MEMORY, what, ": ", cudaGetErrorString(e));
  return fail(FLASH_ERROR_CUDA, what, ": ", cudaGetErrorName(e), ": ", cudaGetErrorString(e));
}

int32_t check_launch(const char* what) { return status_from(cudaGetLastError(), what); }

DeviceGuard::DeviceGuard(int device_id) {
  if (cudaGetDevice(&previous_) != cudaSuccess) {
    cudaGetLastError();
    previous_ = -1;
  }
  if (previous_ != device_id) cudaSetDevice(device_id);
}

DeviceGuard::~DeviceGuard() {
  int now = -1;
  if (previous_ >= 0 && cudaGetDevice(&now) == cudaSuccess && now != previous_) cudaSetDevice(previous_);
}

}  // namespace flash::cuda
