// One (head dim, dtype) per file so the build compiles them in parallel (sm_90a only: wgmma). The default:
// dQ deferred by one step (kPipe 2) and added by reductions; v4's in-step dQ for deterministic mode
// (sm80_bwd.cpp picks one at run time; docs/perf-log.md "sm80 backward" v5).
#include "bwd_kernel.cuh"
FLASH_SM80_BWD_SM90_INSTANTIATE(128, 64, 2, false, true, FP16, 2, true)
FLASH_SM80_BWD_SM90_INSTANTIATE(128, 64, 2, false, true, FP16, 0, true)
