// capi/versioned.h -- reading and initialising argument structs of another version of flash.h.
//
// Every public struct starts with size_t struct_size and only ever grows at its end. A caller built
// against an OLDER header passes a smaller struct: we copy what it has over the library's defaults,
// so its missing (newer) fields read as their defaults. A caller built against a NEWER header than this
// library passes a larger struct whose extra fields we cannot honour: that is an error, never a
// silently ignored option. Init functions write only the caller's struct_size bytes.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstring>

#include "../flash.h"
#include "../libflash/error.h"

namespace flash {

// Size of each struct in the first ABI version that had it: its last field then + that field's size.
template <class T> struct FirstVersion;
template <> struct FirstVersion<flash_fwd_args> {
  static constexpr size_t size = offsetof(flash_fwd_args, workspace_size) + sizeof(size_t);  // 1.0
};
template <> struct FirstVersion<flash_bwd_args> {
  static constexpr size_t size = offsetof(flash_bwd_args, workspace_size) + sizeof(size_t);  // 1.1
};
template <> struct FirstVersion<flash_block_mask> {
  static constexpr size_t size = offsetof(flash_block_mask, kv_indices_strides) + 4 * sizeof(int64_t);  // 1.0
};
template <> struct FirstVersion<flash_device_info> {
  static constexpr size_t size = offsetof(flash_device_info, algorithms) + sizeof(uint32_t);  // 1.0
};

// The layouts of the structs that grew since their first version: the size of each earlier version (what a caller
// built against that flash.h passes as struct_size; every field past it reads as its default).
struct Layouts {
  // flash_fwd_args 1.0-1.2 and flash_bwd_args 1.1-1.2: up to workspace_size. 1.3 appended the varlen fields
  // (cu_seqlens_q .. reserved_1_3), whose defaults (0 / NULL) mean a dense call.
  static constexpr size_t fwd_args_1_2 = FirstVersion<flash_fwd_args>::size;
  static constexpr size_t bwd_args_1_2 = FirstVersion<flash_bwd_args>::size;
};
static_assert(offsetof(flash_fwd_args, cu_seqlens_q) == Layouts::fwd_args_1_2, "1.3 fields must follow the 1.2 layout");
static_assert(offsetof(flash_bwd_args, cu_seqlens_q) == Layouts::bwd_args_1_2, "1.3 fields must follow the 1.2 layout");
// No trailing padding (flash.h, ABI RULES): a later field must grow sizeof, or an older library could not tell a
// newer caller's struct from its own.
static_assert(sizeof(flash_fwd_args) == offsetof(flash_fwd_args, reserved_1_3) + sizeof(int32_t), "trailing padding");
static_assert(sizeof(flash_bwd_args) == offsetof(flash_bwd_args, reserved_1_3) + sizeof(int32_t), "trailing padding");

// FLASH_OK if a caller's struct_size is one this library can serve.
template <class T>
int32_t check_struct_size(size_t size, const char* what, const char* init) {
  if (size < FirstVersion<T>::size)
    return fail(FLASH_ERROR_STRUCT_SIZE, what, "->struct_size is ", size, " but must be at least ", FirstVersion<T>::size,
                " (call ", init, ")");
  if (size > sizeof(T))
    return fail(FLASH_ERROR_STRUCT_SIZE, what, "->struct_size is ", size, " but this libflash (", flash_version_string(),
                ") knows only ", sizeof(T), " bytes: the caller was built against a newer flash.h");
  return FLASH_OK;
}

// Copies the caller's struct over `defaults` (from the init function) into *local.
template <class T>
int32_t read_versioned(const T* user, const T& defaults, T* local, const char* what, const char* init) {
  if (const int32_t s = check_struct_size<T>(user->struct_size, what, init); s != FLASH_OK) return s;
  *local = defaults;
  std::memcpy(static_cast<void*>(local), user, user->struct_size);
  local->struct_size = sizeof(T);
  return FLASH_OK;
}

// Writes `full` (this library's layout) into the caller's struct of `size` bytes, keeping struct_size.
template <class T>
void write_versioned(T* user, const T& full, size_t size) {
  std::memcpy(static_cast<void*>(user), &full, std::min(size, sizeof(T)));
  user->struct_size = size;
}

}  // namespace flash
