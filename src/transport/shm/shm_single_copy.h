// Single copy between the two processes of a shm connection (internal to src/transport/shm/): set-up step 4, in
// which the ranks agree whether large pieces travel as references into the sender's memory that the receiver reads
// with process_vm_readv (shm_connection.cc sends and reads them).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace strata {

class PeerExchange;
struct Config;

namespace shm {

/// What set-up agreed about single copy for one connection.
struct SingleCopyMode {
  size_t minBytes = 0;  // 0: off
  std::string state;    // "on" or "off: why", for logs and tests
  int64_t timeoutMs = 0;
};

/// Set-up step 4, collective between the two ranks: both come to the same SingleCopyMode. `peerPid` is the peer's
/// process as its FIFO header names it.
SingleCopyMode agreeOnSingleCopy(PeerExchange& exchange, const Config& config, int peer, uint32_t tag, pid_t peerPid);

}  // namespace shm
}  // namespace strata
