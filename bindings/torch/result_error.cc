// A failed Strata call as torch reports it (result_error.h).
#include "result_error.h"

#include <c10/util/Exception.h>

#include <cstdint>

namespace strata::torch_backend {

std::string resultText(strataResult_t result, const std::string& what, const char* detail) {
  std::string msg = (what.rfind("strata:", 0) == 0 ? what : "strata: " + what) + " failed: ";
  // torch's tests and tools look for "Timed out" in a timeout's message (as gloo's and NCCL's say it), also
  // where this rank heard of a peer's timeout (a remote error whose cause timed out).
  const std::string text = (detail && *detail) ? detail : strataGetErrorString(result);
  if (result == strataTimeout || text.find("timed out") != std::string::npos) {
    msg += "Timed out (the group's timeout, STRATA_TIMEOUT_MS): ";
  }
  msg += text;
  return msg + " (" + strataGetErrorString(result) + ")";
}

std::exception_ptr resultError(strataResult_t result, const std::string& what, const char* detail) {
  return std::make_exception_ptr(
      c10::DistBackendError({__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, resultText(result, what, detail)));
}

}  // namespace strata::torch_backend
