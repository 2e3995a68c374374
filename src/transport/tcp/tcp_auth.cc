#include "transport/tcp/tcp_auth.h"

#include <cstddef>
#include <cstring>

#include "bootstrap/bootstrap.h"

namespace strata::tcp {

// One SipHash-2-4 for the whole library: the bootstrap's (tested there against the reference vectors).
uint64_t sipHash24Tcp(const std::array<uint8_t, 16>& key, const void* data, size_t len) {
  return sipHash24(key, data, len);
}

uint64_t helloMac(const std::array<uint8_t, 16>& secret, const uint8_t (&challenge)[kChallengeBytes],
                  const Hello& hello) {
  uint8_t buf[kChallengeBytes + offsetof(Hello, mac)];
  std::memcpy(buf, challenge, kChallengeBytes);
  std::memcpy(buf + kChallengeBytes, &hello, offsetof(Hello, mac));
  return sipHash24Tcp(secret, buf, sizeof(buf));
}

}  // namespace strata::tcp
