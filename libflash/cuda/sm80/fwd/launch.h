// libflash/cuda/sm80/fwd/launch.h -- the host entry points of the sm80 forward kernels (no CUDA headers).
// Each (head dim, tile variant, dtype) is instantiated in its own fwd_hdim*_*.cu file.
#pragma once
#include <cstdint>

#include "../../../params.h"

namespace flash::sm80 {

template <int kHeadDim, int kVariant, DType kDType>
int32_t launch_fwd(const FwdParams& p);

}  // namespace flash::sm80
