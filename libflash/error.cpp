// libflash/error.cpp -- one message per thread, so concurrent callers never see each other's errors.
#include "error.h"

namespace flash {
namespace {
thread_local std::string t_message;
}
int32_t set_error(int32_t status, std::string message) {
  t_message = std::move(message);
  return status;
}
void clear_error() { t_message.clear(); }
const char* last_error() { return t_message.c_str(); }
}  // namespace flash
