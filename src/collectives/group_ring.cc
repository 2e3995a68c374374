// Rings over a subset of ranks on multi-range blocks: the building block of the hierarchical plans.
//
// The interleaving is the flat ring's: the ops of unit u of every block come before those of unit u+1, so
// a rank never runs more than one unit ahead of its successor. A unit is at most one chunk of one range:
// every message takes FIFO slots however small it is, so a unit must be a single op for the capacity
// rule (one chunk in flight per step) to hold. Both ends cut the same units.
#include "collectives/generators.h"
#include "util/error.h"

namespace strata {
namespace gen {

namespace {

// The block cut into units of at most chunkElems elements, none spanning two ranges.
Block units(const Block& b, size_t chunkElems) {
  Block out;
  for (const Range& r : b)
    for (size_t c = 0; c < numChunks(r.count, chunkElems); ++c) {
      const Region x = chunkOf(0, r.offset, r.count, c, chunkElems);
      out.push_back(Range{x.offset, x.count});
    }
  return out;
}

std::vector<Block> unitsOf(const std::vector<Block>& blocks, size_t chunkElems, size_t* rounds) {
  std::vector<Block> out;
  *rounds = 0;
  for (const Block& b : blocks) {
    out.push_back(units(b, chunkElems));
    *rounds = std::max(*rounds, out.back().size());
  }
  return out;
}

void checkGroup(const std::vector<int>& group, int me, const std::vector<Block>& blocks) {
  if (me < 0 || static_cast<size_t>(me) >= group.size() || blocks.size() != group.size())
    throw InternalError(strprintf("group ring: index %d, %zu ranks, %zu blocks", me, group.size(), blocks.size()));
}

}  // namespace

void groupReduceScatter(std::vector<Op>& lane, const std::vector<int>& group, int me, const std::vector<Block>& blocks,
                        int in, int out, size_t chunkElems) {
  checkGroup(group, me, blocks);
  const int m = static_cast<int>(group.size());
  if (m == 1) {
    for (const Range& r : blocks[0]) append(lane, copyOp(at(out, r), at(in, r)));
    return;
  }
  const int next = group[static_cast<size_t>(mod(me + 1, m))], prev = group[static_cast<size_t>(mod(me - 1, m))];
  size_t rounds = 0;
  const std::vector<Block> unit = unitsOf(blocks, chunkElems, &rounds);
  // Step s works on block (me - s - 1) mod m, so the last step (m-1) finishes our own block.
  for (size_t u = 0; u < rounds; ++u) {
    for (int s = 0; s <= m - 1; ++s) {
      const Block& blk = unit[static_cast<size_t>(mod(me - s - 1, m))];
      if (u >= blk.size()) continue;
      const Range& r = blk[u];
      if (s == 0) append(lane, sendOp(next, at(in, r)));
      else if (s < m - 1) append(lane, recvReduceSendOp(prev, next, at(in, r)));
      else append(lane, recvReduceOp(prev, at(out, r), at(in, r)));
    }
  }
}

void groupAllGather(std::vector<Op>& lane, const std::vector<int>& group, int me, const std::vector<Block>& blocks,
                    int buf, size_t chunkElems) {
  checkGroup(group, me, blocks);
  const int m = static_cast<int>(group.size());
  if (m == 1) return;
  const int next = group[static_cast<size_t>(mod(me + 1, m))], prev = group[static_cast<size_t>(mod(me - 1, m))];
  size_t rounds = 0;
  const std::vector<Block> unit = unitsOf(blocks, chunkElems, &rounds);
  // Step s forwards block (me - s) mod m.
  for (size_t u = 0; u < rounds; ++u) {
    for (int s = 0; s <= m - 1; ++s) {
      const Block& blk = unit[static_cast<size_t>(mod(me - s, m))];
      if (u >= blk.size()) continue;
      const Range& r = blk[u];
      if (s == 0) append(lane, sendOp(next, at(buf, r)));
      else if (s < m - 1) append(lane, recvCopySendOp(prev, next, at(buf, r)));
      else append(lane, recvOp(prev, at(buf, r)));
    }
  }
}

}  // namespace gen
}  // namespace strata
