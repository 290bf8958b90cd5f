// libflash/cuda/naive/cublas_dl.cpp -- see cublas_dl.h.
#include "cublas_dl.h"

#include <dlfcn.h>

#include <map>
#include <memory>

#include "../../../flash.h"
#include "../../error.h"

namespace flash::cuda::naive {
namespace {

struct Loaded {
  CublasApi api{};
  bool ok = false;
  std::string why;
};

template <class F>
bool resolve(void* lib, const char* name, F* fn, std::string* why) {
  *fn = reinterpret_cast<F>(dlsym(lib, name));
  if (*fn == nullptr) {
    *why = std::string("libcublas lacks ") + name;
    return false;
  }
  return true;
}

Loaded load() {
  Loaded l;
  // The versioned name first (the ABI we were compiled against), then the development link, then the
  // toolkit's usual home for processes whose loader path does not include it.
  const char* const names[] = {"libcublas.so.13", "libcublas.so", "/usr/local/cuda/lib64/libcublas.so.13",
                               "/usr/local/cuda/lib/libcublas.so.13"};
  void* lib = nullptr;
  std::string first_error;
  for (const char* n : names) {
    lib = dlopen(n, RTLD_NOW | RTLD_LOCAL);
    if (lib != nullptr) break;
    if (first_error.empty()) {
      const char* e = dlerror();
      first_error = e != nullptr ? e : "";
    }
  }
  if (lib == nullptr) {
    l.why = "libcublas.so.13 not found (" + first_error + ")";
    return l;
  }
  // The library stays loaded for the life of the process (handles are never destroyed either: tearing
  // them down at exit races the CUDA driver's own shutdown).
  CublasApi& a = l.api;
  l.ok = resolve(lib, "cublasCreate_v2", &a.create, &l.why) && resolve(lib, "cublasSetStream_v2", &a.set_stream, &l.why) &&
         resolve(lib, "cublasSetWorkspace_v2", &a.set_workspace, &l.why) &&
         resolve(lib, "cublasGemmStridedBatchedEx", &a.gemm_strided_batched_ex, &l.why) &&
         resolve(lib, "cublasGetStatusString", &a.status_string, &l.why);
  return l;
}

const Loaded& loaded() {
  static std::once_flag once;
  static Loaded* l = nullptr;
  std::call_once(once, [] { l = new Loaded(load()); });  // intentionally leaked: used until exit
  return *l;
}

struct DeviceHandle {
  std::mutex mu;
  cublasHandle_t handle = nullptr;
};

std::mutex g_handles_mu;
std::map<int, std::unique_ptr<DeviceHandle>>* g_handles = nullptr;  // leaked, like the handles

const char* status_name(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}

}  // namespace

const CublasApi* cublas_api(std::string* why) {
  const Loaded& l = loaded();
  if (!l.ok) {
    if (why != nullptr) *why = l.why;
    return nullptr;
  }
  return &l.api;
}

int32_t cublas_status(const CublasApi& api, cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return FLASH_OK;
  const char* text = api.status_string != nullptr ? api.status_string(s) : nullptr;
  return fail(FLASH_ERROR_CUBLAS, what, ": ", status_name(s), " (", std::to_string(static_cast<int>(s)), "): ",
              text != nullptr ? text : "no description");
}

int32_t acquire_handle(const CublasApi& api, int device_id, cudaStream_t stream, void* scratch, size_t scratch_bytes,
                       LockedHandle* out) {
  DeviceHandle* dh;
  {
    std::lock_guard<std::mutex> g(g_handles_mu);
    if (g_handles == nullptr) g_handles = new std::map<int, std::unique_ptr<DeviceHandle>>();
    auto& slot = (*g_handles)[device_id];
    if (!slot) slot = std::make_unique<DeviceHandle>();
    dh = slot.get();
  }
  std::unique_lock<std::mutex> lock(dh->mu);
  if (dh->handle == nullptr) {
    // Created on the current device (the dispatcher's DeviceGuard made device_id current). A failure
    // is not cached: the next call tries again.
    cublasHandle_t h = nullptr;
    if (const int32_t s = cublas_status(api, api.create(&h), "cublasCreate"); s != FLASH_OK) return s;
    dh->handle = h;
  }
  if (const int32_t s = cublas_status(api, api.set_stream(dh->handle, stream), "cublasSetStream"); s != FLASH_OK) return s;
  if (const int32_t s = cublas_status(api, api.set_workspace(dh->handle, scratch, scratch_bytes), "cublasSetWorkspace");
      s != FLASH_OK)
    return s;
  out->handle_ = dh->handle;
  out->lock_ = std::move(lock);
  return FLASH_OK;
}

}  // namespace flash::cuda::naive
