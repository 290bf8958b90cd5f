// One instantiation per file so the build compiles them in parallel.
#include "bwd_kernel.cuh"
FLASH_SM80_BWD_INSTANTIATE(128, 0, BF16)
