// libflash/cpu/kernels.cpp -- picks the tile kernels' level once, from what the CPU (and the OS's saved
// register state, which __builtin_cpu_supports also checks) supports.
#include "kernels.h"

namespace flash::cpu {

namespace portable { const Kernels& table(); }
#if defined(FLASH_CPU_X86_LEVELS)
namespace avx2 { const Kernels& table(); }
namespace avx512 { const Kernels& table(); }
#endif

const Kernels& kernels() {
  static const Kernels& chosen = [] () -> const Kernels& {
#if defined(FLASH_CPU_X86_LEVELS)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
      return avx512::table();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return avx2::table();
#endif
    return portable::table();
  }();
  return chosen;
}

}  // namespace flash::cpu
