// One instantiation per file so the build compiles them in parallel.
#include "fwd_kernel.cuh"
#include "shapes.h"
FLASH_SM90_INSTANTIATE(128, false, flash::sm90::shape_for(128, false).block_n, flash::sm90::shape_for(128, false).stages, BF16)
