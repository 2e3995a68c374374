// The MAC that authenticates a transport's hello (tcp: the first bytes on each socket; ucx: its first message):
// SipHash-2-4 under the job secret over the challenge the receiver sent and every field of the hello before its
// `mac`, so only a rank that holds the job secret can answer a fresh challenge. The hellos themselves differ (tcp's
// carries the socket and the slot geometry, which ucx agrees on in its set-up message) and stay with their
// transports (tcp/tcp_auth.h, ucx/ucx_connection.h).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "bootstrap/siphash.h"

namespace strata {

inline constexpr size_t kHelloChallengeBytes = 16;

/// MAC of `hello` answering `challenge`. A Hello is a struct without padding whose last field is `uint64_t mac`.
template <class Hello>
uint64_t helloMac(const std::array<uint8_t, 16>& secret, const uint8_t (&challenge)[kHelloChallengeBytes],
                  const Hello& hello) {
  static_assert(std::has_unique_object_representations_v<Hello>, "the MAC covers the hello's bytes: no padding");
  static_assert(offsetof(Hello, mac) + sizeof(uint64_t) == sizeof(Hello), "mac is the hello's last field");
  uint8_t buf[kHelloChallengeBytes + offsetof(Hello, mac)];
  std::memcpy(buf, challenge, kHelloChallengeBytes);
  std::memcpy(buf + kHelloChallengeBytes, &hello, offsetof(Hello, mac));
  return sipHash24(secret, buf, sizeof(buf));
}

}  // namespace strata
