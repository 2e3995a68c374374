// The plan of a group of sends and receives (strataGroupStart ... strataGroupEnd): the one builder, used by the
// executor for every group and by the single-call "p2p" plans of the algorithm table.
#pragma once

#include <cstddef>
#include <span>

#include "collectives/plan.h"

namespace strata {

/// One call of a send/recv group, counted in the group's element unit.
struct P2PCall {
  bool send = true;  // false: a receive
  int peer = 0;
  size_t elems = 0;
};

/// The plan of a group on `rank` of `nranks`. Call i's buffers are kBuffersPerColl * i + kBufSend (what it
/// sends) and kBuffersPerColl * i + kBufRecv (where it receives); no scratch. One lane per (peer, direction)
/// keeps each connection's messages in issue order while different peers proceed concurrently. Sends to self
/// are matched with receives from self in issue order and become local copies. `unitBytes` (bytes per element)
/// only words errors. Throws InvalidArgument for a peer out of range and InvalidUsage for self sends and
/// receives that do not pair up.
Plan p2pGroupPlan(int rank, int nranks, std::span<const P2PCall> calls, size_t unitBytes);

}  // namespace strata
