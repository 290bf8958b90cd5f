/* tests/c99_header.c -- flash.h must compile as strict C99 (-std=c99 -Wall -Wextra -pedantic -Werror). */
#include "flash.h"

int main(void) {
  flash_fwd_args args;
  flash_fwd_args_init(&args);
  return (int)flash_version_major() - FLASH_VERSION_MAJOR + (args.struct_size == sizeof(args) ? 0 : 1);
}
