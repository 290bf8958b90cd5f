// libflash/cuda/sm80/sm80.cpp -- the Algorithm record of the mma.sync kernels (FLASH_ALGO_SM80): the forward
// (fwd/) and the backward family (bwd/; on sm_90 devices its plan runs the wgmma kernel of ../sm90/bwd).
#include <cstdint>
#include <string>

#include "../../../flash.h"
#include "../../algorithm.h"
#include "../runtime.h"
#include "bwd/bwd.h"
#include "fwd/fwd.h"

namespace flash {
namespace sm80 {
namespace {

bool available(int32_t device_id, std::string* why) {
  const int cc = cuda::compute_capability(device_id);
  if (cc >= 80) return true;
  *why = "needs compute capability 8.0 or newer (device " + std::to_string(device_id) + " has " + std::to_string(cc / 10) +
         "." + std::to_string(cc % 10) + ")";
  return false;
}

}  // namespace
}  // namespace sm80

extern const Algorithm kCudaSm80 = {FLASH_ALGO_SM80, "sm80", FLASH_DEVICE_CUDA, sm80::available, sm80::supports,
                                    sm80::workspace, sm80::fwd, bwd::supports, bwd::workspace, bwd::run};

}  // namespace flash
