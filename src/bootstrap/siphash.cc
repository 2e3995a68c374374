// SipHash-2-4 (Aumasson & Bernstein, "SipHash: a fast short-input PRF", 2012).
// Written out here rather than pulled from a dependency because it is 40 lines and the bootstrap uses it
// for three things that must agree bit for bit on every host: the challenge MAC, ids derived from the
// unique id's secret, and secrets/ports derived from a launcher's job identity.
#include "bootstrap/siphash.h"

#include <cstring>

namespace strata {
namespace {

inline uint64_t rotl(uint64_t x, int b) { return (x << b) | (x >> (64 - b)); }

// Little-endian load regardless of host order, so the MAC is the same on every architecture.
inline uint64_t load64le(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

inline void sipRound(uint64_t& v0, uint64_t& v1, uint64_t& v2, uint64_t& v3) {
  v0 += v1;
  v1 = rotl(v1, 13);
  v1 ^= v0;
  v0 = rotl(v0, 32);
  v2 += v3;
  v3 = rotl(v3, 16);
  v3 ^= v2;
  v0 += v3;
  v3 = rotl(v3, 21);
  v3 ^= v0;
  v2 += v1;
  v1 = rotl(v1, 17);
  v1 ^= v2;
  v2 = rotl(v2, 32);
}

}  // namespace

uint64_t sipHash24(const std::array<uint8_t, 16>& key, const void* data, size_t len) {
  const uint64_t k0 = load64le(key.data());
  const uint64_t k1 = load64le(key.data() + 8);
  uint64_t v0 = k0 ^ 0x736f6d6570736575ULL;
  uint64_t v1 = k1 ^ 0x646f72616e646f6dULL;
  uint64_t v2 = k0 ^ 0x6c7967656e657261ULL;
  uint64_t v3 = k1 ^ 0x7465646279746573ULL;

  const auto* in = static_cast<const uint8_t*>(data);
  const size_t fullBlocks = len / 8;
  for (size_t i = 0; i < fullBlocks; ++i) {
    const uint64_t m = load64le(in + 8 * i);
    v3 ^= m;
    sipRound(v0, v1, v2, v3);
    sipRound(v0, v1, v2, v3);
    v0 ^= m;
  }
  // Last block: the remaining 0..7 bytes, with the message length (mod 256) in the top byte.
  uint8_t tail[8] = {0};
  if (len % 8) std::memcpy(tail, in + 8 * fullBlocks, len % 8);
  tail[7] = static_cast<uint8_t>(len);
  const uint64_t b = load64le(tail);
  v3 ^= b;
  sipRound(v0, v1, v2, v3);
  sipRound(v0, v1, v2, v3);
  v0 ^= b;

  v2 ^= 0xff;
  for (int i = 0; i < 4; ++i) sipRound(v0, v1, v2, v3);
  return v0 ^ v1 ^ v2 ^ v3;
}

}  // namespace strata
