// One instantiation per file so the build compiles them in parallel.
#include "fwd_kernel.cuh"
FLASH_SM80_INSTANTIATE(64, 0, BF16)
