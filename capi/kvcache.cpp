// capi/kvcache.cpp -- the extern "C" entry points of KV-cache attention and flash_combine (flash.h, since 1.2).
//
// The same path as flash_fwd (capi/api.cpp): the caller's struct read at this library's layout
// (capi/versioned.h), every rule checked (capi/validate_kvcache.cpp), then the backend. Only the cpu algorithm
// serves these calls so far; CUDA tensors are validated and then refused with FLASH_ERROR_ALGORITHM_UNAVAILABLE.
// Nothing here throws across the ABI.
#include <cstring>
#include <memory>
#include <new>
#include <vector>

#include "../flash.h"
#include "../libflash/error.h"
#include "../libflash/kvcache.h"
#include "validate_kvcache.h"
#include "versioned.h"

namespace flash {
// Sizes of the first ABI version (1.2) of each struct: its last field's end.
template <> struct FirstVersion<flash_kvcache_args> {
  static constexpr size_t size = offsetof(flash_kvcache_args, workspace_size) + sizeof(size_t);  // 1.2
};
template <> struct FirstVersion<flash_combine_args> {
  static constexpr size_t size = offsetof(flash_combine_args, stream) + sizeof(void*);  // 1.2
};
}  // namespace flash

using flash::fail;

namespace {

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

template <class T>
T zeroed() {
  T t;
  std::memset(static_cast<void*>(&t), 0, sizeof(t));
  t.struct_size = sizeof(t);
  return t;
}

flash_kvcache_args default_kvcache_args() {
  flash_kvcache_args a = zeroed<flash_kvcache_args>();
  a.softmax_scale = 0.0f;
  a.window_left = -1;
  a.window_right = -1;
  a.num_splits = 0;
  a.algorithm = FLASH_ALGO_AUTO;
  a.algorithm_used = -1;
  a.num_splits_used = 0;
  return a;
}

flash_combine_args default_combine_args() { return zeroed<flash_combine_args>(); }

template <class T>
int32_t init_sized(T* p, size_t size, const T& defaults, const char* what, const char* init) {
  if (p == nullptr) return fail(FLASH_ERROR_NULL_POINTER, what, " is NULL");
  if (const int32_t s = flash::check_struct_size<T>(size, what, init); s != FLASH_OK) return s;
  flash::write_versioned(p, defaults, size);
  return FLASH_OK;
}

constexpr const char* kNoGpu =
    " has no GPU kernel yet (issue 71: the sm80/sm90 split-KV kernels are to come); pass CPU tensors";

// Which backend serves the call: only the cpu algorithm, on CPU tensors.
int32_t select_kvcache(int32_t device_type, int32_t algorithm, const char* what) {
  if (device_type == FLASH_DEVICE_CUDA) return fail(FLASH_ERROR_ALGORITHM_UNAVAILABLE, what, kNoGpu);
  if (algorithm == FLASH_ALGO_AUTO || algorithm == FLASH_ALGO_CPU) return FLASH_OK;
  if (algorithm == FLASH_ALGO_NAIVE)
    return fail(FLASH_ERROR_UNSUPPORTED, "algorithm naive does not support ", what, " (use cpu or auto)");
  return fail(FLASH_ERROR_ALGORITHM_UNAVAILABLE, "algorithm ", flash_algorithm_name(algorithm), " does not run on the CPU (",
              what, " on CPU tensors runs on cpu)");
}

// The caller's arguments read and validated; FLASH_OK when the cpu backend can run them.
int32_t prepare_kvcache(const flash_kvcache_args* user, flash_kvcache_args* args, flash::KvcacheParams* p) {
  if (user == nullptr) return fail(FLASH_ERROR_NULL_POINTER, "args is NULL");
  if (const int32_t s = flash::read_versioned(user, default_kvcache_args(), args, "args", "flash_kvcache_args_init");
      s != FLASH_OK)
    return s;
  if (const int32_t s = flash::validate_kvcache(args, p); s != FLASH_OK) return s;
  return select_kvcache(args->q.device_type, args->algorithm, "flash_fwd_kvcache");
}

}  // namespace

extern "C" {

FLASH_API int32_t flash_kvcache_args_init_sized(flash_kvcache_args* args, size_t struct_size) {
  return init_sized(args, struct_size, default_kvcache_args(), "args", "flash_kvcache_args_init");
}

FLASH_API int32_t flash_fwd_kvcache_workspace_size(const flash_kvcache_args* user, size_t* bytes) {
  return guarded([&]() -> int32_t {
    if (bytes == nullptr) return fail(FLASH_ERROR_NULL_POINTER, "bytes is NULL");
    *bytes = 0;
    flash_kvcache_args args;
    flash::KvcacheParams p;
    if (const int32_t s = prepare_kvcache(user, &args, &p); s != FLASH_OK) return s;
    *bytes = flash::cpu::kvcache_workspace(p);
    return FLASH_OK;
  });
}

FLASH_API int32_t flash_fwd_kvcache(flash_kvcache_args* user) {
  return guarded([&]() -> int32_t {
    flash_kvcache_args args;
    flash::KvcacheParams p;
    if (const int32_t s = prepare_kvcache(user, &args, &p); s != FLASH_OK) return s;
    const size_t need = flash::cpu::kvcache_workspace(p);
    std::unique_ptr<double[]> owned;
    if (need > 0) {
      if (p.workspace != nullptr && p.workspace_size < need)
        return fail(FLASH_ERROR_WORKSPACE_TOO_SMALL, "workspace_size is ", p.workspace_size, " bytes but this call needs ",
                    need, " (see flash_fwd_kvcache_workspace_size)");
      if (p.workspace == nullptr) {
        owned.reset(new (std::nothrow) double[(need + sizeof(double) - 1) / sizeof(double)]);
        if (!owned) return fail(FLASH_ERROR_OUT_OF_MEMORY, "could not allocate ", need, " bytes of host workspace");
        p.workspace = owned.get();
        p.workspace_size = need;
      }
    }
    const int32_t splits = flash::cpu::kvcache_num_splits(p);
    const int32_t s = flash::cpu::kvcache_fwd(p);
    if (s == FLASH_OK) {
      // Fields of every version of the struct (1.2 is the first).
      user->algorithm_used = FLASH_ALGO_CPU;
      user->num_splits_used = splits;
    }
    return s;
  });
}

FLASH_API int32_t flash_combine_args_init_sized(flash_combine_args* args, size_t struct_size) {
  return init_sized(args, struct_size, default_combine_args(), "args", "flash_combine_args_init");
}

FLASH_API int32_t flash_combine(flash_combine_args* user) {
  return guarded([&]() -> int32_t {
    if (user == nullptr) return fail(FLASH_ERROR_NULL_POINTER, "args is NULL");
    flash_combine_args args;
    if (const int32_t s = flash::read_versioned(user, default_combine_args(), &args, "args", "flash_combine_args_init");
        s != FLASH_OK)
      return s;
    flash::CombineParams p;
    std::vector<flash::CombinePart> parts;
    if (const int32_t s = flash::validate_combine(&args, &p, &parts); s != FLASH_OK) return s;
    if (const int32_t s = select_kvcache(args.o.device_type, FLASH_ALGO_AUTO, "flash_combine"); s != FLASH_OK) return s;
    return flash::cpu::combine(p);
  });
}

}  // extern "C"
