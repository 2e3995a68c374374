#include "transport/tcp/tcp_auth.h"

#include <cstddef>

#include "bootstrap/siphash.h"

namespace strata::tcp {

// One SipHash-2-4 for the whole library: the bootstrap's (tested there against the reference vectors).
uint64_t sipHash24Tcp(const std::array<uint8_t, 16>& key, const void* data, size_t len) {
  return sipHash24(key, data, len);
}

}  // namespace strata::tcp
