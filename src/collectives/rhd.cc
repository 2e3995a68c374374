// Recursive halving and doubling (Rabenseifner): log2(p) exchange steps each way instead of a ring's
// n-1, moving the same bytes as a ring. The latency-bound middle ground between one-shot and ring.
//
// Non-power-of-two n: with p the largest power of two <= n and pairs = n - p, ranks 0..2 pairs-1 pair up;
// each even rank of a pair hands its data to the odd one first and gets the result back last, so p
// "virtual ranks" run the power-of-two algorithm (RhdPattern, rhd_pattern.h, which the cost model shares).
//
// Virtual rank v owns "virtual block" v: a contiguous element range. Halving with masks p/2 .. 1 keeps the
// half of the current range that contains block v, so v ends with block v fully reduced; doubling with
// masks 1 .. p/2 grows the owned range back by exchanging with the partner's. For reduce-scatter and
// all-gather the virtual blocks follow rank blocks (v < pairs covers the pair's two blocks), so each rank's
// block ends where NCCL wants it.
#include "collectives/generators.h"
#include "collectives/rhd_pattern.h"

namespace strata {

using gen::chunkOf;
using gen::Range;

namespace {

// Element range of virtual blocks [lo, hi) given each block's range.
Range span(const std::vector<Range>& vblocks, int lo, int hi) {
  const size_t begin = vblocks[static_cast<size_t>(lo)].offset;
  const Range& last = vblocks[static_cast<size_t>(hi - 1)];
  return Range{begin, last.offset + last.count - begin};
}

// One exchange step: send `out` to `peer` and receive `in` from it, chunk by chunk so neither side runs
// more than a chunk ahead. `reduce`: received data is reduced into `in` at buffer `dst` with `src`.
void exchange(std::vector<Op>& lane, int peer, Region out, Region inDst, Region inSrc, bool reduce, size_t chunk) {
  const size_t chunks = std::max(gen::numChunks(out.count, chunk), gen::numChunks(inDst.count, chunk));
  for (size_t c = 0; c < chunks; ++c) {
    gen::append(lane, gen::sendOp(peer, chunkOf(out.buf, out.offset, out.count, c, chunk)));
    const Region d = chunkOf(inDst.buf, inDst.offset, inDst.count, c, chunk);
    if (reduce) gen::append(lane, gen::recvReduceOp(peer, d, chunkOf(inSrc.buf, inSrc.offset, inSrc.count, c, chunk)));
    else gen::append(lane, gen::recvOp(peer, d));
  }
}

// Halving among virtual ranks: afterwards virtual rank v holds block v reduced over all ranks in `work`.
// The first step reads this rank's contribution from buffer `in`.
void halving(std::vector<Op>& lane, const RhdPattern& g, int v, const std::vector<Range>& vblocks, int in, int work,
             size_t chunk) {
  int lo = 0, hi = g.p;
  bool first = true;
  for (int mask = g.p / 2; mask >= 1; mask /= 2) {
    const int partner = v ^ mask;
    const int mid = lo + mask;
    const bool upper = (v & mask) != 0;
    const Range keep = upper ? span(vblocks, mid, hi) : span(vblocks, lo, mid);
    const Range give = upper ? span(vblocks, lo, mid) : span(vblocks, mid, hi);
    const int src = first ? in : work;
    exchange(lane, g.real(partner), gen::at(src, give), gen::at(work, keep), gen::at(src, keep), true, chunk);
    if (upper) lo = mid;
    else hi = mid;
    first = false;
  }
}

// Doubling among virtual ranks, in place in `buf`: afterwards every virtual rank holds every block.
void doubling(std::vector<Op>& lane, const RhdPattern& g, int v, const std::vector<Range>& vblocks, int buf,
              size_t chunk) {
  for (int mask = 1; mask < g.p; mask *= 2) {
    const int partner = v ^ mask;
    const int mineLo = v & ~(mask - 1), theirsLo = partner & ~(mask - 1);
    exchange(lane, g.real(partner), gen::at(buf, span(vblocks, mineLo, mineLo + mask)),
             gen::at(buf, span(vblocks, theirsLo, theirsLo + mask)), Region{}, false, chunk);
  }
}

// Virtual blocks following rank blocks of `count` elements: v < pairs covers ranks 2v and 2v+1.
std::vector<Range> rankVBlocks(const RhdPattern& g, size_t count) {
  std::vector<Range> vb(static_cast<size_t>(g.p));
  for (int v = 0; v < g.p; ++v) {
    const size_t first = static_cast<size_t>(v < g.pairs ? 2 * v : v + g.pairs);
    vb[static_cast<size_t>(v)] = Range{first * count, (v < g.pairs ? 2 : 1) * count};
  }
  return vb;
}

Plan rhdAllReduce(const CollArgs& args) {
  const RhdPattern g(args.nranks);
  const int r = args.rank, v = g.vrank(r);
  const size_t count = args.count;
  Plan plan = gen::emptyPlan(args);
  std::vector<Op>& lane = plan.lanes.emplace_back();
  const Region all = gen::region(kBufRecv, 0, count);
  if (v < 0) {  // even rank of a pair: hand over the input, get the result back
    gen::append(lane, gen::sendOp(r + 1, gen::region(kBufSend, 0, count)));
    gen::append(lane, gen::recvOp(r + 1, all));
    return plan;
  }
  int in = kBufSend;
  if (r < 2 * g.pairs) {
    gen::append(lane, gen::recvReduceOp(r - 1, all, gen::region(kBufSend, 0, count)));
    in = kBufRecv;
  }
  std::vector<Range> vblocks(static_cast<size_t>(g.p));
  for (int b = 0; b < g.p; ++b)
    vblocks[static_cast<size_t>(b)] = Range{segmentOffset(count, g.p, b), segmentCount(count, g.p, b)};
  halving(lane, g, v, vblocks, in, kBufRecv, args.chunkElems);
  doubling(lane, g, v, vblocks, kBufRecv, args.chunkElems);
  if (r < 2 * g.pairs) gen::append(lane, gen::sendOp(r - 1, all));
  return plan;
}

Plan rhdReduceScatter(const CollArgs& args) {
  const RhdPattern g(args.nranks);
  const int r = args.rank, v = g.vrank(r);
  const size_t count = args.count, total = static_cast<size_t>(args.nranks) * count;
  Plan plan = gen::emptyPlan(args);
  std::vector<Op>& lane = plan.lanes.emplace_back();
  const Region result = gen::region(kBufRecv, 0, count);
  if (v < 0) {
    gen::append(lane, gen::sendOp(r + 1, gen::region(kBufSend, 0, total)));
    gen::append(lane, gen::recvOp(r + 1, result));
    return plan;
  }
  plan.scratchElems = total;  // partial sums at the send buffer's offsets
  int in = kBufSend;
  if (r < 2 * g.pairs) {
    gen::append(lane, gen::recvReduceOp(r - 1, gen::region(kBufScratch, 0, total), gen::region(kBufSend, 0, total)));
    in = kBufScratch;
  }
  halving(lane, g, v, rankVBlocks(g, count), in, kBufScratch, args.chunkElems);
  gen::append(lane, gen::copyOp(result, gen::region(kBufScratch, static_cast<size_t>(r) * count, count)));
  if (r < 2 * g.pairs)
    gen::append(lane, gen::sendOp(r - 1, gen::region(kBufScratch, static_cast<size_t>(r - 1) * count, count)));
  return plan;
}

Plan rhdAllGather(const CollArgs& args) {
  const RhdPattern g(args.nranks);
  const int r = args.rank, v = g.vrank(r);
  const size_t count = args.count, total = static_cast<size_t>(args.nranks) * count;
  Plan plan = gen::emptyPlan(args);
  std::vector<Op>& lane = plan.lanes.emplace_back();
  const Region input = gen::region(kBufSend, 0, count);
  const size_t me = static_cast<size_t>(r) * count;
  if (v < 0) {
    // Everything but our own block comes back (our block is in place already, or we copy it).
    gen::append(lane, gen::sendOp(r + 1, input));
    gen::append(lane, gen::copyOp(gen::region(kBufRecv, me, count), input));
    gen::append(lane, gen::recvOp(r + 1, gen::region(kBufRecv, 0, me)));
    gen::append(lane, gen::recvOp(r + 1, gen::region(kBufRecv, me + count, total - me - count)));
    return plan;
  }
  gen::append(lane, gen::copyOp(gen::region(kBufRecv, me, count), input));
  if (r < 2 * g.pairs) gen::append(lane, gen::recvOp(r - 1, gen::region(kBufRecv, me - count, count)));
  doubling(lane, g, v, rankVBlocks(g, count), kBufRecv, args.chunkElems);
  if (r < 2 * g.pairs) {
    const size_t theirs = me - count;
    gen::append(lane, gen::sendOp(r - 1, gen::region(kBufRecv, 0, theirs)));
    gen::append(lane, gen::sendOp(r - 1, gen::region(kBufRecv, theirs + count, total - theirs - count)));
  }
  return plan;
}

// log2(p) exchanges each way over the virtual ranks, after (and before) a pair step for n != 2^k.
std::vector<Phase> rhdAllReduceShape(const ShapeBuilder& b, double bytes) {
  return {b.rhd(Phase::Pattern::kHalving, bytes, true), b.rhd(Phase::Pattern::kDoubling, bytes, false)};
}
std::vector<Phase> rhdReduceScatterShape(const ShapeBuilder& b, double bytes) {
  return {b.rhd(Phase::Pattern::kHalving, bytes, true), b.simple(Phase::Pattern::kCopy, 0, bytes / b.nranks())};
}
std::vector<Phase> rhdAllGatherShape(const ShapeBuilder& b, double bytes) {
  return {b.rhd(Phase::Pattern::kDoubling, bytes, false)};
}

const AlgorithmRecord kRecords[] = {
    {.kind = CollKind::kAllReduce,
     .name = "rhd",
     .generate = rhdAllReduce,
     .costShape = rhdAllReduceShape,
     .applies = appliesEverywhere,
     .description = "recursive halving then doubling (Rabenseifner): 2 log2(n) steps, a ring's bytes; any n"},
    {.kind = CollKind::kReduceScatter,
     .name = "rhd",
     .generate = rhdReduceScatter,
     .costShape = rhdReduceScatterShape,
     .applies = appliesEverywhere,
     .description = "recursive halving: log2(n) steps, a ring's bytes; any n"},
    {.kind = CollKind::kAllGather,
     .name = "rhd",
     .generate = rhdAllGather,
     .costShape = rhdAllGatherShape,
     .applies = appliesEverywhere,
     .description = "recursive doubling: log2(n) steps, a ring's bytes; any n"},
};

}  // namespace

std::span<const AlgorithmRecord> rhdAlgorithms() { return kRecords; }

}  // namespace strata
