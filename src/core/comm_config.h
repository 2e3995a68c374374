// strataConfig_t, the per-communicator settings of strataCommInitRankConfig, strataCommSplit and strataCommShrink,
// read into what the core uses: a Config (each set field checked by the row of the variable it stands for, so a
// field accepts exactly what its STRATA_* variable accepts) plus the settings that are not variables.
#pragma once

#include <string>

#include "strata/strata.h"
#include "util/config.h"

namespace strata {

/// A new communicator's settings.
struct CommSettings {
  Config config;         ///< the base Config with the struct's set fields applied
  bool blocking = true;  ///< strataConfig_t.blocking
  std::string name;      ///< strataConfig_t.commName ("" : none)
};

/// `base` (the environment's Config, or the parent's for a split or shrink, with the parent's name) with the set
/// fields of `user` applied; `user` NULL leaves it as it is. Reads the struct by its size: fields beyond it count as
/// unset. Throws InvalidArgument naming `what`, the field and the value for a size, magic or value that is wrong.
CommSettings applyCommConfig(const strataConfig_t* user, const Config& base, const std::string& baseName,
                             const char* what);

}  // namespace strata
