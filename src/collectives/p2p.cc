// Point-to-point sends and receives. Each call is one op; the executor cuts it into pieces and the connection's
// credits pace it, so no chunking is needed (nothing else shares its lane).
#include <map>
#include <utility>
#include <vector>

#include "collectives/generators.h"
#include "collectives/p2p_group.h"
#include "util/error.h"

namespace strata {

Plan p2pGroupPlan(int rank, int nranks, std::span<const P2PCall> calls, size_t unitBytes) {
  Plan plan;
  plan.rank = rank;
  plan.nranks = nranks;
  plan.algorithm = "p2p";
  std::map<std::pair<int, int>, size_t> laneOf;  // (peer, 0 = send / 1 = recv) -> lane
  std::vector<size_t> selfSends, selfRecvs;
  for (size_t i = 0; i < calls.size(); ++i) {
    const P2PCall& c = calls[i];
    if (c.peer < 0 || c.peer >= nranks)
      throw InvalidArgument(strprintf("rank %d: %s: peer %d is not a rank of this %d-rank communicator", rank,
                                      c.send ? "send" : "recv", c.peer, nranks));
    if (c.elems == 0) continue;
    if (c.peer == rank) {
      (c.send ? selfSends : selfRecvs).push_back(i);
      continue;
    }
    const int base = static_cast<int>(i) * kBuffersPerColl;
    auto [it, fresh] = laneOf.emplace(std::make_pair(c.peer, c.send ? 0 : 1), plan.lanes.size());
    if (fresh) plan.lanes.emplace_back();
    plan.lanes[it->second].push_back(c.send ? gen::sendOp(c.peer, gen::region(base + kBufSend, 0, c.elems))
                                            : gen::recvOp(c.peer, gen::region(base + kBufRecv, 0, c.elems)));
  }
  if (selfSends.size() != selfRecvs.size())
    throw InvalidUsage(strprintf("rank %d: %zu send(s) to self but %zu recv(s) from self in one group", rank,
                                 selfSends.size(), selfRecvs.size()));
  if (!selfSends.empty()) plan.lanes.emplace_back();
  for (size_t k = 0; k < selfSends.size(); ++k) {
    const P2PCall& s = calls[selfSends[k]];
    const P2PCall& r = calls[selfRecvs[k]];
    if (s.elems != r.elems)
      throw InvalidUsage(strprintf("rank %d: send to self of %zu bytes matched with recv from self of %zu bytes", rank,
                                   s.elems * unitBytes, r.elems * unitBytes));
    const int sendBase = static_cast<int>(selfSends[k]) * kBuffersPerColl;
    const int recvBase = static_cast<int>(selfRecvs[k]) * kBuffersPerColl;
    plan.lanes.back().push_back(
        gen::copyOp(gen::region(recvBase + kBufRecv, 0, r.elems), gen::region(sendBase + kBufSend, 0, s.elems)));
  }
  return plan;
}

namespace {

Plan p2pSend(const CollArgs& args) {
  const P2PCall call{true, args.peer, args.count};
  return p2pGroupPlan(args.rank, args.nranks, std::span<const P2PCall>(&call, 1), 1);
}

Plan p2pRecv(const CollArgs& args) {
  const P2PCall call{false, args.peer, args.count};
  return p2pGroupPlan(args.rank, args.nranks, std::span<const P2PCall>(&call, 1), 1);
}

// One message of S bytes between two ranks, priced between rank 0 and the first rank of the last host (across hosts
// whenever there are several).
std::vector<Phase> p2pShape(const ShapeBuilder& b, double bytes) {
  const HostLayout& lay = b.layout();
  const int peer = lay.nhosts() > 1 ? lay.ranksOf(lay.nhosts() - 1).front() : 1;
  return {b.chain({0, peer}, bytes, false)};
}

const AlgorithmRecord kRecords[] = {
    {.kind = CollKind::kSend,
     .name = "p2p",
     .generate = p2pSend,
     .costShape = p2pShape,
     .applies = appliesEverywhere,
     .description = "one send to the peer (p2pGroupPlan, the plan of every send/recv group)"},
    {.kind = CollKind::kRecv,
     .name = "p2p",
     .generate = p2pRecv,
     .costShape = p2pShape,
     .applies = appliesEverywhere,
     .description = "one receive from the peer (p2pGroupPlan, the plan of every send/recv group)"},
};

}  // namespace

std::span<const AlgorithmRecord> p2pAlgorithms() { return kRecords; }

}  // namespace strata
