// What every transport's factory (connectShm, connectTcp, connectUcx) checks before it sets anything up: the peer
// is another rank of the communicator, and the slot geometry (Config::pieceBytes, Config::nslots) is one the
// config table accepts for STRATA_PIECE_BYTES and STRATA_NSLOTS. The bounds are the table's own rows, so a Config
// set in code rather than parsed from the environment cannot hand a transport what the table refuses.
#pragma once

#include <initializer_list>

namespace strata {

class PeerExchange;
struct Config;

/// Throws InvalidArgument naming this rank, the transport `kind` ("shm", "tcp", "ucx"), the peer and the value when
/// `peer` is not another rank of the communicator or the geometry (and every variable of `alsoChecked`, e.g.
/// "STRATA_NSOCKS") is not one the config table accepts.
void checkConnectRequest(const PeerExchange& exchange, const Config& config, int peer, const char* kind,
                         std::initializer_list<const char*> alsoChecked = {});

/// Test hook: while one lives (in any thread of the process), checkConnectRequest accepts slot geometries the config
/// table refuses, down to one slot of one byte (STRATA_NSLOTS=1, pieces under 256 bytes or not a multiple of 64), so
/// the transport tests reach a one-slot FIFO and tiny, odd-sized pieces. Only tests create one.
class AnySlotGeometryForTesting {
 public:
  AnySlotGeometryForTesting();
  ~AnySlotGeometryForTesting();
  AnySlotGeometryForTesting(const AnySlotGeometryForTesting&) = delete;
  AnySlotGeometryForTesting& operator=(const AnySlotGeometryForTesting&) = delete;
};

}  // namespace strata
