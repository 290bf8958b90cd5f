// One instantiation per file so the build compiles them in parallel (sm_90a only: wgmma).
#include "bwd_kernel_sm90.cuh"
FLASH_SM80_BWD_SM90_INSTANTIATE(128, 64, 2, false, true, BF16)
