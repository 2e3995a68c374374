#include "topology/host.h"

#include <unistd.h>

#include <fstream>

#include "util/config.h"

namespace strata {

std::string hostIdentity(const Config& config) {
  if (!config.hostId.empty()) return config.hostId;
  char name[256] = {0};
  gethostname(name, sizeof(name) - 1);
  std::string id(name);
  // The boot id tells apart containers or VMs that share a hostname but not memory.
  std::ifstream boot("/proc/sys/kernel/random/boot_id");
  std::string bootId;
  if (boot && std::getline(boot, bootId)) id += "/" + bootId;
  return id;
}

}  // namespace strata
