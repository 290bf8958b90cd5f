// One instantiation per file so the build compiles them in parallel: d128 with long key ranges, 192-key blocks.
#include "fwd_kernel.cuh"
#include "shapes.h"
FLASH_SM90_INSTANTIATE_LONG(FP16, false)
