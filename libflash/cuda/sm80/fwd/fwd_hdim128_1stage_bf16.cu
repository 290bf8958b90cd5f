// One instantiation per file. Head dim 128, single-buffered K/V shape for parts where two 96 KB CTAs do
// not fit per SM (tile_table.h).
#include "fwd_kernel.cuh"
FLASH_SM80_INSTANTIATE(128, 1, BF16)
