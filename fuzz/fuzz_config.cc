// libFuzzer target: the configuration parser. The first byte picks a STRATA_* variable, the rest is its value;
// Config::fromEnv must accept it or refuse it with InvalidArgument naming the variable, never crash. The
// algorithm spec parser (STRATA_ALGO's "coll:algo,...") gets the same value.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "util/config.h"
#include "util/error.h"

namespace {
const char* const kVars[] = {"STRATA_TIMEOUT_MS",
                             "STRATA_PIECE_BYTES",
                             "STRATA_NSLOTS",
                             "STRATA_NSOCKS",
                             "STRATA_SPIN_US",
                             "STRATA_GPU_DIRECT_BYTES",
                             "STRATA_GPU_ONESHOT_BYTES",
                             "STRATA_GPU_STAGE_CHUNK_BYTES",
                             "STRATA_TRANSPORT",
                             "STRATA_ALGO",
                             "STRATA_SOCKET_IFNAME",
                             "STRATA_TOPO_FILE"};
constexpr size_t kNumVars = sizeof(kVars) / sizeof(kVars[0]);
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const char* var = kVars[data[0] % kNumVars];
  std::string value(reinterpret_cast<const char*>(data + 1), size - 1);
  value = value.substr(0, value.find('\0'));  // an environment value ends at its first NUL
  setenv(var, value.c_str(), 1);
  try {
    (void)strata::Config::fromEnv();
  } catch (const strata::InvalidArgument& e) {
    if (std::string(e.what()).find(var) == std::string::npos && std::string(var) != "STRATA_TOPO_FILE")
      std::abort();  // the error must name the variable
  } catch (const strata::Error&) {
  }
  try {
    (void)strata::parseAlgoSpec(value);
  } catch (const strata::InvalidArgument&) {
  }
  unsetenv(var);
  return 0;
}
