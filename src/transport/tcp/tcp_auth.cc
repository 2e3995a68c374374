#include "transport/tcp/tcp_auth.h"

#include <cstddef>
#include <cstring>

namespace strata::tcp {
namespace {

inline uint64_t rotl(uint64_t x, int b) { return (x << b) | (x >> (64 - b)); }

inline uint64_t load64le(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

struct SipState {
  uint64_t v0, v1, v2, v3;
  void round() {
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
  void absorb(uint64_t m) {
    v3 ^= m;
    round();
    round();
    v0 ^= m;
  }
};

}  // namespace

uint64_t sipHash24Tcp(const std::array<uint8_t, 16>& key, const void* data, size_t len) {
  const uint64_t k0 = load64le(key.data()), k1 = load64le(key.data() + 8);
  SipState s{0x736f6d6570736575ull ^ k0, 0x646f72616e646f6dull ^ k1, 0x6c7967656e657261ull ^ k0,
             0x7465646279746573ull ^ k1};
  const auto* p = static_cast<const uint8_t*>(data);
  size_t i = 0;
  for (; i + 8 <= len; i += 8) s.absorb(load64le(p + i));
  uint64_t last = static_cast<uint64_t>(len) << 56;
  for (size_t j = 0; i + j < len; ++j) last |= static_cast<uint64_t>(p[i + j]) << (8 * j);
  s.absorb(last);
  s.v2 ^= 0xff;
  for (int r = 0; r < 4; ++r) s.round();
  return s.v0 ^ s.v1 ^ s.v2 ^ s.v3;
}

uint64_t helloMac(const std::array<uint8_t, 16>& secret, const uint8_t (&challenge)[kChallengeBytes],
                  const Hello& hello) {
  uint8_t buf[kChallengeBytes + offsetof(Hello, mac)];
  std::memcpy(buf, challenge, kChallengeBytes);
  std::memcpy(buf + kChallengeBytes, &hello, offsetof(Hello, mac));
  return sipHash24Tcp(secret, buf, sizeof(buf));
}

}  // namespace strata::tcp
