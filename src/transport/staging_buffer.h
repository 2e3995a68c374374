// The host memory a socket-style transport (tcp, ucx) stages its messages in: one ring of slots per direction.
#pragma once

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "util/error.h"

namespace strata {

struct FreeDeleter {
  void operator()(char* p) const { std::free(p); }
};
/// Memory from allocStagingBuffer, released with std::free.
using StagingBuffer = std::unique_ptr<char, FreeDeleter>;

/// `bytes` of 64-byte aligned memory (at least 64, rounded up to a multiple of 64), zeroed so that its pages
/// are faulted in now rather than on the data path. Throws SysError("allocating <transport> transport
/// buffers", ENOMEM) when the allocation fails; `transport` is "TCP" or "UCX".
inline StagingBuffer allocStagingBuffer(size_t bytes, const char* transport) {
  char* p = static_cast<char*>(std::aligned_alloc(64, std::max<size_t>(64, (bytes + 63) / 64 * 64)));
  if (!p) throw SysError(std::string("allocating ") + transport + " transport buffers", ENOMEM);
  std::memset(p, 0, bytes);  // pre-fault
  return StagingBuffer(p);
}

}  // namespace strata
