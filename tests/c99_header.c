/* tests/c99_header.c -- flash.h must compile as strict C99 (-std=c99 -Wall -Wextra -pedantic -Werror). */
#include "flash.h"

int main(void) {
  flash_fwd_args args;
  flash_kvcache_args kv;
  flash_combine_args comb;
  flash_fwd_args_init(&args);
  flash_kvcache_args_init(&kv);
  flash_combine_args_init(&comb);
  return (int)flash_version_major() - FLASH_VERSION_MAJOR + (args.struct_size == sizeof(args) ? 0 : 1) +
         (kv.struct_size == sizeof(kv) ? 0 : 1) + (comb.struct_size == sizeof(comb) ? 0 : 1);
}
