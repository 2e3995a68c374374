#include "transport/connect_check.h"

#include <atomic>
#include <exception>

#include "bootstrap/peer_exchange.h"
#include "util/config.h"
#include "util/config_table.h"
#include "util/error.h"

namespace strata {
namespace {

std::atomic<int> anySlotGeometryHooks{0};

// The geometry tests may use under AnySlotGeometryForTesting: what a FIFO needs to exist at all.
void checkLeastGeometry(const Config& config) {
  if (config.pieceBytes < 1) throw InvalidArgument("STRATA_PIECE_BYTES=0: a piece has at least one byte");
  if (config.nslots < 1)
    throw InvalidArgument(strprintf("STRATA_NSLOTS=%d: a connection has at least one slot", config.nslots));
}

}  // namespace

void checkConnectRequest(const PeerExchange& exchange, const Config& config, int peer, const char* kind,
                         std::initializer_list<const char*> alsoChecked) {
  const int me = exchange.rank();
  if (peer < 0 || peer >= exchange.size() || peer == me) {
    throw InvalidArgument(
        strprintf("rank %d: no %s connection possible to rank %d of %d", me, kind, peer, exchange.size()));
  }
  try {
    if (anySlotGeometryHooks.load(std::memory_order_relaxed) > 0) {
      checkLeastGeometry(config);
    } else {
      configVariable("STRATA_PIECE_BYTES").check(config);
      configVariable("STRATA_NSLOTS").check(config);
    }
    for (const char* name : alsoChecked) configVariable(name).check(config);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(strprintf("rank %d: no %s connection to rank %d: %s", me, kind, peer, e.what()));
  }
}

AnySlotGeometryForTesting::AnySlotGeometryForTesting() { anySlotGeometryHooks.fetch_add(1); }
AnySlotGeometryForTesting::~AnySlotGeometryForTesting() { anySlotGeometryHooks.fetch_sub(1); }

}  // namespace strata
