// Authentication of the TCP transport's sockets: the listener sends a random challenge on every accepted
// socket, the connecting rank answers with a hello whose MAC is keyed by the job secret. Sockets that do
// not answer correctly are closed; they never become part of a connection.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "transport/hello_mac.h"

namespace strata::tcp {

inline constexpr uint64_t kHelloMagic = 0x5354524154435031ull;  // "STRATCP1"
inline constexpr size_t kChallengeBytes = kHelloChallengeBytes;

/// First bytes the connecting rank sends on each socket (host byte order: ranks of one job share an ABI).
struct Hello {
  uint64_t magic;
  uint64_t commId;
  int32_t fromRank;
  int32_t toRank;
  uint32_t tag;
  uint32_t sockIndex;
  uint32_t nsocks;
  uint32_t nslots;
  uint64_t pieceBytes;
  uint64_t mac;  // helloMac (transport/hello_mac.h) over the challenge and every field above
};
static_assert(sizeof(Hello) == 56, "Hello must have no padding");

/// SipHash-2-4 of `data` under a 128-bit key: the bootstrap's, which the tcp tests check against the reference
/// vectors under this name.
uint64_t sipHash24Tcp(const std::array<uint8_t, 16>& key, const void* data, size_t len);

}  // namespace strata::tcp
