// libflash/dispatch.cpp -- the list of algorithms, and the path from a validated call to a backend.
#include "dispatch.h"

#include <cstdlib>
#include <initializer_list>
#include <memory>
#include <string>

#include "error.h"
#ifdef FLASH_WITH_CUDA
#include "cuda/runtime.h"
#endif

namespace flash {

// Each record lives next to its implementation.
extern const Algorithm kCpuFlash;   // libflash/cpu/flash_cpu.cpp
extern const Algorithm kCpuNaive;   // libflash/cpu/naive_cpu.cpp
#ifdef FLASH_WITH_CUDA
extern const Algorithm kCudaSm80;   // libflash/cuda/sm80/
extern const Algorithm kCudaNaive;  // libflash/cuda/naive/
#endif
#ifdef FLASH_WITH_SM90
extern const Algorithm kCudaSm90;   // libflash/cuda/sm90/
#endif

namespace {
// Preference order for AUTO: fastest first. Naive is last on each device: it is the baseline, picked
// only when nothing fused supports the problem.
const Algorithm* const kAlgorithms[] = {
#ifdef FLASH_WITH_SM90
    &kCudaSm90,
#endif
#ifdef FLASH_WITH_CUDA
    &kCudaSm80,
    &kCudaNaive,
#endif
    &kCpuFlash,
    &kCpuNaive,
};
constexpr int kNumAlgorithms = sizeof(kAlgorithms) / sizeof(kAlgorithms[0]);

const char* device_word(int32_t device_type) { return device_type == FLASH_DEVICE_CUDA ? "CUDA" : "CPU"; }

std::string compiled_names() {
  std::string s;
  for (const Algorithm* a : kAlgorithms) {
    if (s.find(a->name) != std::string::npos) continue;
    if (!s.empty()) s += ", ";
    s += a->name;
  }
  return s;
}
}  // namespace

const Algorithm* const* algorithms(int* count) {
  *count = kNumAlgorithms;
  return kAlgorithms;
}

const Algorithm* find_algorithm(int32_t id, int32_t device_type) {
  for (const Algorithm* a : kAlgorithms)
    if (a->id == id && a->device_type == device_type) return a;
  return nullptr;
}

namespace {
// The algorithm named by `requested` for tensors on device_type, or the reason there is none.
int32_t find_requested(int32_t requested, int32_t device_type, const Algorithm** out) {
  const Algorithm* a = find_algorithm(requested, device_type);
  if (a == nullptr) {
    bool other_device = false;
    for (const Algorithm* b : kAlgorithms) other_device |= b->id == requested;
    const char* name = flash_algorithm_name(requested);
    if (other_device)
      return fail(FLASH_ERROR_ALGORITHM_UNAVAILABLE, "algorithm ", name, " does not run on the ", device_word(device_type),
                  " (the tensors are on the ", device_word(device_type), ")");
    return fail(FLASH_ERROR_ALGORITHM_UNAVAILABLE, "algorithm ", name, " is not built into this library (built: ",
                compiled_names(), ")");
  }
  *out = a;
  return FLASH_OK;
}

// Whether `a` has a backward that supports p (supports_bwd if given, else the forward's supports()).
bool supports_backward(const Algorithm& a, const BwdParams& p, std::string* why) {
  if (a.bwd == nullptr) {
    *why = "no backward pass yet";
    return false;
  }
  return a.supports_bwd != nullptr ? a.supports_bwd(p, why) : a.supports(p, why);
}

// Runs `body` with p.workspace holding at least `need` bytes: the caller's (checked) or allocated for
// the call (host memory, or stream-ordered device memory freed after the work queued on p.stream).
template <class Body>
int32_t with_workspace(const Algorithm& alg, FwdParams& p, int32_t device_type, size_t need, const char* size_query,
                       Body&& body) {
  if (need > 0 && p.workspace != nullptr && p.workspace_size < need)
    return fail(FLASH_ERROR_WORKSPACE_TOO_SMALL, "workspace_size is ", p.workspace_size, " bytes but algorithm ", alg.name,
                " needs ", need, " for this call (see ", size_query, ")");
  if (device_type == FLASH_DEVICE_CPU) {
    std::unique_ptr<char[]> owned;
    if (need > 0 && p.workspace == nullptr) {
      owned.reset(new (std::nothrow) char[need]);
      if (!owned) return fail(FLASH_ERROR_OUT_OF_MEMORY, "could not allocate ", need, " bytes of host workspace");
      p.workspace = owned.get();
      p.workspace_size = need;
    }
    return body();
  }
#ifdef FLASH_WITH_CUDA
  cuda::DeviceGuard guard(p.device_id);
  void* owned = nullptr;
  if (need > 0 && p.workspace != nullptr)
    if (const int32_t s = cuda::check_device_pointer(p.workspace, p.device_id, "workspace"); s != FLASH_OK) return s;
  if (need > 0 && p.workspace == nullptr) {
    if (const int32_t s = cuda::malloc_async(&owned, need, p.stream); s != FLASH_OK) return s;
    p.workspace = owned;
    p.workspace_size = need;
  }
  const int32_t status = body();
  cuda::free_async(owned, p.stream);  // stream-ordered: freed after the kernels that use it
  return status;
#else
  return fail(FLASH_ERROR_INTERNAL, "CUDA algorithm in a CPU-only build");
#endif
}
}  // namespace

namespace {
// The requested algorithm (checked) or, for AUTO, the first in preference order that is available and
// supports the call; `supports` is the forward's or the backward's test, `what` names the pass in messages.
template <class Params, class Supports>
int32_t select(const Params& p, int32_t device_type, int32_t requested, const char* what, Supports&& supports,
               const Algorithm** out) {
  const int device_id = device_type == FLASH_DEVICE_CUDA ? p.device_id : 0;
  std::string why;
  if (requested != FLASH_ALGO_AUTO) {
    const Algorithm* a = nullptr;
    if (const int32_t s = find_requested(requested, device_type, &a); s != FLASH_OK) return s;
    if (!a->available(device_id, &why))
      return fail(FLASH_ERROR_ALGORITHM_UNAVAILABLE, "algorithm ", a->name, " is unavailable: ", why);
    if (!supports(*a, p, &why))
      return fail(FLASH_ERROR_UNSUPPORTED, "algorithm ", a->name, " does not support this ", what, ": ", why);
    *out = a;
    return FLASH_OK;
  }
  std::string reasons;
  for (const Algorithm* a : kAlgorithms) {
    if (a->device_type != device_type) continue;
    why.clear();
    if (a->available(device_id, &why) && supports(*a, p, &why)) {
      *out = a;
      return FLASH_OK;
    }
    reasons += std::string(reasons.empty() ? "" : "; ") + a->name + ": " + why;
  }
  return fail(FLASH_ERROR_UNSUPPORTED, "no algorithm supports this ", what, " on the ", device_word(device_type), " (",
              reasons, ")");
}
}  // namespace

int32_t select_algorithm(const FwdParams& p, int32_t device_type, int32_t requested, const Algorithm** out) {
  const auto supports = [](const Algorithm& a, const FwdParams& q, std::string* why) { return a.supports(q, why); };
  return select(p, device_type, requested, "call", supports, out);
}

int32_t select_bwd_algorithm(const BwdParams& p, int32_t device_type, int32_t requested, const Algorithm** out) {
  return select(p, device_type, requested, "backward call", supports_backward, out);
}

size_t bwd_workspace(const Algorithm& alg, const BwdParams& p) { return alg.bwd_workspace ? alg.bwd_workspace(p) : 0; }

namespace {
struct Named {
  const flash_tensor* t;
  const char* name;
};
struct NamedArray {
  const int32_t* data;
  const char* name;
};
// Device checks common to every CUDA call: the device exists and every pointer (tensors, the block mask's arrays,
// the varlen index arrays) is device memory on it.
int32_t check_cuda(std::initializer_list<Named> tensors, const flash_block_mask* mask,
                   std::initializer_list<NamedArray> arrays) {
#ifdef FLASH_WITH_CUDA
  const int id = tensors.begin()->t->device_id;
  if (const int32_t s = cuda::require_device(id); s != FLASH_OK) return s;
  for (const Named& x : tensors)
    if (x.t->data != nullptr)
      if (const int32_t s = cuda::check_device_pointer(x.t->data, id, x.name); s != FLASH_OK) return s;
  if (mask != nullptr) {
    if (const int32_t s = cuda::check_device_pointer(mask->kv_num_blocks, id, "block_mask->kv_num_blocks"); s != FLASH_OK)
      return s;
    if (mask->kv_indices != nullptr)
      if (const int32_t s = cuda::check_device_pointer(mask->kv_indices, id, "block_mask->kv_indices"); s != FLASH_OK)
        return s;
  }
  for (const NamedArray& x : arrays)
    if (x.data != nullptr)
      if (const int32_t s = cuda::check_device_pointer(x.data, id, x.name); s != FLASH_OK) return s;
  return FLASH_OK;
#else
  (void)tensors;
  (void)mask;
  (void)arrays;
  return fail(FLASH_ERROR_NO_CUDA_DEVICE, "no CUDA device: this libflash was built without CUDA (FLASH_WITH_CUDA=OFF)");
#endif
}
}  // namespace

int32_t check_cuda_tensors(const flash_fwd_args& a) {
  return check_cuda({{&a.q, "q"}, {&a.k, "k"}, {&a.v, "v"}, {&a.o, "o"}, {&a.lse, "lse"}}, a.block_mask,
                    {{a.cu_seqlens_q, "cu_seqlens_q"}, {a.cu_seqlens_k, "cu_seqlens_k"}, {a.seqused_k, "seqused_k"}});
}

int32_t check_cuda_tensors(const flash_bwd_args& a) {
  return check_cuda({{&a.q, "q"}, {&a.k, "k"}, {&a.v, "v"}, {&a.o, "o"}, {&a.d_o, "d_o"}, {&a.lse, "lse"}, {&a.dq, "dq"},
                     {&a.dk, "dk"}, {&a.dv, "dv"}},
                    a.block_mask,
                    {{a.cu_seqlens_q, "cu_seqlens_q"}, {a.cu_seqlens_k, "cu_seqlens_k"}, {a.seqused_k, "seqused_k"}});
}

int32_t run_fwd(const Algorithm& alg, FwdParams& p, int32_t device_type) {
  return with_workspace(alg, p, device_type, alg.fwd_workspace(p), "flash_fwd_workspace_size", [&] { return alg.fwd(p); });
}

int32_t run_bwd(const Algorithm& alg, BwdParams& p, int32_t device_type) {
  return with_workspace(alg, p, device_type, bwd_workspace(alg, p), "flash_bwd_workspace_size", [&] { return alg.bwd(p); });
}

uint32_t available_algorithms(int32_t device_type, int32_t device_id) {
  uint32_t mask = 0;
  std::string why;
  for (const Algorithm* a : kAlgorithms)
    if (a->device_type == device_type && a->available(device_id, &why)) mask |= 1u << a->id;
  return mask;
}

}  // namespace flash
