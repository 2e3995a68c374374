// libFuzzer target: strataUniqueId bytes -> decodeUniqueId. Garbage must be refused with InvalidArgument, never
// crash; whatever decodes must encode back to an id that decodes to the same fields.
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "bootstrap/unique_id.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  strataUniqueId id;
  std::memset(&id, 0, sizeof(id));
  std::memcpy(&id, data, size < sizeof(id) ? size : sizeof(id));
  strata::UniqueIdInfo info;
  try {
    info = strata::decodeUniqueId(id);
  } catch (const strata::InvalidArgument&) {
    return 0;
  }
  const strata::UniqueIdInfo again = strata::decodeUniqueId(strata::encodeUniqueId(info));
  if (again.family != info.family || std::memcmp(again.addr, info.addr, sizeof(info.addr)) != 0 ||
      again.port != info.port || again.secret != info.secret || again.nonce != info.nonce)
    std::abort();  // a decoded id did not survive a round trip
  return 0;
}
