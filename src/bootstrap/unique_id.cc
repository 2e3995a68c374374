// Unique id layout (128 bytes, integers little-endian except the address, which stays in network order):
//   [0,4) magic  [4] version  [5] family  [6,8) port  [8,24) address  [24,40) secret  [40,48) nonce
//   [48] flags (bit 0: the root was listening when the id was made)  [49,56) zero
//   [56,64) SipHash of bytes [0,56) under a fixed key   [64,128) zero
// The checksum and the zero tail let decodeUniqueId reject garbage or a truncated copy with a clear
// error instead of connecting somewhere random.
#include "bootstrap/unique_id.h"

#include <sys/socket.h>

#include <cstring>

#include "bootstrap/siphash.h"
#include "bootstrap/socket_io.h"
#include "util/error.h"
#include "util/sys.h"

namespace strata {
namespace {

constexpr uint8_t kUniqueIdVersion = 2;  // 2: the flags byte
constexpr size_t kFlagsOffset = 48;
constexpr uint8_t kFlagRootListening = 1;
constexpr size_t kChecksumOffset = 56;
constexpr size_t kUsedBytes = 64;
// Not a secret: it only makes the checksum a function no other format computes by accident.
constexpr std::array<uint8_t, 16> kChecksumKey = {'s', 't', 'r', 'a', 't', 'a', '-', 'u',
                                                  'n', 'i', 'q', 'u', 'e', '-', 'i', 'd'};
static_assert(STRATA_UNIQUE_ID_BYTES >= kUsedBytes, "unique id too small");

void putLe(uint8_t* p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint64_t getLe(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace

strataUniqueId encodeUniqueId(const UniqueIdInfo& info) {
  strataUniqueId id;
  std::memset(&id, 0, sizeof(id));
  auto* b = reinterpret_cast<uint8_t*>(id.internal);
  putLe(b, kUniqueIdMagic, 4);
  b[4] = kUniqueIdVersion;
  b[5] = info.family;
  putLe(b + 6, info.port, 2);
  std::memcpy(b + 8, info.addr, 16);
  std::memcpy(b + 24, info.secret.data(), 16);
  putLe(b + 40, info.nonce, 8);
  b[kFlagsOffset] = info.rootListening ? kFlagRootListening : 0;
  putLe(b + kChecksumOffset, sipHash24(kChecksumKey, b, kChecksumOffset), 8);
  return id;
}

UniqueIdInfo decodeUniqueId(const strataUniqueId& id) {
  const auto* b = reinterpret_cast<const uint8_t*>(id.internal);
  const uint32_t magic = static_cast<uint32_t>(getLe(b, 4));
  if (magic != kUniqueIdMagic) {
    throw InvalidArgument(
        strprintf("unique id: bad magic 0x%08x (expected 0x%08x): not a Strata unique id, or "
                  "it was not copied to this rank intact",
                  magic, kUniqueIdMagic));
  }
  if (b[4] != kUniqueIdVersion) {
    throw InvalidArgument(
        strprintf("unique id: version %u, this library understands version %u", b[4], kUniqueIdVersion));
  }
  if (getLe(b + kChecksumOffset, 8) != sipHash24(kChecksumKey, b, kChecksumOffset)) {
    throw InvalidArgument("unique id: checksum mismatch: the id was corrupted or truncated on its way to this rank");
  }
  for (size_t i = kFlagsOffset + 1; i < STRATA_UNIQUE_ID_BYTES; ++i) {
    if (i >= kChecksumOffset && i < kUsedBytes) continue;
    if (b[i] != 0) throw InvalidArgument(strprintf("unique id: reserved byte %zu is not zero", i));
  }
  if ((b[kFlagsOffset] & ~kFlagRootListening) != 0)
    throw InvalidArgument(strprintf("unique id: unknown flags 0x%02x", b[kFlagsOffset]));
  UniqueIdInfo info;
  info.magic = magic;
  info.family = b[5];
  if (info.family != AF_INET && info.family != AF_INET6) {
    throw InvalidArgument(strprintf("unique id: address family %u is neither AF_INET nor AF_INET6", info.family));
  }
  info.port = static_cast<uint16_t>(getLe(b + 6, 2));
  if (info.port == 0) throw InvalidArgument("unique id: root port is 0");
  std::memcpy(info.addr, b + 8, 16);
  std::memcpy(info.secret.data(), b + 24, 16);
  info.nonce = getLe(b + 40, 8);
  info.rootListening = (b[kFlagsOffset] & kFlagRootListening) != 0;
  return info;
}

std::array<uint8_t, 16> randomSecret() {
  std::array<uint8_t, 16> s{};
  fillRandomOrUrandom(s.data(), s.size(), "bootstrap: ");
  return s;
}
}  // namespace strata
