// One instantiation per file so the build compiles them in parallel: d128 block-sparse with turns at the SFU, for
// long lists (shapes.h, sfu_turns_by_length).
#include "fwd_kernel.cuh"
#include "shapes.h"
FLASH_SM90_INSTANTIATE_SPARSE_TURNS(BF16)
