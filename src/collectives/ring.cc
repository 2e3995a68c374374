// Ring algorithms: every rank sends to rank+1 and receives from rank-1 over one lane.
//
// Data is cut into blocks (reduce-scatter / all-gather: one per rank; all-reduce: n near-equal segments)
// and each block into chunks of at most args.chunkElems. The ops of chunk c of every block come before those
// of chunk c+1, so a rank is never more than one chunk ahead of its successor on the connection: the
// executor's capacity (>= 2 chunks) is never exceeded without a receive in between.
#include "collectives/generators.h"

namespace strata {

using gen::chunkOf;
using gen::mod;

namespace {

Plan ringAllReduce(const CollArgs& args) {
  const int n = args.nranks, r = args.rank;
  const int next = mod(r + 1, n), prev = mod(r - 1, n);
  Plan plan = gen::emptyPlan(args);
  std::vector<Op>& lane = plan.lanes.emplace_back();
  // Step s works on segment (r - s) mod n: steps 0..n-1 reduce-scatter, so segment r+1 becomes final here
  // at step n-1; steps n-1..2n-2 all-gather the final segments around the ring.
  const size_t chunks = gen::numChunks(segmentCount(args.count, n, 0), args.chunkElems);
  for (size_t c = 0; c < chunks; ++c) {
    for (int s = 0; s <= 2 * n - 2; ++s) {
      const int seg = mod(r - s, n);
      const size_t off = segmentOffset(args.count, n, seg), cnt = segmentCount(args.count, n, seg);
      const Region src = chunkOf(kBufSend, off, cnt, c, args.chunkElems);
      const Region dst = chunkOf(kBufRecv, off, cnt, c, args.chunkElems);
      if (s == 0) {
        gen::append(lane, gen::sendOp(next, src));
      } else if (s < n - 1) {
        gen::append(lane, gen::recvReduceSendOp(prev, next, src));
      } else if (s == n - 1) {
        gen::append(lane, gen::recvReduceCopySendOp(prev, next, dst, src));
      } else if (s < 2 * n - 2) {
        gen::append(lane, gen::recvCopySendOp(prev, next, dst));
      } else {
        gen::append(lane, gen::recvOp(prev, dst));
      }
    }
  }
  return plan;
}

Plan ringReduceScatter(const CollArgs& args) {
  const int n = args.nranks, r = args.rank;
  const int next = mod(r + 1, n), prev = mod(r - 1, n);
  const size_t count = args.count;
  Plan plan = gen::emptyPlan(args);
  std::vector<Op>& lane = plan.lanes.emplace_back();
  // Step s works on block (r - s - 1) mod n, so the last step (n-1) finishes block r into the receive
  // buffer. In place the receive buffer is block r of the send buffer: only that last step writes, and it
  // writes exactly the memory it reads.
  const size_t chunks = gen::numChunks(count, args.chunkElems);
  for (size_t c = 0; c < chunks; ++c) {
    for (int s = 0; s <= n - 1; ++s) {
      const int blk = mod(r - s - 1, n);
      const Region src = chunkOf(kBufSend, static_cast<size_t>(blk) * count, count, c, args.chunkElems);
      if (s == 0) {
        gen::append(lane, gen::sendOp(next, src));
      } else if (s < n - 1) {
        gen::append(lane, gen::recvReduceSendOp(prev, next, src));
      } else {
        gen::append(lane, gen::recvReduceOp(prev, chunkOf(kBufRecv, 0, count, c, args.chunkElems), src));
      }
    }
  }
  return plan;
}

Plan ringAllGather(const CollArgs& args) {
  const int n = args.nranks, r = args.rank;
  const int next = mod(r + 1, n), prev = mod(r - 1, n);
  const size_t count = args.count;
  Plan plan = gen::emptyPlan(args);
  plan.lanes.resize(1);
  std::vector<Op>& lane = plan.lanes[0];
  // Step s forwards block (r - s) mod n. Our own block goes out straight from the send buffer; out of
  // place, the same pass copies it into block r (copySend), so the input is read from memory once.
  const size_t chunks = gen::numChunks(count, args.chunkElems);
  for (size_t c = 0; c < chunks; ++c) {
    for (int s = 0; s <= n - 1; ++s) {
      const int blk = mod(r - s, n);
      const Region dst = chunkOf(kBufRecv, static_cast<size_t>(blk) * count, count, c, args.chunkElems);
      if (s == 0) {
        const Region mine = chunkOf(kBufSend, 0, count, c, args.chunkElems);
        gen::append(lane, args.inPlace ? gen::sendOp(next, mine) : gen::copySendOp(next, dst, mine));
      } else if (s < n - 1) {
        gen::append(lane, gen::recvCopySendOp(prev, next, dst));
      } else {
        gen::append(lane, gen::recvOp(prev, dst));
      }
    }
  }
  return plan;
}

// The ring's cost: 2(n-1) steps (n-1 for reduce-scatter and all-gather) of one rank block each, every rank
// reducing n-1 blocks on the way (none for all-gather).
std::vector<Phase> ringAllReduceShape(const ShapeBuilder& b, double bytes) {
  const int n = b.nranks();
  return {b.ring(b.allRanks(), 2 * (n - 1), bytes / n, (n - 1) * (bytes / n))};
}
std::vector<Phase> ringReduceScatterShape(const ShapeBuilder& b, double bytes) {
  const int n = b.nranks();
  return {b.ring(b.allRanks(), n - 1, bytes / n, (n - 1) * (bytes / n))};
}
std::vector<Phase> ringAllGatherShape(const ShapeBuilder& b, double bytes) {
  const int n = b.nranks();
  return {b.ring(b.allRanks(), n - 1, bytes / n, 0)};
}

const AlgorithmRecord kRecords[] = {
    {.kind = CollKind::kAllReduce,
     .name = "ring",
     .generate = ringAllReduce,
     .costShape = ringAllReduceShape,
     .applies = appliesEverywhere,
     .deviceCapable = true,
     .ncclName = "Ring",
     .description = "ring reduce-scatter then ring all-gather over every rank, pipelined in chunks: the wire bound, "
                    "2(n-1) steps of latency"},
    {.kind = CollKind::kReduceScatter,
     .name = "ring",
     .generate = ringReduceScatter,
     .costShape = ringReduceScatterShape,
     .applies = appliesEverywhere,
     .deviceCapable = true,
     .ncclName = "Ring",
     .description = "ring over every rank, each block reduced as it travels, pipelined in chunks; n-1 steps"},
    {.kind = CollKind::kAllGather,
     .name = "ring",
     .generate = ringAllGather,
     .costShape = ringAllGatherShape,
     .applies = appliesEverywhere,
     .deviceCapable = true,
     .ncclName = "Ring",
     .description = "ring over every rank, each block forwarded as it arrives, pipelined in chunks; n-1 steps"},
};

}  // namespace

std::span<const AlgorithmRecord> ringAlgorithms() { return kRecords; }

}  // namespace strata
