// One instantiation per file so the build compiles them in parallel: d256 dense with the static order's last round
// split (shapes.h, use_split_kernel).
#include "fwd_kernel.cuh"
#include "shapes.h"
FLASH_SM90_INSTANTIATE_SPLIT(256, FP16)
