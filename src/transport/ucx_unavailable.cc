// connectUcx in a build without UCX's headers (STRATA_WITH_UCX=OFF, or AUTO without libucx-dev): a clear
// error instead of a missing symbol. The real one is src/transport/ucx/ucx_connection.cc.
#ifndef STRATA_HAVE_UCX

#include "transport/transport.h"
#include "util/error.h"

namespace strata {

std::unique_ptr<Connection> connectUcx(PeerExchange&, const Config&, int, uint32_t) {
  throw InvalidUsage("Strata was built without UCX; STRATA_NET=ucx/STRATA_TRANSPORT=ucx unavailable");
}

}  // namespace strata

#endif
