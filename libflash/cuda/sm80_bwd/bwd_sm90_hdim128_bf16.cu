// One (head dim, dtype) per file so the build compiles them in parallel (sm_90a only: wgmma). Both dQ
// schedules: in-step (v4) and deferred by one step (kPipe, v5); sm80_bwd.cpp picks one at run time.
#include "bwd_kernel_sm90.cuh"
FLASH_SM80_BWD_SM90_INSTANTIATE(128, 64, 2, false, true, BF16, 0, 0)
FLASH_SM80_BWD_SM90_INSTANTIATE(128, 64, 2, false, true, BF16, 1, 0)
FLASH_SM80_BWD_SM90_INSTANTIATE(128, 64, 2, false, true, BF16, 2, 0)
