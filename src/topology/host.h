// Host identity: ranks with the same id share memory (shm transport) and a host in hierarchical plans.
#pragma once

#include <string>

namespace strata {

struct Config;

/// Config::hostId (STRATA_HOSTID) if set, else "<hostname>/<boot id>".
std::string hostIdentity(const Config& config);

}  // namespace strata
