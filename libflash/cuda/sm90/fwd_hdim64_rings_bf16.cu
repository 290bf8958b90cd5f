// One instantiation per file so the build compiles them in parallel: d64 block-sparse on two K/V rings.
#include "fwd_kernel.cuh"
#include "shapes.h"
FLASH_SM90_INSTANTIATE_TWO_RINGS(BF16)
