// Point-to-point send and receive: one op each; the executor cuts it into pieces and the connection's
// credits pace it, so no chunking is needed (nothing else shares the lane).
#include "collectives/generators.h"

namespace strata {

Plan p2pSend(const CollArgs& args) {
  Plan plan = gen::emptyPlan(args);
  gen::append(plan.lanes.emplace_back(), gen::sendOp(args.peer, gen::region(kBufSend, 0, args.count)));
  return plan;
}

Plan p2pRecv(const CollArgs& args) {
  Plan plan = gen::emptyPlan(args);
  gen::append(plan.lanes.emplace_back(), gen::recvOp(args.peer, gen::region(kBufRecv, 0, args.count)));
  return plan;
}

}  // namespace strata
