// Pipelined chains along the ring order: broadcast flows root -> root+1 -> ... -> root-1, reduce flows
// root+1 -> root+2 -> ... -> root. Chunks of at most args.chunkElems keep every rank at most one chunk
// ahead of its successor. The "chain" algorithm of broadcast and reduce.
#include <algorithm>
#include <utility>

#include "collectives/generators.h"

namespace strata {

using gen::chunkOf;
using gen::mod;

namespace {

Plan chainBroadcast(const CollArgs& args) {
  const int n = args.nranks, r = args.rank;
  const int next = mod(r + 1, n), prev = mod(r - 1, n);
  const int pos = mod(r - args.root, n);  // 0 = root, n-1 = end of the chain
  Plan plan = gen::emptyPlan(args);
  plan.lanes.resize(2);
  std::vector<Op>& lane = plan.lanes[0];
  const size_t chunks = gen::numChunks(args.count, args.chunkElems);
  for (size_t c = 0; c < chunks; ++c) {
    const Region src = chunkOf(kBufSend, 0, args.count, c, args.chunkElems);
    const Region dst = chunkOf(kBufRecv, 0, args.count, c, args.chunkElems);
    if (pos == 0) {
      gen::append(lane, gen::sendOp(next, src));
    } else if (pos < n - 1) {
      gen::append(lane, gen::recvCopySendOp(prev, next, dst));
    } else {
      gen::append(lane, gen::recvOp(prev, dst));
    }
  }
  // The root's own result: a local copy beside the sends (they only read the send buffer).
  if (pos == 0 && !args.inPlace)
    gen::append(plan.lanes[1], gen::copyOp(gen::region(kBufRecv, 0, args.count), gen::region(kBufSend, 0, args.count)));
  return plan;
}

Plan chainReduce(const CollArgs& args) {
  const int n = args.nranks, r = args.rank;
  const int next = mod(r + 1, n), prev = mod(r - 1, n);
  const int pos = mod(r - args.root - 1, n);  // 0 = root+1 (starts), n-1 = root (ends)
  Plan plan = gen::emptyPlan(args);
  std::vector<Op>& lane = plan.lanes.emplace_back();
  const size_t chunks = gen::numChunks(args.count, args.chunkElems);
  for (size_t c = 0; c < chunks; ++c) {
    const Region src = chunkOf(kBufSend, 0, args.count, c, args.chunkElems);
    if (pos == 0) {
      gen::append(lane, gen::sendOp(next, src));
    } else if (pos < n - 1) {
      gen::append(lane, gen::recvReduceSendOp(prev, next, src));
    } else {
      gen::append(lane, gen::recvReduceOp(prev, chunkOf(kBufRecv, 0, args.count, c, args.chunkElems), src));
    }
  }
  return plan;
}

// A chain of n-1 hops (from the root; priced for root 0) that every byte crosses, pipelined in chunks.
std::vector<Phase> chainBroadcastShape(const ShapeBuilder& b, double bytes) {
  return {b.chain(b.allRanks(), bytes, false)};
}
// Reduce to root 0 runs 1 -> 2 -> ... -> n-1 -> 0, every rank but the first reducing what it forwards.
std::vector<Phase> chainReduceShape(const ShapeBuilder& b, double bytes) {
  std::vector<int> order = b.allRanks();
  std::rotate(order.begin(), order.begin() + 1, order.end());
  return {b.chain(std::move(order), bytes, true)};
}

const AlgorithmRecord kRecords[] = {
    {.kind = CollKind::kBroadcast,
     .name = "chain",
     .generate = chainBroadcast,
     .costShape = chainBroadcastShape,
     .applies = appliesEverywhere,
     .deviceCapable = true,
     .description = "pipelined chain from the root along the ring order, in chunks"},
    {.kind = CollKind::kReduce,
     .name = "chain",
     .generate = chainReduce,
     .costShape = chainReduceShape,
     .applies = appliesEverywhere,
     .deviceCapable = true,
     .description = "pipelined chain to the root along the ring order, reduced at every hop, in chunks"},
};

}  // namespace

std::span<const AlgorithmRecord> chainAlgorithms() { return kRecords; }

}  // namespace strata
