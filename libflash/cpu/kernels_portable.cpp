// libflash/cpu/kernels_portable.cpp -- the tile kernels compiled for the build's baseline (SSE2 on x86-64, or
// whatever the target is): what runs where no faster level is found, and everywhere on other architectures.
// Sized for 16 xmm registers, a vector of 16 floats (or 8 doubles) taking four: C blocks of 2 rows x 1 vector.
#define FLASH_CPU_ISA portable
#define FLASH_CPU_ISA_NAME "portable"
#define FLASH_CPU_MR 2
#define FLASH_CPU_NV 1
#define FLASH_CPU_MR64 2
#define FLASH_CPU_NV64 1
#include "kernels_impl.h"
