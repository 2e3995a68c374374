// libFuzzer target: STRATA_TOPO_FILE's JSON (Topology::fromJson, over the JSON parser). Garbage is refused with
// an Error naming what is wrong, never a crash; a topology that loads writes back to JSON that loads again to
// the same text.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "topology/topology.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  strata::Topology topo;
  try {
    topo = strata::Topology::fromJson(text, "fuzz input");
  } catch (const strata::Error&) {
    return 0;
  }
  const std::string once = topo.toJson();
  const std::string twice = strata::Topology::fromJson(once, "round trip").toJson();
  if (once != twice) std::abort();  // what Strata writes, it must read back unchanged
  return 0;
}
