// capi/kvcache.cpp -- the extern "C" entry points of KV-cache attention and flash_combine (flash.h, since 1.2).
//
// The same path as flash_fwd (capi/api.cpp): the caller's struct read at this library's layout
// (capi/versioned.h), every rule checked (capi/validate_kvcache.cpp), then the backend: the cpu algorithm on CPU
// tensors, the sm80 KV-cache family (libflash/cuda/sm80/kvcache) on CUDA tensors.
// Nothing here throws across the ABI.
#include <cstring>
#include <initializer_list>
#include <string>
#include <utility>
#include <memory>
#include <new>
#include <vector>

#include "../flash.h"
#include "../libflash/error.h"
#include "../libflash/kvcache.h"
#include "validate.h"
#include "versioned.h"
#ifdef FLASH_WITH_CUDA
#include "../libflash/cuda/runtime.h"
#include "../libflash/cuda/sm80/kvcache/plan.h"
#endif

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

// Which backend serves the call: the cpu algorithm on CPU tensors; on CUDA tensors the sm80 family
// (libflash/cuda/sm80/kvcache: mma.sync and cp.async, the one KV-cache kernel for sm_80 and sm_90 alike).
int32_t select_kvcache(int32_t device_type, int32_t algorithm, const char* what) {
  if (device_type == FLASH_DEVICE_CUDA) {
#ifdef FLASH_WITH_CUDA
    if (algorithm == FLASH_ALGO_AUTO || algorithm == FLASH_ALGO_SM80) return FLASH_OK;
    return fail(FLASH_ERROR_ALGORITHM_UNAVAILABLE, "algorithm ", flash_algorithm_name(algorithm), " has no ", what,
                " kernel: on CUDA tensors the sm80 family serves it, on sm_80 and sm_90 alike (pass auto or sm80)");
#else
    (void)algorithm;
    return fail(FLASH_ERROR_NO_CUDA_DEVICE, "no CUDA device: this libflash was built without CUDA (FLASH_WITH_CUDA=OFF)");
#endif
  }
  if (algorithm == FLASH_ALGO_AUTO || algorithm == FLASH_ALGO_CPU) return FLASH_OK;
  if (algorithm == FLASH_ALGO_NAIVE)
    return fail(FLASH_ERROR_UNSUPPORTED, "algorithm naive does not support ", what, " (use cpu or auto)");
  return fail(FLASH_ERROR_ALGORITHM_UNAVAILABLE, "algorithm ", flash_algorithm_name(algorithm), " does not run on the CPU (",
              what, " on CPU tensors runs on cpu)");
}

#ifdef FLASH_WITH_CUDA
// CUDA calls: the device exists and every pointer the call names is device memory on it.
int32_t check_cuda_pointers(int32_t device_id, std::initializer_list<std::pair<const void*, const char*>> pointers) {
  if (const int32_t s = flash::cuda::require_device(device_id); s != FLASH_OK) return s;
  for (const auto& [ptr, name] : pointers)
    if (ptr != nullptr)
      if (const int32_t s = flash::cuda::check_device_pointer(ptr, device_id, name); s != FLASH_OK) return s;
  return FLASH_OK;
}
#endif

// The caller's arguments read and validated; FLASH_OK when a backend can run them.
int32_t prepare_kvcache(const flash_kvcache_args* user, flash_kvcache_args* args, flash::KvcacheParams* p) {
  if (user == nullptr) return fail(FLASH_ERROR_NULL_POINTER, "args is NULL");
  if (const int32_t s = flash::read_versioned(user, default_kvcache_args(), args, "args", "flash_kvcache_args_init");
      s != FLASH_OK)
    return s;
  // As flash_fwd (capi/api.cpp): the init function writes algorithm_used = -1 and a successful call the id of the
  // algorithm that ran (never 0, FLASH_ALGO_AUTO), so 0 means the struct never went through it -- typically
  // zero-filled with struct_size set, whose window (0, 0) would silently mean "the diagonal only".
  if (args->algorithm_used == 0)
    return fail(FLASH_ERROR_INVALID_ARGUMENT, "args->algorithm_used is 0, which flash_kvcache_args_init never writes: the "
                "struct was not initialised (zero-filled, its window_left/window_right would be 0, the diagonal only). "
                "Call flash_kvcache_args_init(&args) first, then set the fields you need");
  if (const int32_t s = flash::validate_kvcache(args, p); s != FLASH_OK) return s;
  if (const int32_t s = select_kvcache(args->q.device_type, args->algorithm, "flash_fwd_kvcache"); s != FLASH_OK) return s;
#ifdef FLASH_WITH_CUDA
  if (args->q.device_type == FLASH_DEVICE_CUDA) {
    if (const int32_t s = check_cuda_pointers(p->device_id, {{args->q.data, "q"}, {args->k_cache.data, "k_cache"},
                                                            {args->v_cache.data, "v_cache"}, {args->k_new.data, "k_new"},
                                                            {args->v_new.data, "v_new"}, {args->o.data, "o"},
                                                            {args->lse.data, "lse"}, {args->cache_seqlens, "cache_seqlens"},
                                                            {args->cache_batch_idx, "cache_batch_idx"},
                                                            {args->block_table, "block_table"}});
        s != FLASH_OK)
      return s;
    std::string why;
    if (!flash::sm80::kvcache::supports(*p, &why))
      return fail(FLASH_ERROR_UNSUPPORTED, "flash_fwd_kvcache on CUDA tensors (sm80 kernels) ", why);
  }
#endif
  return FLASH_OK;
}

// Workspace bytes of a prepared call.
size_t kvcache_workspace(const flash_kvcache_args& args, const flash::KvcacheParams& p) {
#ifdef FLASH_WITH_CUDA
  if (args.q.device_type == FLASH_DEVICE_CUDA) return flash::sm80::kvcache::workspace(p);
#endif
  (void)args;
  return flash::cpu::kvcache_workspace(p);
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
    *bytes = kvcache_workspace(args, p);
    return FLASH_OK;
  });
}

FLASH_API int32_t flash_fwd_kvcache(flash_kvcache_args* user) {
  return guarded([&]() -> int32_t {
    flash_kvcache_args args;
    flash::KvcacheParams p;
    if (const int32_t s = prepare_kvcache(user, &args, &p); s != FLASH_OK) return s;
#ifdef FLASH_WITH_CUDA
    if (args.q.device_type == FLASH_DEVICE_CUDA) {
      if (p.workspace != nullptr && flash::sm80::kvcache::workspace(p) > 0)
        if (const int32_t s = flash::cuda::check_device_pointer(p.workspace, p.device_id, "workspace"); s != FLASH_OK) return s;
      int32_t splits = 0;
      const int32_t s = flash::sm80::kvcache::run(p, &splits);
      if (s == FLASH_OK) {
        user->algorithm_used = FLASH_ALGO_SM80;
        user->num_splits_used = splits;
      }
      return s;
    }
#endif
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
#ifdef FLASH_WITH_CUDA
    if (args.o.device_type == FLASH_DEVICE_CUDA) {
      std::string why;
      if (!flash::sm80::kvcache::supports_combine(p, &why))
        return fail(FLASH_ERROR_UNSUPPORTED, "flash_combine on CUDA tensors ", why);
      if (const int32_t s = flash::cuda::require_device(p.device_id); s != FLASH_OK) return s;
      for (int32_t i = 0; i < p.num_parts; ++i) {
        const std::string on = "o_parts[" + std::to_string(i) + "]", ln = "lse_parts[" + std::to_string(i) + "]";
        if (const int32_t s = flash::cuda::check_device_pointer(args.o_parts[i].data, p.device_id, on.c_str()); s != FLASH_OK)
          return s;
        if (const int32_t s = flash::cuda::check_device_pointer(args.lse_parts[i].data, p.device_id, ln.c_str()); s != FLASH_OK)
          return s;
      }
      if (const int32_t s = check_cuda_pointers(p.device_id, {{args.o.data, "o"}, {args.lse.data, "lse"}}); s != FLASH_OK)
        return s;
      return flash::sm80::kvcache::combine(p);
    }
#endif
    return flash::cpu::combine(p);
  });
}

}  // extern "C"
