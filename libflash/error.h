// libflash/error.h -- the thread-local last-error message behind flash_last_error_message().
#pragma once
#include <cstdint>
#include <string>

namespace flash {

// Records `message` as this thread's last error and returns `status`, so that a failure reads
//   return fail(FLASH_ERROR_BAD_SHAPE, "q.shape[1] is ", n, " but must be positive");
int32_t set_error(int32_t status, std::string message);
void clear_error();
const char* last_error();

namespace detail {
inline void append(std::string&) {}
template <class T, class... R>
void append(std::string& s, const T& v, const R&... rest) {
  if constexpr (std::is_convertible_v<T, std::string>) s += std::string(v);
  else s += std::to_string(v);
  append(s, rest...);
}
}  // namespace detail

template <class... A>
int32_t fail(int32_t status, const A&... parts) {
  std::string s;
  detail::append(s, parts...);
  return set_error(status, std::move(s));
}

}  // namespace flash
