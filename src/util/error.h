// One exception hierarchy for setup code, mapped once to strataResult_t at the C boundary.
#pragma once

#include <stdexcept>
#include <string>

#include "strata/strata.h"

namespace strata {

/// Base of every Strata exception; carries the C result code it maps to.
class Error : public std::runtime_error {
 public:
  Error(strataResult_t code, const std::string& msg) : std::runtime_error(msg), code_(code) {}
  strataResult_t code() const { return code_; }

 private:
  strataResult_t code_;
};

/// A system call failed; the message includes strerror(errno).
class SysError : public Error {
 public:
  SysError(const std::string& what, int err);
};

/// Bad arguments from the caller.
class InvalidArgument : public Error {
 public:
  explicit InvalidArgument(const std::string& msg) : Error(strataInvalidArgument, msg) {}
};

/// Correct arguments used in a wrong way (destroyed communicator, mismatched collectives).
class InvalidUsage : public Error {
 public:
  explicit InvalidUsage(const std::string& msg) : Error(strataInvalidUsage, msg) {}
};

/// A peer failed or disconnected.
class RemoteError : public Error {
 public:
  explicit RemoteError(const std::string& msg) : Error(strataRemoteError, msg) {}
};

/// A wait passed its deadline (STRATA_TIMEOUT_MS).
class TimeoutError : public Error {
 public:
  explicit TimeoutError(const std::string& msg) : Error(strataTimeout, msg) {}
};

/// A CUDA call failed or CUDA is not available for a device buffer.
class CudaError : public Error {
 public:
  explicit CudaError(const std::string& msg) : Error(strataUnhandledCudaError, msg) {}
};

/// A broken invariant inside Strata.
class InternalError : public Error {
 public:
  explicit InternalError(const std::string& msg) : Error(strataInternalError, msg) {}
};

/// Formats like printf into a std::string.
std::string strprintf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace strata

#define STRATA_THROW_SYS(what) throw ::strata::SysError((what), errno)
