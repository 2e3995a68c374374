// SipHash-2-4: the MAC of the bootstrap's and the transports' authentication handshakes.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace strata {

/// SipHash-2-4 (a keyed 64-bit MAC) over data with a 128-bit key.
uint64_t sipHash24(const std::array<uint8_t, 16>& key, const void* data, size_t len);

}  // namespace strata
