// Timing experiment (LIBFLASH_BWD_SM90_VARIANT, sm80_bwd.cpp); one instantiation per file.
#include "bwd_kernel_sm90.cuh"
FLASH_SM80_BWD_SM90_INSTANTIATE(64, 128, 2, false, true, BF16)
