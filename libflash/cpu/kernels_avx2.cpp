// libflash/cpu/kernels_avx2.cpp -- the tile kernels for AVX2 + FMA: compiled with those flags (CMakeLists.txt),
// run only where kernels.cpp finds them. 16 ymm registers, a vector taking two: an fp32 C block of 3 rows x 1
// vector (6 + 6 registers of sums, 2 for B, 1 broadcast); a double one of 4 x 1 (8 + 2 + 1).
#define FLASH_CPU_ISA avx2
#define FLASH_CPU_ISA_NAME "avx2"
#define FLASH_CPU_MR 3
#define FLASH_CPU_NV 1
#define FLASH_CPU_MR64 4
#define FLASH_CPU_NV64 1
#include "kernels_impl.h"
