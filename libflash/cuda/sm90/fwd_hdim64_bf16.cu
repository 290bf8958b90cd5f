// One instantiation per file so the build compiles them in parallel.
#include "fwd_kernel.cuh"
#include "shapes.h"
FLASH_SM90_INSTANTIATE(64, false, BF16)
