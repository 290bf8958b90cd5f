// One instantiation per file. The 99 KB-shared-memory fallback shape for head dim 256 (tile_table.h).
#include "fwd_kernel.cuh"
FLASH_SM80_INSTANTIATE(256, 1, BF16)
