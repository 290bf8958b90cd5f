// One instantiation per file so the build compiles them in parallel: d64 dense's second kernel (two warpgroups, the
// rows the three-warpgroup kernel leaves: shapes.h, d64_split_rows).
#include "fwd_kernel.cuh"
#include "shapes.h"
FLASH_SM90_INSTANTIATE_ROWS(FP16)
