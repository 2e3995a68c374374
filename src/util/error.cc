#include "util/error.h"

#include <cstdarg>
#include <cstring>
#include <vector>

namespace strata {

SysError::SysError(const std::string& what, int err)
    : Error(strataSystemError, what + ": " + std::strerror(err) + " (errno " + std::to_string(err) + ")") {}

std::string strprintf(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  va_list ap2;
  va_copy(ap2, ap);
  int n = std::vsnprintf(nullptr, 0, fmt, ap);
  va_end(ap);
  std::string out(n > 0 ? static_cast<size_t>(n) : 0, '\0');
  if (n > 0) std::vsnprintf(out.data(), out.size() + 1, fmt, ap2);
  va_end(ap2);
  return out;
}

}  // namespace strata
