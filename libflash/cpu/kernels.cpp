// libflash/cpu/kernels.cpp -- picks the tile kernels' level once, from what the CPU (and the OS's saved
// register state, which __builtin_cpu_supports also checks) supports, among the levels the build has
// (FLASH_CPU_AVX2, FLASH_CPU_AVX512: CMakeLists.txt).
#include "kernels.h"

namespace flash::cpu {

namespace portable { const Kernels& table(); }
#if defined(FLASH_CPU_AVX2)
namespace avx2 { const Kernels& table(); }
#endif
#if defined(FLASH_CPU_AVX512)
namespace avx512 { const Kernels& table(); }
namespace avx512bf16 { const Bf16Kernels& table(); }
#endif

const Kernels& kernels() {
  static const Kernels& chosen = []() -> const Kernels& {
    __builtin_cpu_init();  // idempotent; needed should the first call come from a constructor
#if defined(FLASH_CPU_AVX512)
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
      return avx512::table();
#endif
#if defined(FLASH_CPU_AVX2)
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return avx2::table();
#endif
    return portable::table();
  }();
  return chosen;
}

const Bf16Kernels* bf16_kernels() {
  static const Bf16Kernels* chosen = []() -> const Bf16Kernels* {
#if defined(FLASH_CPU_AVX512)
    if (&kernels() == &avx512::table() && __builtin_cpu_supports("avx512bf16")) return &avx512bf16::table();
#endif
    return nullptr;
  }();
  return chosen;
}

}  // namespace flash::cpu
