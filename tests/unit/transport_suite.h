// The transport suite: the tests every transport passes (test_transport.cc defines them), instantiated for each
// transport by its own test file with the cases it needs: test_transport.cc for shm and tcp, test_ucx.cc for ucx
// over each UCX_TLS. gtest's value-parameterized abstract test: the fixture is declared here, outside an anonymous
// namespace, so that every file instantiates the same suite.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <optional>
#include <ostream>
#include <string>

#include "test_util.h"
#include "transport/connect_check.h"
#include "util/config.h"

namespace strata::transport_suite {

struct TransportCase {
  std::string kind;  // "shm", "tcp" or "ucx"
  int nsocks;        // tcp: sockets per peer (else 1)
  int nslots;
  size_t pieceBytes;
  const char* ucxTls = nullptr;  // ucx: UCX_TLS for the case (nullptr: unset, UCX's own choice)
};

void PrintTo(const TransportCase& c, std::ostream* os);
/// "shm_socks1_slots4_piece4096"; ucx cases name their UCX_TLS instead of sockets: "ucx_tcp_slots4_piece4096".
std::string caseName(const testing::TestParamInfo<TransportCase>& info);

class TransportTest : public testing::TestWithParam<TransportCase> {
 protected:
  /// ucx: skips where libucp does not load, and sets the case's UCX_TLS (each test gets a fresh UCX context).
  void SetUp() override;
  void TearDown() override;
  Config config() const;

 private:
  // The cases include slot geometries the config table refuses (one slot, pieces of 64 bytes or not a multiple
  // of 64) to reach the FIFOs' edge cases; they get past the factories' check through the test hook.
  AnySlotGeometryForTesting anyGeometry_;
  std::optional<test::ScopedEnv> ucxTls_;
};

}  // namespace strata::transport_suite
