#include "topology/host.h"

#include <unistd.h>

#include <optional>

#include "util/config.h"
#include "util/sys.h"

namespace strata {

std::string hostIdentity(const Config& config) {
  if (!config.hostId.empty()) return config.hostId;
  char name[256] = {0};
  gethostname(name, sizeof(name) - 1);
  std::string id(name);
  // The boot id tells apart containers or VMs that share a hostname but not memory.
  if (const std::optional<std::string> boot = bootId()) id += "/" + *boot;
  return id;
}

}  // namespace strata
