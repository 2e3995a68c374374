// Hierarchical plans: a collective inside each host, one collective per rail between hosts, and a
// collective inside each host again.
//
// A rail is the set of ranks with the same local index on every host, so each local rank drives its own
// inter-host ring (and, on a cluster, its own NIC). With unequal ranks per host there are R rails, R the
// smallest host's rank count; local ranks >= R take part in the intra-host steps only. Every byte leaves
// a host once per inter-host step: an all-reduce sends 2(H-1)/H of the data out of each host, the wire
// bound, where a flat ring crossing hosts sends 2(n-1)/n of it through the busiest host link.
#include <algorithm>
#include <vector>

#include "collectives/generators.h"
#include "collectives/host_layout.h"

namespace strata {

using gen::Block;
using gen::Range;

namespace {

// The host layout as one rank sees it.
struct Hierarchy {
  HostLayout layout;
  int host = 0;   // this rank's host
  int local = 0;  // this rank's index on its host
  int rails = 1;  // smallest host's rank count

  explicit Hierarchy(const CollArgs& args)
      : layout(args.nranks, args.hostOf, collName(args.kind)),
        host(layout.hostOf(args.rank)),
        local(layout.localOf(args.rank)),
        rails(layout.rails()) {}
  int nhosts() const { return layout.nhosts(); }
  const std::vector<int>& myHost() const { return layout.ranksOf(host); }
  /// The rail that carries rank o's block (reduce-scatter and all-gather).
  int railOf(int o) const { return layout.localOf(o) % rails; }
  /// Rail `j`'s member on every host, in host order.
  std::vector<int> rail(int j) const { return layout.rail(j); }
};

Range rankBlock(int o, size_t count) { return Range{static_cast<size_t>(o) * count, count}; }

// Blocks of the intra-host ring: local index j < rails holds the union of the blocks of every rank o
// with railOf(o) == j (and, if `hostFilter` >= 0, on that host only); local ranks past the rails hold none.
Block railBlock(const Hierarchy& hi, int j, size_t count, int hostFilter) {
  Block b;
  for (int o = 0; o < hi.layout.nranks(); ++o)
    if (hi.railOf(o) == j && (hostFilter < 0 || hi.layout.hostOf(o) == hostFilter)) b.push_back(rankBlock(o, count));
  return b;
}

}  // namespace

size_t hierAllReducePieces(size_t count, int rails, int hosts, size_t chunkElems) {
  constexpr size_t kMaxPieces = 16;
  if (hosts < 2) return 1;
  const size_t minPiece = static_cast<size_t>(std::max(rails, 1)) * static_cast<size_t>(hosts) * chunkElems;
  return std::clamp<size_t>(count / std::max<size_t>(1, minPiece), 1, kMaxPieces);
}

namespace {

// Lane 0 runs the intra-host rings, lane 1 (rail members only) the rail's ring; they share no peer. Pieces are
// pipelined: lane 0 runs RS(0), RS(1), AG(0), RS(2), AG(1), ..., AG(P-1), where RS(p) is piece p's intra-host
// reduce-scatter and AG(p) its intra-host all-gather, while lane 1 runs AR(0), AR(1), ... (piece p's rail
// all-reduce). Two dependencies per piece order them: AR(p) starts after RS(p) has finished (lane 0), AG(p) after
// AR(p) (lane 1). So the rail carries piece p while the host reduces piece p+1 and shares piece p-1.
Plan hierAllReduce(const CollArgs& args) {
  const Hierarchy hi(args);
  Plan plan = gen::emptyPlan(args);
  const bool onRail = hi.local < hi.rails && hi.nhosts() > 1;
  plan.lanes.resize(onRail ? 2 : 1);
  std::vector<Op>& host = plan.lanes[0];
  const std::vector<int>& mine = hi.myHost();
  const std::vector<int> rail = onRail ? hi.rail(hi.local) : std::vector<int>{};
  const size_t pieces = hierAllReducePieces(args.count, hi.rails, hi.nhosts(), args.chunkElems);
  // Piece p's data in `rails` segments; local rank j < rails owns segment j after the intra-host reduce-scatter.
  auto intraOf = [&](size_t p) {
    const size_t po = segmentOffset(args.count, static_cast<int>(pieces), static_cast<int>(p));
    const size_t pc = segmentCount(args.count, static_cast<int>(pieces), static_cast<int>(p));
    std::vector<Block> intra(mine.size());
    for (int j = 0; j < hi.rails; ++j)
      intra[static_cast<size_t>(j)] = {Range{po + segmentOffset(pc, hi.rails, j), segmentCount(pc, hi.rails, j)}};
    return intra;
  };
  std::vector<uint32_t> reduced(pieces, 0), railed(pieces, 0);  // ops of lane 0 / lane 1 up to RS(p) / AR(p)
  auto dependOn = [](std::vector<Op>& lane, size_t first, int otherLane, uint32_t ops) {
    if (lane.size() > first && ops > 0) {
      lane[first].afterLane = otherLane;
      lane[first].afterOps = ops;
    }
  };
  auto reduceScatter = [&](size_t p) {
    gen::groupReduceScatter(host, mine, hi.local, intraOf(p), kBufSend, kBufRecv, args.chunkElems);
    reduced[p] = static_cast<uint32_t>(host.size());
    if (!onRail) return;
    // All-reduce of our segment of the piece along our rail: a ring reduce-scatter then all-gather over the hosts.
    std::vector<Op>& railLane = plan.lanes[1];
    const size_t first = railLane.size();
    const Range seg = intraOf(p)[static_cast<size_t>(hi.local)][0];
    std::vector<Block> inter(static_cast<size_t>(hi.nhosts()));
    for (int k = 0; k < hi.nhosts(); ++k)
      inter[static_cast<size_t>(k)] = {
          Range{seg.offset + segmentOffset(seg.count, hi.nhosts(), k), segmentCount(seg.count, hi.nhosts(), k)}};
    gen::groupReduceScatter(railLane, rail, hi.host, inter, kBufRecv, kBufRecv, args.chunkElems);
    gen::groupAllGather(railLane, rail, hi.host, inter, kBufRecv, args.chunkElems);
    dependOn(railLane, first, 0, reduced[p]);
    railed[p] = static_cast<uint32_t>(railLane.size());
  };
  auto allGather = [&](size_t p) {
    const size_t first = host.size();
    gen::groupAllGather(host, mine, hi.local, intraOf(p), kBufRecv, args.chunkElems);
    if (onRail) dependOn(host, first, 1, railed[p]);
  };
  reduceScatter(0);
  for (size_t p = 1; p < pieces; ++p) {
    reduceScatter(p);
    allGather(p - 1);
  }
  allGather(pieces - 1);
  return plan;
}

Plan hierReduceScatter(const CollArgs& args) {
  const Hierarchy hi(args);
  const size_t count = args.count;
  const int n = args.nranks;
  Plan plan = gen::emptyPlan(args);
  plan.scratchElems = static_cast<size_t>(n) * count;  // partial sums, at the send buffer's offsets
  std::vector<Op>& lane = plan.lanes.emplace_back();
  const std::vector<int>& mine = hi.myHost();
  // 1. Inside the host: local rank j collects the host's partial sums of every block rail j carries.
  std::vector<Block> intra(mine.size());
  for (int j = 0; j < hi.rails; ++j) intra[static_cast<size_t>(j)] = railBlock(hi, j, count, -1);
  gen::groupReduceScatter(lane, mine, hi.local, intra, kBufSend, kBufScratch, args.chunkElems);
  // 2. Along the rail: each host's member ends with the full sums of its own host's blocks of the rail.
  if (hi.local < hi.rails && hi.nhosts() > 1) {
    std::vector<Block> inter(static_cast<size_t>(hi.nhosts()));
    for (int k = 0; k < hi.nhosts(); ++k) inter[static_cast<size_t>(k)] = railBlock(hi, hi.local, count, k);
    gen::groupReduceScatter(lane, hi.rail(hi.local), hi.host, inter, kBufScratch, kBufScratch, args.chunkElems);
  }
  // 3. Inside the host: each rail member hands every block it finished to its owner.
  const Region result = gen::region(kBufRecv, 0, count);
  for (int o : mine) {
    const int holder = mine[static_cast<size_t>(hi.railOf(o))];
    const Region done = gen::at(kBufScratch, rankBlock(o, count));
    if (holder == args.rank && o == args.rank) gen::append(lane, gen::copyOp(result, done));
    else if (holder == args.rank) gen::append(lane, gen::sendOp(o, done));
    else if (o == args.rank) gen::append(lane, gen::recvOp(holder, result));
  }
  return plan;
}

Plan hierAllGather(const CollArgs& args) {
  const Hierarchy hi(args);
  const size_t count = args.count;
  Plan plan = gen::emptyPlan(args);
  std::vector<Op>& lane = plan.lanes.emplace_back();
  const std::vector<int>& mine = hi.myHost();
  // 1. Inside the host: every rank hands its block to the member of its rail (itself for local ranks
  //    below the rail count).
  const Region input = gen::region(kBufSend, 0, count);
  for (int o : mine) {
    const int holder = mine[static_cast<size_t>(hi.railOf(o))];
    const Region place = gen::at(kBufRecv, rankBlock(o, count));
    if (holder == args.rank && o == args.rank) gen::append(lane, gen::copyOp(place, input));
    else if (o == args.rank) gen::append(lane, gen::sendOp(holder, input));
    else if (holder == args.rank) gen::append(lane, gen::recvOp(o, place));
  }
  // 2. Along the rail: every member gathers the rail's blocks of every host.
  if (hi.local < hi.rails && hi.nhosts() > 1) {
    std::vector<Block> inter(static_cast<size_t>(hi.nhosts()));
    for (int k = 0; k < hi.nhosts(); ++k) inter[static_cast<size_t>(k)] = railBlock(hi, hi.local, count, k);
    gen::groupAllGather(lane, hi.rail(hi.local), hi.host, inter, kBufRecv, args.chunkElems);
  }
  // 3. Inside the host: each rail member shares everything its rail carried.
  std::vector<Block> intra(mine.size());
  for (int j = 0; j < hi.rails; ++j) intra[static_cast<size_t>(j)] = railBlock(hi, j, count, -1);
  gen::groupAllGather(lane, mine, hi.local, intra, kBufRecv, args.chunkElems);
  return plan;
}

// Every intra-host ring is priced as one over a largest host (L ranks) with the data in L blocks; a rail ring
// carries 1/R of the data (R rails) in H blocks.
std::vector<Phase> hierAllReduceShape(const ShapeBuilder& b, double bytes) {
  const HostLayout& lay = b.layout();
  const int L = lay.maxPerHost(), H = lay.nhosts(), R = lay.rails();
  const double intraStep = bytes / L;
  // Pipelined by piece: the three phases overlap.
  std::vector<Phase> phases = {b.ring(b.largestHost(), L - 1, intraStep, (L - 1) * intraStep),
                               b.rail(2 * (H - 1), bytes, true), b.ring(b.largestHost(), L - 1, intraStep, 0)};
  const int pieces = static_cast<int>(hierAllReducePieces(static_cast<size_t>(bytes), R, H, b.chunkBytes()));
  for (Phase& ph : phases) ph.pieces = pieces;
  return phases;
}
std::vector<Phase> hierReduceScatterShape(const ShapeBuilder& b, double bytes) {
  const int L = b.layout().maxPerHost(), H = b.layout().nhosts();
  const double intraStep = bytes / L;
  return {b.ring(b.largestHost(), L - 1, intraStep, (L - 1) * intraStep), b.rail(H - 1, bytes, true),
          b.simple(Phase::Pattern::kHandoff, 1, 0), b.simple(Phase::Pattern::kCopy, 0, bytes / b.nranks())};
}
std::vector<Phase> hierAllGatherShape(const ShapeBuilder& b, double bytes) {
  const int L = b.layout().maxPerHost(), H = b.layout().nhosts();
  return {b.simple(Phase::Pattern::kHandoff, 1, 0), b.simple(Phase::Pattern::kCopy, 0, bytes / b.nranks()),
          b.rail(H - 1, bytes, false), b.ring(b.largestHost(), L - 1, bytes / L, 0)};
}

const AlgorithmRecord kRecords[] = {
    {.kind = CollKind::kAllReduce,
     .name = "hier",
     .generate = hierAllReduce,
     .costShape = hierAllReduceShape,
     .applies = appliesAcrossHosts,
     .requirement = kAcrossHostsRequirement,
     .description = "ring reduce-scatter in each host, a ring per rail between hosts, ring all-gather in each host, "
                    "pipelined in pieces so the three overlap"},
    {.kind = CollKind::kReduceScatter,
     .name = "hier",
     .generate = hierReduceScatter,
     .costShape = hierReduceScatterShape,
     .applies = appliesAcrossHosts,
     .requirement = kAcrossHostsRequirement,
     .description = "ring reduce-scatter in each host, then a ring per rail between hosts; blocks handed to owners"},
    {.kind = CollKind::kAllGather,
     .name = "hier",
     .generate = hierAllGather,
     .costShape = hierAllGatherShape,
     .applies = appliesAcrossHosts,
     .requirement = kAcrossHostsRequirement,
     .description = "blocks taken from owners, a ring per rail between hosts, then a ring all-gather in each host"},
};

}  // namespace

std::span<const AlgorithmRecord> hierAlgorithms() { return kRecords; }

}  // namespace strata
