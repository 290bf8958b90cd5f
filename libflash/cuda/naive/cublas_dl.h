// libflash/cuda/naive/cublas_dl.h -- cuBLAS loaded at run time (dlopen), never linked.
//
// libflash.so must load and work on machines with no cuBLAS, so the naive GPU algorithm finds
// libcublas.so.13 with dlopen() the first time it is asked for (std::call_once) and resolves the handful
// of entry points it calls. cuBLAS's headers are included for their types only.
#pragma once
#include <cublas_api.h>

#include <cstdint>
#include <mutex>
#include <string>

namespace flash::cuda::naive {

struct CublasApi {
  cublasStatus_t (*create)(cublasHandle_t*);
  cublasStatus_t (*set_stream)(cublasHandle_t, cudaStream_t);
  cublasStatus_t (*set_workspace)(cublasHandle_t, void*, size_t);
  cublasStatus_t (*gemm_strided_batched_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                            const void*, const void*, cudaDataType, int, long long int, const void*,
                                            cudaDataType, int, long long int, const void*, void*, cudaDataType, int,
                                            long long int, int, cublasComputeType_t, cublasGemmAlgo_t);
  const char* (*status_string)(cublasStatus_t);
};

// The loaded API, or nullptr with *why set ("libcublas.so.13 not found (...)"). Thread-safe; the
// library is loaded once per process and never unloaded.
const CublasApi* cublas_api(std::string* why);

// FLASH_ERROR_CUBLAS with "<what>: <cuBLAS status name and text>"; FLASH_OK for CUBLAS_STATUS_SUCCESS.
int32_t cublas_status(const CublasApi& api, cublasStatus_t s, const char* what);

// The cuBLAS handle of the current device, locked for the caller's scope. One handle per device, shared
// by all threads and guarded by a mutex held while work is enqueued (enqueueing is microseconds; the
// kernels still run concurrently on their streams). Each use sets its stream and points the handle's
// workspace at memory of the call's own stream-ordered workspace, so two streams never share cuBLAS
// scratch memory.
class LockedHandle {
 public:
  LockedHandle() = default;
  cublasHandle_t get() const { return handle_; }

 private:
  friend int32_t acquire_handle(const CublasApi& api, int device_id, cudaStream_t stream, void* scratch,
                                size_t scratch_bytes, LockedHandle* out);
  std::unique_lock<std::mutex> lock_;
  cublasHandle_t handle_ = nullptr;
};

// Locks (creating on first use, on the current device) the handle of device_id, sets its stream and then (SetStream
// resets it) its workspace: scratch_bytes at scratch, memory of the call's own stream-ordered workspace.
int32_t acquire_handle(const CublasApi& api, int device_id, cudaStream_t stream, void* scratch, size_t scratch_bytes,
                       LockedHandle* out);

}  // namespace flash::cuda::naive
