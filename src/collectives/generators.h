// Internal to src/collectives: the algorithm families behind the table (algorithms.h), one file each, and the small
// op-building helpers their generators share. Adding an algorithm: write its record next to its generator in its
// family's file (a new family: its file, a declaration here, and its place in algorithms.cc's list).
#pragma once

#include <algorithm>
#include <cstddef>
#include <span>
#include <vector>

#include "collectives/algorithm_record.h"
#include "collectives/coll_args.h"
#include "collectives/plan.h"

namespace strata {

// ---- the algorithm families: each file's records (algorithm_record.h), gathered by algorithms.cc ----
std::span<const AlgorithmRecord> ringAlgorithms();           // ring.cc: rings over every rank
std::span<const AlgorithmRecord> oneshotAlgorithms();        // oneshot.cc
std::span<const AlgorithmRecord> twoshotAlgorithms();        // twoshot.cc: direct reduce-scatter, direct all-gather
std::span<const AlgorithmRecord> rhdAlgorithms();            // rhd.cc: recursive halving and doubling
std::span<const AlgorithmRecord> treeAlgorithms();           // tree.cc: double binary tree
std::span<const AlgorithmRecord> hierAlgorithms();           // hier.cc: intra-host, one ring per rail, intra-host
std::span<const AlgorithmRecord> chainAlgorithms();          // chain.cc: pipelined chains from / to the root
std::span<const AlgorithmRecord> pairwiseAlgorithms();       // pairwise.cc: all-to-all
std::span<const AlgorithmRecord> p2pAlgorithms();            // p2p.cc: send, recv
std::span<const AlgorithmRecord> disseminationAlgorithms();  // dissemination.cc: barrier

/// How many pieces the hierarchical all-reduce is pipelined in across `hosts` hosts of `rails` rails: each rank's
/// share of a piece on its rail is at least one chunk; 1 to 16 (1 on one host). Counts in elements or in bytes alike.
size_t hierAllReducePieces(size_t count, int rails, int hosts, size_t chunkElems);

// ---- helpers ----
namespace gen {

inline int mod(int a, int n) { return ((a % n) + n) % n; }

inline Region region(int buf, size_t offset, size_t count) { return Region{buf, offset, count}; }

/// Chunk `c` of the `count` elements at `offset` of `buf`, cut in chunks of `chunkElems`; empty (count 0)
/// past the end.
inline Region chunkOf(int buf, size_t offset, size_t count, size_t c, size_t chunkElems) {
  const size_t begin = std::min(count, c * chunkElems);
  const size_t end = std::min(count, begin + chunkElems);
  return Region{buf, offset + begin, end - begin};
}

inline size_t numChunks(size_t count, size_t chunkElems) { return (count + chunkElems - 1) / chunkElems; }

inline Op sendOp(int to, Region src) {
  Op op;
  op.kind = OpKind::kSend;
  op.sendPeer = to;
  op.src = src;
  return op;
}
inline Op recvOp(int from, Region dst) {
  Op op;
  op.kind = OpKind::kRecv;
  op.recvPeer = from;
  op.dst = dst;
  return op;
}
inline Op recvReduceOp(int from, Region dst, Region src) {
  Op op;
  op.kind = OpKind::kRecvReduce;
  op.recvPeer = from;
  op.dst = dst;
  op.src = src;
  return op;
}
inline Op recvReduceSendOp(int from, int to, Region src) {
  Op op;
  op.kind = OpKind::kRecvReduceSend;
  op.recvPeer = from;
  op.sendPeer = to;
  op.src = src;
  return op;
}
inline Op recvReduceCopySendOp(int from, int to, Region dst, Region src) {
  Op op;
  op.kind = OpKind::kRecvReduceCopySend;
  op.recvPeer = from;
  op.sendPeer = to;
  op.dst = dst;
  op.src = src;
  return op;
}
inline Op recvCopySendOp(int from, int to, Region dst) {
  Op op;
  op.kind = OpKind::kRecvCopySend;
  op.recvPeer = from;
  op.sendPeer = to;
  op.dst = dst;
  return op;
}
inline Op copySendOp(int to, Region dst, Region src) {
  Op op;
  op.kind = OpKind::kCopySend;
  op.sendPeer = to;
  op.dst = dst;
  op.src = src;
  return op;
}
inline Op copyOp(Region dst, Region src) {
  Op op;
  op.kind = OpKind::kCopy;
  op.dst = dst;
  op.src = src;
  return op;
}
inline Op reduceLocalOp(Region dst, Region src) {
  Op op;
  op.kind = OpKind::kReduceLocal;
  op.dst = dst;
  op.src = src;
  return op;
}

/// Appends `op` unless it moves no elements: both ends of a connection compute the same sizes, so they
/// drop the same ops.
inline void append(std::vector<Op>& lane, const Op& op) {
  if (op.count() > 0) lane.push_back(op);
}

/// A plan for args with no lanes yet.
inline Plan emptyPlan(const CollArgs& args) {
  Plan plan;
  plan.rank = args.rank;
  plan.nranks = args.nranks;
  return plan;
}

// ---- rings over a subset of ranks, on blocks made of several element ranges (group_ring.cc) ----
// Hierarchical plans run rings among the ranks of one host or of one rail, on blocks that are unions of
// rank blocks scattered through the buffer. A block is a list of element ranges, taken in order. Both
// ends of a connection build the same blocks, so they cut the same ops.
struct Range {
  size_t offset = 0;
  size_t count = 0;
};
using Block = std::vector<Range>;

/// The ranges of `b` in buffer `buf`.
inline Region at(int buf, const Range& r) { return Region{buf, r.offset, r.count}; }

/// Ring reduce-scatter among `group` (global ranks in ring order; `me` indexes this rank in it).
/// Participant j ends with blocks[j] reduced over the group, written to buffer `out` at the block's
/// offsets; inputs are read from buffer `in` at the same offsets. in == out is allowed.
void groupReduceScatter(std::vector<Op>& lane, const std::vector<int>& group, int me, const std::vector<Block>& blocks,
                        int in, int out, size_t chunkElems);
/// Ring all-gather among `group`, in place in buffer `buf`: participant j contributes blocks[j] and
/// everyone ends with every block.
void groupAllGather(std::vector<Op>& lane, const std::vector<int>& group, int me, const std::vector<Block>& blocks,
                    int buf, size_t chunkElems);

}  // namespace gen
}  // namespace strata
