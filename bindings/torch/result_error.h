// A failed Strata call as torch reports it: the message (with "Timed out" where torch's tools look for it) and
// the c10::DistBackendError that carries it. Shared by the backend's files (process_group_*.cc).
#pragma once

#include <exception>
#include <string>

#include "strata/strata.h"

namespace strata::torch_backend {

/// "strata: <what> failed: <detail, or Strata's text for the code> (<code's text>)".
std::string resultText(strataResult_t result, const std::string& what, const char* detail);

/// resultText as a c10::DistBackendError.
std::exception_ptr resultError(strataResult_t result, const std::string& what, const char* detail);

}  // namespace strata::torch_backend
