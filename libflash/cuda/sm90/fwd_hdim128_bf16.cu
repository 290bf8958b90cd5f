// One instantiation per file so the build compiles them in parallel.
#include "fwd_kernel.cuh"
#include "shapes.h"
FLASH_SM90_INSTANTIATE(128, false, BF16)
