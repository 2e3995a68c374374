// Pairwise all-to-all: block j of our send buffer goes to rank j, where it lands in block `rank` of the
// receive buffer; our own block is a local copy.
#include "collectives/generators.h"

namespace strata {

using gen::chunkOf;
using gen::mod;

namespace {

Plan pairwiseAllToAll(const CollArgs& args) {
  const int n = args.nranks, r = args.rank;
  const size_t count = args.count;
  auto block = [count](int buf, int j) { return gen::region(buf, static_cast<size_t>(j) * count, count); };
  Plan plan = gen::emptyPlan(args);
  if (!args.inPlace) {
    // One lane per direction and peer, all concurrent: a send lane never waits on a receive, so no lane can
    // block another for longer than the peer's receive lane takes to drain the connection. Blocks go in chunks,
    // as the in-place exchange below sends them: a peer may be in place while this rank is not, and the device
    // executor pairs ops by count (each op's protocol follows from its size).
    plan.lanes.resize(static_cast<size_t>(2 * n - 1));
    gen::append(plan.lanes[0], gen::copyOp(block(kBufRecv, r), block(kBufSend, r)));
    const size_t chunks = gen::numChunks(count, args.chunkElems);
    for (int k = 1; k < n; ++k) {
      const int to = mod(r + k, n), from = mod(r - k, n);
      for (size_t c = 0; c < chunks; ++c) {
        gen::append(plan.lanes[static_cast<size_t>(2 * k - 1)],
                    gen::sendOp(to, chunkOf(kBufSend, static_cast<size_t>(to) * count, count, c, args.chunkElems)));
        gen::append(plan.lanes[static_cast<size_t>(2 * k)],
                    gen::recvOp(from, chunkOf(kBufRecv, static_cast<size_t>(from) * count, count, c, args.chunkElems)));
      }
    }
    return plan;
  }
  // In place, receiving block j overwrites the block we owe rank j. So pair the ranks up: in round s every
  // rank r swaps with p = (s - r) mod n (p's partner in round s is r again), chunk by chunk, sending chunk c
  // of block p before receiving p's chunk into the same place. Ops in a lane run in order and a send is
  // complete once its data has left the buffer, so no scratch is needed. One lane; every rank walks the same
  // (round, chunk) phases in the same order with one chunk per connection and phase: no deadlock.
  std::vector<Op>& lane = plan.lanes.emplace_back();
  const size_t chunks = gen::numChunks(count, args.chunkElems);
  for (int s = 0; s < n; ++s) {
    const int p = mod(s - r, n);
    if (p == r) continue;  // our own block is already in place
    for (size_t c = 0; c < chunks; ++c) {
      const Region blockChunk = chunkOf(kBufSend, static_cast<size_t>(p) * count, count, c, args.chunkElems);
      gen::append(lane, gen::sendOp(p, blockChunk));
      gen::append(lane, gen::recvOp(p, Region{kBufRecv, blockChunk.offset, blockChunk.count}));
    }
  }
  return plan;
}

// One round: every rank sends a block of S/n to each of the n-1 others at once.
std::vector<Phase> pairwiseAllToAllShape(const ShapeBuilder& b, double bytes) {
  return {b.direct(1, bytes / b.nranks(), 0)};
}

const AlgorithmRecord kRecords[] = {
    {.kind = CollKind::kAllToAll,
     .name = "pairwise",
     .generate = pairwiseAllToAll,
     .costShape = pairwiseAllToAllShape,
     .applies = appliesEverywhere,
     .deviceCapable = true,
     .description = "every block sent straight to its rank, a lane per peer and direction (in place: pairwise swaps)"},
};

}  // namespace

std::span<const AlgorithmRecord> pairwiseAlgorithms() { return kRecords; }

}  // namespace strata
