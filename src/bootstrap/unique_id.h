// The unique id: what a strataUniqueId carries (the root's address and the job's secret), and how it is written.
#pragma once

#include <array>
#include <cstdint>

#include "strata/strata.h"

namespace strata {

/// Decoded contents of a strataUniqueId.
struct UniqueIdInfo {
  uint32_t magic = 0;
  uint8_t family = 0;                // AF_INET or AF_INET6
  uint8_t addr[16] = {0};            // root address, network byte order
  uint16_t port = 0;                 // root port, host byte order
  std::array<uint8_t, 16> secret{};  // MAC key
  uint64_t nonce = 0;                // distinguishes ids made in one process
  /// The root listened before the id existed (strataGetUniqueId), so a refused connection means its process is
  /// gone, not that it has not started yet (an id made from the environment before its root starts).
  bool rootListening = false;
};
/// First four bytes of every encoded unique id ("STRI" in memory order).
constexpr uint32_t kUniqueIdMagic = 0x49525453;
/// Writes `info` (always with kUniqueIdMagic) plus a checksum, so that a truncated or foreign id is caught.
strataUniqueId encodeUniqueId(const UniqueIdInfo& info);
/// Throws InvalidArgument if the bytes are not a Strata unique id.
UniqueIdInfo decodeUniqueId(const strataUniqueId& id);

/// 16 bytes from the kernel's CSPRNG (getrandom, else /dev/urandom): the secret of a new unique id.
std::array<uint8_t, 16> randomSecret();

}  // namespace strata
