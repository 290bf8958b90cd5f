// libflash/algorithm.h -- what every backend provides to the dispatcher.
//
// Each algorithm (cpu, naive, sm80, sm90) defines one `Algorithm` record in its own source file; the
// dispatcher (libflash/dispatch.cpp) holds the list. Adding a backend is one record and one line there.
#pragma once
#include <cstdint>
#include <string>

#include "params.h"

namespace flash {

struct Algorithm {
  int32_t id;           // FLASH_ALGO_*
  const char* name;     // "sm80"
  int32_t device_type;  // FLASH_DEVICE_* it runs on
  // Usable on this device at all (hardware, driver, libraries present)? If not, *why says so.
  bool (*available)(int32_t device_id, std::string* why);
  // Supports this particular problem (dtype, head_dim, mask kind, strides)? If not, *why says so.
  bool (*supports)(const FwdParams& p, std::string* why);
  // Workspace bytes the forward needs; 0 if none.
  size_t (*fwd_workspace)(const FwdParams& p);
  // Runs the forward. Returns a FLASH_* status (and sets the message on failure).
  int32_t (*fwd)(const FwdParams& p);

  // ---- Backward (optional; appended with defaults so records written as {id, ..., fwd} compile as is).
  // nullptr bwd: this algorithm has no backward pass (flash_bwd says so; AUTO skips it).
  // Supports this backward problem? nullptr: the same answer as supports() for the forward.
  bool (*supports_bwd)(const BwdParams& p, std::string* why) = nullptr;
  // Workspace bytes the backward needs; nullptr: none.
  size_t (*bwd_workspace)(const BwdParams& p) = nullptr;
  // Runs the backward. Returns a FLASH_* status (and sets the message on failure).
  int32_t (*bwd)(const BwdParams& p) = nullptr;
};

// All algorithms compiled into this library, in order of preference for AUTO (fastest first).
const Algorithm* const* algorithms(int* count);
const Algorithm* find_algorithm(int32_t id, int32_t device_type);

}  // namespace flash
