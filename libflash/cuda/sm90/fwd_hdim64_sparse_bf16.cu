// One instantiation per file so the build compiles them in parallel.
#include "fwd_kernel.cuh"
#include "shapes.h"
FLASH_SM90_INSTANTIATE(64, true, flash::sm90::shape_for(64, true).block_n, flash::sm90::shape_for(64, true).stages, BF16)
