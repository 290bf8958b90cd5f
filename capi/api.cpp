// capi/api.cpp -- the extern "C" entry points of flash.h.
//
// The path of one call (flash_bwd the same with validate_bwd, select_bwd_algorithm, run_bwd, bwd()):
// flash_fwd -> validate_fwd (capi/validate.cpp: check every rule, normalise into
// flash::FwdParams) -> select_algorithm (libflash/dispatch.cpp) -> run_fwd (workspace, device guard) ->
// the backend's fwd() -> status. Nothing here throws across the ABI: every exception becomes a status.
#include <cstring>
#include <fstream>
#include <new>
#include <string>
#include <thread>
#include <unistd.h>

#include "../flash.h"
#include "../libflash/dispatch.h"
#include "../libflash/cpu/kernels.h"
#include "../libflash/error.h"
#include "validate.h"
#include "versioned.h"
#ifdef FLASH_WITH_CUDA
#include "../libflash/cuda/runtime.h"
#endif

#define FLASH_STR2(x) #x
#define FLASH_STR(x) FLASH_STR2(x)

using flash::fail;

namespace {

// Runs `body` with the C++ exceptions it might throw turned into statuses.
template <class F>
int32_t guarded(F&& body) {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return fail(FLASH_ERROR_OUT_OF_MEMORY, "out of host memory");
  } catch (const std::exception& e) {
    return fail(FLASH_ERROR_INTERNAL, "internal error: ", e.what());
  } catch (...) {
    return fail(FLASH_ERROR_INTERNAL, "internal error: unknown exception");
  }
}

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  return "CPU";
}

// ---- Defaults: what the init functions write ---------------------------------------------------------
template <class T>
T zeroed() {
  T t;
  std::memset(static_cast<void*>(&t), 0, sizeof(t));
  t.struct_size = sizeof(t);
  return t;
}
flash_block_mask default_block_mask() {
  flash_block_mask m = zeroed<flash_block_mask>();
  m.block_m = 128;
  m.block_n = 128;
  return m;
}
// flash_fwd_args and flash_bwd_args share their option fields and their defaults.
template <class Args>
Args default_args() {
  Args a = zeroed<Args>();
  a.softmax_scale = 0.0f;  // 1/sqrt(head_dim)
  a.causal = 0;
  a.causal_alignment = FLASH_ALIGN_BOTTOM_RIGHT;
  a.window_left = -1;
  a.window_right = -1;
  a.algorithm = FLASH_ALGO_AUTO;
  a.algorithm_used = -1;
  return a;
}

// The init functions: defaults for the caller's struct_size bytes.
template <class T>
int32_t init_sized(T* p, size_t size, const T& defaults, const char* what, const char* init) {
  if (p == nullptr) return fail(FLASH_ERROR_NULL_POINTER, what, " is NULL");
  if (const int32_t s = flash::check_struct_size<T>(size, what, init); s != FLASH_OK) return s;
  flash::write_versioned(p, defaults, size);
  return FLASH_OK;
}

// ---- One call of the forward or the backward ------------------------------------------------------------
// What differs between the two passes; everything else (versioned read, block mask, validation, device
// checks, selection, workspace, run) is the same code.
template <class Args> struct Pass;
template <> struct Pass<flash_fwd_args> {
  using Params = flash::FwdParams;
  static constexpr const char* init = "flash_fwd_args_init";
  static int32_t validate(const flash_fwd_args* a, Params* p) { return flash::validate_fwd(a, p); }
  static int32_t select(const Params& p, int32_t dev, int32_t algo, const flash::Algorithm** out) {
    return flash::select_algorithm(p, dev, algo, out);
  }
  static size_t workspace(const flash::Algorithm& a, const Params& p) { return a.fwd_workspace(p); }
  static int32_t run(const flash::Algorithm& a, Params& p, int32_t dev) { return flash::run_fwd(a, p, dev); }
};
template <> struct Pass<flash_bwd_args> {
  using Params = flash::BwdParams;
  static constexpr const char* init = "flash_bwd_args_init";
  static int32_t validate(const flash_bwd_args* a, Params* p) { return flash::validate_bwd(a, p); }
  static int32_t select(const Params& p, int32_t dev, int32_t algo, const flash::Algorithm** out) {
    return flash::select_bwd_algorithm(p, dev, algo, out);
  }
  static size_t workspace(const flash::Algorithm& a, const Params& p) { return flash::bwd_workspace(a, p); }
  static int32_t run(const flash::Algorithm& a, Params& p, int32_t dev) { return flash::run_bwd(a, p, dev); }
};

// The caller's arguments at this library's layout (capi/versioned.h), with their block mask, and the
// checked problem and the algorithm chosen for it.
template <class Args>
struct Call {
  Args args;
  flash_block_mask mask;
  typename Pass<Args>::Params params;
  const flash::Algorithm* algorithm = nullptr;

  int32_t prepare(const Args* user) {
    if (user == nullptr) return fail(FLASH_ERROR_NULL_POINTER, "args is NULL");
    if (const int32_t s = flash::read_versioned(user, default_args<Args>(), &args, "args", Pass<Args>::init); s != FLASH_OK)
      return s;
    // The init functions write algorithm_used = -1 and a successful call writes the id of the algorithm that
    // ran (never 0, FLASH_ALGO_AUTO): 0 means the struct never went through them -- typically zero-filled with
    // struct_size set, whose window (0, 0) would silently mean "the diagonal only".
    if (args.algorithm_used == 0)
      return fail(FLASH_ERROR_INVALID_ARGUMENT, "args->algorithm_used is 0, which ", Pass<Args>::init,
                  " never writes: the struct was not initialised (zero-filled, its window_left/window_right would be 0, "
                  "the diagonal only). Call ", Pass<Args>::init, "(&args) first, then set the fields you need");
    if (args.block_mask != nullptr) {
      if (const int32_t s = flash::read_versioned(args.block_mask, default_block_mask(), &mask, "block_mask",
                                                  "flash_block_mask_init");
          s != FLASH_OK)
        return s;
      args.block_mask = &mask;
    }
    if (const int32_t s = Pass<Args>::validate(&args, &params); s != FLASH_OK) return s;
    if (args.q.device_type == FLASH_DEVICE_CUDA)
      if (const int32_t s = flash::check_cuda_tensors(args); s != FLASH_OK) return s;
    return Pass<Args>::select(params, args.q.device_type, args.algorithm, &algorithm);
  }
};

template <class Args>
int32_t workspace_size(const Args* user, size_t* bytes) {
  return guarded([&]() -> int32_t {
    if (bytes == nullptr) return fail(FLASH_ERROR_NULL_POINTER, "bytes is NULL");
    *bytes = 0;
    Call<Args> call;
    if (const int32_t s = call.prepare(user); s != FLASH_OK) return s;
    *bytes = Pass<Args>::workspace(*call.algorithm, call.params);
    return FLASH_OK;
  });
}

template <class Args>
int32_t execute(Args* user) {
  return guarded([&]() -> int32_t {
    Call<Args> call;
    if (const int32_t s = call.prepare(user); s != FLASH_OK) return s;
    const int32_t s = Pass<Args>::run(*call.algorithm, call.params, call.args.q.device_type);
    if (s == FLASH_OK) user->algorithm_used = call.algorithm->id;  // a field of every version
    return s;
  });
}

flash_device_info default_device_info() { return zeroed<flash_device_info>(); }

// Fills *info (at this library's layout) for one device.
int32_t device_info(int32_t device_type, int32_t device_id, flash_device_info* info) {
  if (device_type == FLASH_DEVICE_CPU) {
    if (device_id != 0) return fail(FLASH_ERROR_INVALID_ARGUMENT, "device_id is ", device_id, " but the CPU is device 0");
    info->device_type = FLASH_DEVICE_CPU;
    const std::string name = cpu_model_name();
    std::strncpy(info->name, name.c_str(), sizeof(info->name) - 1);
    info->multiprocessors = static_cast<int32_t>(std::thread::hardware_concurrency());
    const long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    info->shared_mem_per_sm = l2 > 0 ? l2 : 0;  // the fast memory a CPU thread tiles for
    const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    info->l2_cache_bytes = l3 > 0 ? l3 : 0;     // last-level cache
    info->total_memory_bytes = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE);
    info->algorithms = flash::available_algorithms(FLASH_DEVICE_CPU, 0);
    return FLASH_OK;
  }
  if (device_type != FLASH_DEVICE_CUDA)
    return fail(FLASH_ERROR_INVALID_ARGUMENT, "device_type is ", device_type, ", not a FLASH_DEVICE_* value");
#ifdef FLASH_WITH_CUDA
  if (const int32_t s = flash::cuda::device_info(device_id, info); s != FLASH_OK) return s;
  info->algorithms = flash::available_algorithms(FLASH_DEVICE_CUDA, device_id);
  return FLASH_OK;
#else
  return fail(FLASH_ERROR_NO_CUDA_DEVICE, "no CUDA device: this libflash was built without CUDA (FLASH_WITH_CUDA=OFF)");
#endif
}

}  // namespace

extern "C" {

FLASH_API uint32_t flash_version_number(void) { return FLASH_VERSION_NUMBER; }
FLASH_API uint32_t flash_version_major(void) { return FLASH_VERSION_MAJOR; }
FLASH_API uint32_t flash_version_minor(void) { return FLASH_VERSION_MINOR; }
FLASH_API uint32_t flash_version_patch(void) { return FLASH_VERSION_PATCH; }
FLASH_API const char* flash_version_string(void) {
  return FLASH_STR(FLASH_VERSION_MAJOR) "." FLASH_STR(FLASH_VERSION_MINOR) "." FLASH_STR(FLASH_VERSION_PATCH);
}

// The build, then the level of the CPU kernels this CPU got (picked at run time, libflash/cpu/kernels.cpp): the one
// place a program, a test log or fa-bench's JSON shows which copy of the kernels ran.
FLASH_API const char* flash_build_info(void) {
  static const std::string info =
      std::string("libflash " FLASH_STR(FLASH_VERSION_MAJOR) "." FLASH_STR(FLASH_VERSION_MINOR) "." FLASH_STR(
          FLASH_VERSION_PATCH) "; compiler " __VERSION__
#ifdef FLASH_WITH_CUDA
                  "; CUDA " FLASH_STR(FLASH_CUDA_VERSION) "; GPU targets " FLASH_GPU_TARGETS
#else
                  "; CPU-only build"
#endif
#ifdef FLASH_GIT_REVISION
                  "; git " FLASH_GIT_REVISION
#endif
                  ) +
      "; CPU kernels " + flash::cpu::kernels().name + (flash::cpu::bf16_kernels() ? " + avx512bf16" : "");
  return info.c_str();
}

FLASH_API const char* flash_status_string(int32_t status) {
  switch (status) {
    case FLASH_OK: return "FLASH_OK";
    case FLASH_ERROR_INVALID_ARGUMENT: return "FLASH_ERROR_INVALID_ARGUMENT";
    case FLASH_ERROR_NULL_POINTER: return "FLASH_ERROR_NULL_POINTER";
    case FLASH_ERROR_STRUCT_SIZE: return "FLASH_ERROR_STRUCT_SIZE";
    case FLASH_ERROR_BAD_SHAPE: return "FLASH_ERROR_BAD_SHAPE";
    case FLASH_ERROR_BAD_STRIDE: return "FLASH_ERROR_BAD_STRIDE";
    case FLASH_ERROR_DTYPE_MISMATCH: return "FLASH_ERROR_DTYPE_MISMATCH";
    case FLASH_ERROR_UNSUPPORTED_DTYPE: return "FLASH_ERROR_UNSUPPORTED_DTYPE";
    case FLASH_ERROR_DEVICE_MISMATCH: return "FLASH_ERROR_DEVICE_MISMATCH";
    case FLASH_ERROR_UNSUPPORTED_HEAD_DIM: return "FLASH_ERROR_UNSUPPORTED_HEAD_DIM";
    case FLASH_ERROR_BAD_MASK: return "FLASH_ERROR_BAD_MASK";
    case FLASH_ERROR_NO_CUDA_DEVICE: return "FLASH_ERROR_NO_CUDA_DEVICE";
    case FLASH_ERROR_ALGORITHM_UNAVAILABLE: return "FLASH_ERROR_ALGORITHM_UNAVAILABLE";
    case FLASH_ERROR_UNSUPPORTED: return "FLASH_ERROR_UNSUPPORTED";
    case FLASH_ERROR_OUT_OF_MEMORY: return "FLASH_ERROR_OUT_OF_MEMORY";
    case FLASH_ERROR_WORKSPACE_TOO_SMALL: return "FLASH_ERROR_WORKSPACE_TOO_SMALL";
    case FLASH_ERROR_CUDA: return "FLASH_ERROR_CUDA";
    case FLASH_ERROR_CUBLAS: return "FLASH_ERROR_CUBLAS";
    case FLASH_ERROR_INTERNAL: return "FLASH_ERROR_INTERNAL";
    default: return "FLASH_ERROR_UNKNOWN_STATUS";
  }
}

FLASH_API const char* flash_last_error_message(void) { return flash::last_error(); }

FLASH_API const char* flash_algorithm_name(int32_t algorithm) {
  switch (algorithm) {
    case FLASH_ALGO_AUTO: return "auto";
    case FLASH_ALGO_CPU: return "cpu";
    case FLASH_ALGO_NAIVE: return "naive";
    case FLASH_ALGO_SM80: return "sm80";
    case FLASH_ALGO_SM90: return "sm90";
    default: return nullptr;
  }
}

FLASH_API int32_t flash_algorithm_from_name(const char* name) {
  if (name == nullptr) return -1;
  for (int32_t a = 0; a < FLASH_ALGO_COUNT; ++a)
    if (std::strcmp(name, flash_algorithm_name(a)) == 0) return a;
  return -1;
}

FLASH_API flash_tensor flash_tensor_contiguous(void* data, int32_t dtype, int32_t device_type, int32_t device_id,
                                               int32_t ndim, const int64_t* shape) {
  flash_tensor t;
  std::memset(&t, 0, sizeof(t));
  t.data = data;
  t.dtype = dtype;
  t.device_type = device_type;
  t.device_id = device_id;
  t.ndim = ndim;
  if (shape == nullptr || ndim < 1 || ndim > 4) return t;  // invalid: flash_fwd will say so
  int64_t stride = 1;
  for (int i = ndim - 1; i >= 0; --i) {
    t.shape[i] = shape[i];
    t.strides[i] = stride;
    stride *= shape[i];
  }
  return t;
}


FLASH_API int32_t flash_block_mask_init_sized(flash_block_mask* mask, size_t struct_size) {
  return init_sized(mask, struct_size, default_block_mask(), "mask", "flash_block_mask_init");
}

FLASH_API int32_t flash_fwd_args_init_sized(flash_fwd_args* args, size_t struct_size) {
  return init_sized(args, struct_size, default_args<flash_fwd_args>(), "args", "flash_fwd_args_init");
}

FLASH_API int32_t flash_fwd_workspace_size(const flash_fwd_args* args, size_t* bytes) {
  return workspace_size(args, bytes);
}

FLASH_API int32_t flash_fwd(flash_fwd_args* args) {
  return execute(args);
}

FLASH_API int32_t flash_bwd_args_init_sized(flash_bwd_args* args, size_t struct_size) {
  return init_sized(args, struct_size, default_args<flash_bwd_args>(), "args", "flash_bwd_args_init");
}

FLASH_API int32_t flash_bwd_workspace_size(const flash_bwd_args* args, size_t* bytes) {
  return workspace_size(args, bytes);
}

FLASH_API int32_t flash_bwd(flash_bwd_args* args) {
  return execute(args);
}

FLASH_API int32_t flash_device_info_init_sized(flash_device_info* info, size_t struct_size) {
  return init_sized(info, struct_size, default_device_info(), "info", "flash_device_info_init");
}

FLASH_API int32_t flash_device_count(int32_t device_type, int32_t* count) {
  return guarded([&]() -> int32_t {
    if (count == nullptr) return fail(FLASH_ERROR_NULL_POINTER, "count is NULL");
    *count = 0;
    if (device_type == FLASH_DEVICE_CPU) {
      *count = 1;
      return FLASH_OK;
    }
    if (device_type != FLASH_DEVICE_CUDA)
      return fail(FLASH_ERROR_INVALID_ARGUMENT, "device_type is ", device_type, ", not a FLASH_DEVICE_* value");
#ifdef FLASH_WITH_CUDA
    *count = flash::cuda::device_count();
#endif
    return FLASH_OK;
  });
}

FLASH_API int32_t flash_get_device_info(int32_t device_type, int32_t device_id, flash_device_info* info) {
  return guarded([&]() -> int32_t {
    if (info == nullptr) return fail(FLASH_ERROR_NULL_POINTER, "info is NULL");
    const size_t caller_size = info->struct_size;
    if (const int32_t s = flash::check_struct_size<flash_device_info>(caller_size, "info", "flash_device_info_init"); s != FLASH_OK)
      return s;
    // Filled at this library's layout, then copied back at the caller's.
    flash_device_info full = default_device_info();
    const int32_t status = device_info(device_type, device_id, &full);
    if (status == FLASH_OK) flash::write_versioned(info, full, caller_size);
    return status;
  });
}


FLASH_API uint32_t flash_compiled_algorithms(void) {
  int n = 0;
  const flash::Algorithm* const* list = flash::algorithms(&n);
  uint32_t mask = 0;
  for (int i = 0; i < n; ++i) mask |= 1u << list[i]->id;
  return mask;
}

FLASH_API size_t flash_struct_size(int32_t which) {
  switch (which) {
    case FLASH_STRUCT_TENSOR: return sizeof(flash_tensor);
    case FLASH_STRUCT_FWD_ARGS: return sizeof(flash_fwd_args);
    case FLASH_STRUCT_BLOCK_MASK: return sizeof(flash_block_mask);
    case FLASH_STRUCT_DEVICE_INFO: return sizeof(flash_device_info);
    case FLASH_STRUCT_BWD_ARGS: return sizeof(flash_bwd_args);
    case FLASH_STRUCT_KVCACHE_ARGS: return sizeof(flash_kvcache_args);
    case FLASH_STRUCT_COMBINE_ARGS: return sizeof(flash_combine_args);
    default: return 0;
  }
}

}  // extern "C"
