// libflash/cuda/sm90/sm90.cpp -- the Algorithm record of FLASH_ALGO_SM90: the Hopper forward (sm90/fwd/) and, for the
// backward, the backward family (sm80/bwd/, whose plan runs the wgmma kernel of sm90/bwd/ on sm_90). The forward's
// support check, workspace query and launch all take their answer from one plan() (fwd/plan.cpp). Anything the plan
// refuses, AUTO hands to sm80; the capability query reports why.
#include <cstdint>
#include <string>

#include "../../../flash.h"
#include "../../algorithm.h"
#include "../../error.h"
#include "../ptx/plan.h"
#include "../runtime.h"
#include "../sm80/bwd/bwd.h"
#include "fwd/plan.h"

namespace flash {
namespace sm90 {

// One instantiation per variant and dtype (fwd/launch.cuh; the .cu files generate_kernels.py writes).
template <Variant V, DType T>
int32_t launch_fwd(const FwdParams& p, const Launch& l);

namespace {

bool available(int32_t device_id, std::string* why) {
  const int cc = cuda::compute_capability(device_id);
  if (cc == 90) return true;
  *why = "needs compute capability 9.0 (wgmma and TMA code built for sm_90a); device " + std::to_string(device_id) +
         " has " + std::to_string(cc / 10) + "." + std::to_string(cc % 10);
  return false;
}

Device device_of(const FwdParams& p) {
  Device d;
  d.sms = cuda::persistent_ctas(p.device_id);
  d.smem_optin = cuda::shared_mem_per_block_optin(p.device_id);
  d.l2_bytes = cuda::l2_cache_bytes(p.device_id);
  return d;
}

bool supports(const FwdParams& p, std::string* why) {
  const FwdPlan pl = plan(p, device_of(p));
  if (!pl.ok()) *why = pl.why;
  return pl.ok();
}

size_t workspace(const FwdParams& p) { return plan(p, device_of(p)).workspace; }

// The backward is the backward family's (sm80/bwd/bwd.cpp: its plan runs the wgmma main kernel on sm_90), which reads
// cu_seqlens itself: varlen included, the same kernels FLASH_ALGO_SM80 runs.
bool supports_bwd(const BwdParams& p, std::string* why) { return bwd::supports(p, why); }

int32_t fwd(const FwdParams& p) {
  const FwdPlan pl = plan(p, device_of(p));
  if (!pl.ok()) return fail(FLASH_ERROR_INTERNAL, "sm90: ", pl.why);
  for (int i = 0; i < pl.launches; ++i) {
    const Launch& l = pl.launch[i];
    const int32_t st = cuda::with_dtype(p.dtype, [&](auto dtype) {
      return cuda::with_index<int(Variant::kNone)>(int(l.variant), [&](auto v) {
        return launch_fwd<Variant(decltype(v)::value), decltype(dtype)::value>(p, l);
      });
    });
    if (st != FLASH_OK) return st;  // (the launch set the message)
  }
  return FLASH_OK;
}

}  // namespace
}  // namespace sm90

extern const Algorithm kCudaSm90 = {FLASH_ALGO_SM90, "sm90", FLASH_DEVICE_CUDA, sm90::available, sm90::supports,
                                    sm90::workspace, sm90::fwd, sm90::supports_bwd, bwd::workspace, bwd::run};

}  // namespace flash
