// One instantiation per file so the build compiles them in parallel: d128 dense on 128-key blocks with the static
// order's last round split, which runs only the pieces behind the 128-key kernel's whole rounds (shapes.h, pair_split).
#include "fwd_kernel.cuh"
#include "shapes.h"
FLASH_SM90_INSTANTIATE_SPLIT(128, FP16)
