// Two-shot all-reduce: a direct reduce-scatter (every rank sends segment j straight to rank j, which
// reduces the n-1 pieces it gets) and a direct all-gather (each rank sends its finished segment to every
// other rank). Two rounds of latency like one-shot's one, but each rank sends 2(n-1)/n of the data instead
// of n-1 times all of it: the choice for medium messages inside a host. No step waits on another rank's
// forwarding, unlike a ring.
#include "collectives/generators.h"

namespace strata {

using gen::chunkOf;
using gen::mod;

namespace {

Plan twoshotAllReduce(const CollArgs& args) {
  const int n = args.nranks, r = args.rank;
  const size_t count = args.count, chunk = args.chunkElems;
  Plan plan = gen::emptyPlan(args);
  std::vector<Op>& lane = plan.lanes.emplace_back();
  auto seg = [&](int buf, int j, size_t c) {
    return chunkOf(buf, segmentOffset(count, n, j), segmentCount(count, n, j), c, chunk);
  };
  const size_t chunks = gen::numChunks(segmentCount(count, n, 0), chunk);
  // Reduce-scatter: segment r = x_(r-1) op (x_(r-2) op ... (x_(r+1) op x_r)), the same order on every
  // run. Every send goes out before the first receive, one chunk per connection per round.
  for (size_t c = 0; c < chunks; ++c) {
    for (int k = 1; k < n; ++k) gen::append(lane, gen::sendOp(mod(r + k, n), seg(kBufSend, mod(r + k, n), c)));
    for (int k = n - 1; k >= 1; --k)
      gen::append(lane,
                  gen::recvReduceOp(mod(r + k, n), seg(kBufRecv, r, c), seg(k == n - 1 ? kBufSend : kBufRecv, r, c)));
  }
  // All-gather of the finished segments.
  for (size_t c = 0; c < chunks; ++c) {
    for (int k = 1; k < n; ++k) gen::append(lane, gen::sendOp(mod(r + k, n), seg(kBufRecv, r, c)));
    for (int k = n - 1; k >= 1; --k) gen::append(lane, gen::recvOp(mod(r + k, n), seg(kBufRecv, mod(r + k, n), c)));
  }
  return plan;
}

// Two rounds of direct exchanges of one rank block each. Both rounds are priced alike, the all-gather's receives as
// if they reduced too.
std::vector<Phase> twoshotAllReduceShape(const ShapeBuilder& b, double bytes) {
  const double seg = bytes / b.nranks();
  return {b.direct(2, seg, 2 * ((b.nranks() - 1) * seg))};
}

const AlgorithmRecord kRecords[] = {
    {.kind = CollKind::kAllReduce,
     .name = "twoshot",
     .generate = twoshotAllReduce,
     .costShape = twoshotAllReduceShape,
     .applies = appliesEverywhere,
     .description = "direct reduce-scatter then direct all-gather: two rounds of latency, 2(n-1)/n of the data sent "
                    "(medium calls inside a host)"},
};

}  // namespace

std::span<const AlgorithmRecord> twoshotAlgorithms() { return kRecords; }

}  // namespace strata
