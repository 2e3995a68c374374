// A communicator of strata_soak and this process's place in it.
#pragma once

#include <string>

#include "strata/strata.h"

namespace soak {

// A communicator and this process's place in it.
struct CommView {
  strataComm_t comm = nullptr;
  int rank = 0;
  int size = 1;
  std::string name;
};

}  // namespace soak
