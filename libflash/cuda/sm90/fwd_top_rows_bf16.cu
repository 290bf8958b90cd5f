// One instantiation per file so the build compiles them in parallel: d64 causal's first rows (shapes.h,
// d64_causal_top_rows), the kernel behind the three-warpgroup one.
#include "top_rows.cuh"
FLASH_SM90_INSTANTIATE_TOP_ROWS(BF16)
