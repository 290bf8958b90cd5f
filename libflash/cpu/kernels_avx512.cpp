// libflash/cpu/kernels_avx512.cpp -- the tile kernels for AVX-512 (F, VL, BW, DQ): compiled with those flags
// (CMakeLists.txt), run only where kernels.cpp finds them. 32 zmm registers: an fp32 C block of 6 rows x 2
// vectors (12 chunk accumulators, 12 totals, 2 B vectors, 1 broadcast); a double one of 6 x 4 (24 + 4 + 1).
#define FLASH_CPU_ISA avx512
#define FLASH_CPU_ISA_NAME "avx512"
#define FLASH_CPU_MR 6
#define FLASH_CPU_NV 2
#define FLASH_CPU_MR64 6
#define FLASH_CPU_NV64 4
#include "kernels_impl.h"
