// One instantiation per file so the build compiles them in parallel.
#include "fwd_kernel.cuh"
#include "shapes.h"
FLASH_SM90_INSTANTIATE(256, false, flash::sm90::shape_for(256, false).block_n, flash::sm90::shape_for(256, false).stages, BF16)
