// Helpers shared by the unit tests.
#pragma once

#include <gtest/gtest.h>

#include "strata/strata.h"

namespace strata::test {

/// A 1-rank communicator through the C API (its own unique id, so tests never share a root).
inline strataComm_t oneRankComm() {
  strataUniqueId id;
  EXPECT_EQ(strataGetUniqueId(&id), strataSuccess);
  strataComm_t comm = nullptr;
  EXPECT_EQ(strataCommInitRank(&comm, 1, id, 0), strataSuccess) << strataGetLastError(nullptr);
  return comm;
}

}  // namespace strata::test
