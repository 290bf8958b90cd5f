// One instantiation per file so the build compiles them in parallel: d256 causal-like masks, key blocks walked upwards
// (shapes.h, use_upward_kernel; Traits::kUpward).
#include "fwd_kernel.cuh"
#include "shapes.h"
FLASH_SM90_INSTANTIATE_UP(256, BF16)
