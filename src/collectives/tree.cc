// Double binary tree all-reduce (as in NCCL): two binary trees over all ranks, each reducing half of the
// data up to its root and broadcasting it back down. Every rank is a leaf in one tree and an inner node
// in the other (for an in-order tree the leaves sit at even positions; the second tree lists the ranks
// shifted by one, which moves them to odd ones), so the two halves load every rank and link about
// equally. Depth is log2(n): 2 log2(n) hops of latency against a ring's 2(n-1), at full bandwidth for
// large counts because the chunks pipeline down the tree.
#include <algorithm>
#include <cmath>

#include "collectives/generators.h"

namespace strata {

using gen::chunkOf;

namespace {

struct TreeNode {
  int parent = -1;
  std::vector<int> children;
};

// In-order balanced binary tree over order[lo..hi]; returns the subtree's root rank.
int buildTree(const std::vector<int>& order, int lo, int hi, int parent, std::vector<TreeNode>& nodes) {
  if (lo > hi) return -1;
  const int mid = lo + (hi - lo) / 2;
  const int me = order[static_cast<size_t>(mid)];
  nodes[static_cast<size_t>(me)].parent = parent;
  for (int child : {buildTree(order, lo, mid - 1, me, nodes), buildTree(order, mid + 1, hi, me, nodes)})
    if (child >= 0) nodes[static_cast<size_t>(me)].children.push_back(child);
  return me;
}

std::vector<TreeNode> tree(int n, int shift) {
  std::vector<int> order(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) order[static_cast<size_t>(i)] = (i + shift) % n;
  std::vector<TreeNode> nodes(static_cast<size_t>(n));
  buildTree(order, 0, n - 1, -1, nodes);
  return nodes;
}

// Up: reduce the children's partial results with ours and pass the sum to the parent (the root keeps it).
void up(std::vector<Op>& lane, const TreeNode& node, Region in, Region work) {
  const std::vector<int>& ch = node.children;
  if (ch.empty()) {
    gen::append(lane, gen::sendOp(node.parent, in));
    return;
  }
  for (size_t i = 0; i < ch.size(); ++i) {
    const Region src = i == 0 ? in : work;
    if (i + 1 == ch.size() && node.parent >= 0) gen::append(lane, gen::recvReduceSendOp(ch[i], node.parent, src));
    else gen::append(lane, gen::recvReduceOp(ch[i], work, src));
  }
}

// Down: take the result from the parent (the root has it) and pass it on to the children.
void down(std::vector<Op>& lane, const TreeNode& node, Region work) {
  const std::vector<int>& ch = node.children;
  if (node.parent < 0) {
    for (int c : ch) gen::append(lane, gen::sendOp(c, work));
    return;
  }
  if (ch.empty()) {
    gen::append(lane, gen::recvOp(node.parent, work));
    return;
  }
  gen::append(lane, gen::recvCopySendOp(node.parent, ch[0], work));
  for (size_t i = 1; i < ch.size(); ++i) gen::append(lane, gen::sendOp(ch[i], work));
}

Plan treeAllReduce(const CollArgs& args) {
  const int n = args.nranks, r = args.rank;
  const std::vector<TreeNode> trees[2] = {tree(n, 0), tree(n, 1)};
  const size_t half = args.count / 2;
  const size_t offset[2] = {0, half}, count[2] = {half, args.count - half};
  // Both trees share connections, so each gets half a chunk: a connection then carries at most one chunk
  // per step of the pipeline below.
  const size_t chunk = std::max<size_t>(1, args.chunkElems / 2);
  const size_t chunks = gen::numChunks(count[1], chunk);  // count[1] >= count[0]
  Plan plan = gen::emptyPlan(args);
  std::vector<Op>& lane = plan.lanes.emplace_back();
  auto regions = [&](int t, size_t c, Region* in, Region* work) {
    *in = chunkOf(kBufSend, offset[t], count[t], c, chunk);
    *work = chunkOf(kBufRecv, offset[t], count[t], c, chunk);
  };
  // Chunk c goes up while chunk c-1 comes down, so the tree pipelines.
  for (size_t c = 0; c <= chunks; ++c) {
    Region in, work;
    for (int t = 0; t < 2; ++t) {
      if (c < chunks) {
        regions(t, c, &in, &work);
        if (work.count) up(lane, trees[t][static_cast<size_t>(r)], in, work);
      }
    }
    for (int t = 0; t < 2; ++t) {
      if (c >= 1) {
        regions(t, c - 1, &in, &work);
        if (work.count) down(lane, trees[t][static_cast<size_t>(r)], work);
      }
    }
  }
  return plan;
}

// 2 ceil(log2(n+1)) hops of the first half chunk, then the busiest rank's streams. The busiest rank, inner in one
// tree and a leaf in the other, receives and sends 2 S: S/2 from each child and from its parent, S/2 to its parent
// and to each child, plus a leaf's S/2 each way in the other tree. Four streams of S/2 leave it.
std::vector<Phase> treeAllReduceShape(const ShapeBuilder& b, double bytes) {
  Phase ph = b.simple(Phase::Pattern::kTree, 2 * static_cast<int>(std::ceil(std::log2(b.nranks() + 1.0))),
                      std::min(bytes / 2, static_cast<double>(b.chunkBytes()) / 2));
  ph.fanout = 4;
  ph.streamBytes = bytes / 2;
  ph.reduceBytes = bytes;
  return {ph};
}

const AlgorithmRecord kRecords[] = {
    {.kind = CollKind::kAllReduce,
     .name = "tree",
     .generate = treeAllReduce,
     .costShape = treeAllReduceShape,
     .applies = appliesEverywhere,
     .ncclName = "Tree",
     .description = "double binary tree: each half of the data reduced up one tree and broadcast down it, "
                    "2 log2(n) hops of latency"},
};

}  // namespace

std::span<const AlgorithmRecord> treeAlgorithms() { return kRecords; }

}  // namespace strata
