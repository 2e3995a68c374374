// One-shot all-reduce: every rank sends its whole input to every other rank and reduces all n inputs
// locally, in rank order 0..n-1, so every rank computes bitwise the same acc = x0 op x1 op ... op x(n-1).
// One round of latency; n-1 times the traffic of a ring, so only sensible for small counts. Correct for
// any count: long inputs go in chunks of args.chunkElems, received and reduced chunk by chunk.
#include "collectives/generators.h"

namespace strata {

using gen::chunkOf;

namespace {

// Appends the rank-ordered reduction of chunk c into acc. `mine` is this rank's own input chunk.
void reduceChunkInRankOrder(std::vector<Op>& lane, int n, int r, Region acc, Region mine) {
  for (int j = 0; j < n; ++j) {
    if (j == 0) {
      gen::append(lane, r == 0 ? gen::copyOp(acc, mine) : gen::recvOp(0, acc));
    } else if (j == r) {
      gen::append(lane, gen::reduceLocalOp(acc, mine));  // acc = acc op mine
    } else {
      gen::append(lane, gen::recvReduceOp(j, acc, acc));  // acc = x_j op acc (ops are commutative)
    }
  }
}

Plan oneshotAllReduce(const CollArgs& args) {
  const int n = args.nranks, r = args.rank;
  const size_t chunk = args.chunkElems;
  const size_t chunks = gen::numChunks(args.count, chunk);
  Plan plan = gen::emptyPlan(args);
  if (!args.inPlace && chunks == 1) {
    // One chunk fits in every connection's buffer, so the sends cannot block and one lane can do it all:
    // send to every peer, then reduce. Each extra lane costs a runner pass per poll, which at a few
    // bytes is most of the call.
    std::vector<Op>& lane = plan.lanes.emplace_back();
    const Region mine = chunkOf(kBufSend, 0, args.count, 0, chunk);
    for (int k = 1; k < n; ++k) gen::append(lane, gen::sendOp(gen::mod(r + k, n), mine));
    reduceChunkInRankOrder(lane, n, r, chunkOf(kBufRecv, 0, args.count, 0, chunk), mine);
    return plan;
  }
  if (!args.inPlace) {
    // Lane 0 receives and reduces into the receive buffer; lane k sends our input to rank r+k. The send
    // lanes only read the send buffer, which no lane writes.
    plan.lanes.resize(static_cast<size_t>(n));
    for (size_t c = 0; c < chunks; ++c) {
      const Region mine = chunkOf(kBufSend, 0, args.count, c, chunk);
      for (int k = 1; k < n; ++k)
        gen::append(plan.lanes[static_cast<size_t>(k)], gen::sendOp(gen::mod(r + k, n), mine));
      reduceChunkInRankOrder(plan.lanes[0], n, r, chunkOf(kBufRecv, 0, args.count, c, chunk), mine);
    }
    return plan;
  }
  // In place the input is the output: a result chunk may only be written once every peer has been sent
  // that chunk of the input. Lanes run concurrently, so one lane does it all, phase by phase: send chunk c
  // to every peer, reduce it in scratch, then copy it out. Each connection carries one chunk per phase.
  plan.scratchElems = std::min(args.count, chunk);
  std::vector<Op>& lane = plan.lanes.emplace_back();
  for (size_t c = 0; c < chunks; ++c) {
    const Region mine = chunkOf(kBufSend, 0, args.count, c, chunk);
    const Region acc = gen::region(kBufScratch, 0, mine.count);
    for (int k = 1; k < n; ++k) gen::append(lane, gen::sendOp(gen::mod(r + k, n), mine));
    reduceChunkInRankOrder(lane, n, r, acc, mine);
    gen::append(lane, gen::copyOp(chunkOf(kBufRecv, 0, args.count, c, chunk), acc));
  }
  return plan;
}

// One round: every rank sends all S bytes to each of the n-1 others and reduces the n-1 inputs it gets.
std::vector<Phase> oneshotAllReduceShape(const ShapeBuilder& b, double bytes) {
  return {b.direct(1, bytes, (b.nranks() - 1) * bytes)};
}

const AlgorithmRecord kRecords[] = {
    {.kind = CollKind::kAllReduce,
     .name = "oneshot",
     .generate = oneshotAllReduce,
     .costShape = oneshotAllReduceShape,
     .applies = appliesEverywhere,
     .description = "every rank sends its whole input to every other and reduces all n in rank order: one round of "
                    "latency, n-1 times a ring's traffic (small calls)"},
};

}  // namespace

std::span<const AlgorithmRecord> oneshotAlgorithms() { return kRecords; }

}  // namespace strata
