// Dispatch from (collective, algorithm name) to the generators, argument checks, and the cases every
// algorithm shares (count 0, a single rank).
#include "collectives/algorithms.h"

#include <cstdint>

#include "collectives/generators.h"
#include "util/error.h"

namespace strata {

namespace {

struct AlgorithmEntry {
  CollKind kind;
  const char* name;
  Plan (*generate)(const CollArgs&);
};

// The first entry of each collective is its default.
const AlgorithmEntry kAlgorithms[] = {
    {CollKind::kAllReduce, "ring", ringAllReduce},
    {CollKind::kAllReduce, "oneshot", oneshotAllReduce},
    {CollKind::kAllReduce, "twoshot", twoshotAllReduce},
    {CollKind::kAllReduce, "rhd", rhdAllReduce},
    {CollKind::kAllReduce, "tree", treeAllReduce},
    {CollKind::kAllReduce, "hier", hierAllReduce},
    {CollKind::kReduceScatter, "ring", ringReduceScatter},
    {CollKind::kReduceScatter, "rhd", rhdReduceScatter},
    {CollKind::kReduceScatter, "hier", hierReduceScatter},
    {CollKind::kAllGather, "ring", ringAllGather},
    {CollKind::kAllGather, "rhd", rhdAllGather},
    {CollKind::kAllGather, "hier", hierAllGather},
    {CollKind::kBroadcast, "chain", chainBroadcast},
    {CollKind::kReduce, "chain", chainReduce},
    {CollKind::kAllToAll, "pairwise", pairwiseAllToAll},
    {CollKind::kSend, "p2p", p2pSend},
    {CollKind::kRecv, "p2p", p2pRecv},
    {CollKind::kBarrier, "dissemination", disseminationBarrier},
};

// Elements of the larger of the user's buffers in units of args.count (n blocks for the collectives that
// take a count per rank).
size_t blocksPerBuffer(const CollArgs& args) {
  switch (args.kind) {
    case CollKind::kReduceScatter:
    case CollKind::kAllGather:
    case CollKind::kAllToAll: return static_cast<size_t>(args.nranks);
    default: return 1;
  }
}

void checkArgs(const CollArgs& args) {
  const char* coll = collName(args.kind);
  if (args.nranks < 1) throw InvalidArgument(strprintf("%s: nranks %d must be >= 1", coll, args.nranks));
  if (args.rank < 0 || args.rank >= args.nranks)
    throw InvalidArgument(strprintf("%s: rank %d out of range for %d rank(s)", coll, args.rank, args.nranks));
  if (args.chunkElems < 1) throw InvalidArgument(strprintf("%s: chunkElems must be >= 1", coll));
  if ((args.kind == CollKind::kBroadcast || args.kind == CollKind::kReduce) &&
      (args.root < 0 || args.root >= args.nranks))
    throw InvalidArgument(
        strprintf("%s on rank %d: root %d out of range for %d rank(s)", coll, args.rank, args.root, args.nranks));
  if ((args.kind == CollKind::kSend || args.kind == CollKind::kRecv) &&
      (args.peer < 0 || args.peer >= args.nranks || args.peer == args.rank))
    throw InvalidArgument(
        strprintf("%s on rank %d: peer %d is not another rank of %d", coll, args.rank, args.peer, args.nranks));
  if (args.count > SIZE_MAX / blocksPerBuffer(args))
    throw InvalidArgument(
        strprintf("%s on rank %d: count %zu x %d ranks overflows", coll, args.rank, args.count, args.nranks));
}

// One rank: the result is the input (broadcast, reduce, all-reduce, all-gather, reduce-scatter and
// all-to-all alike), a copy unless in place.
Plan singleRankPlan(const CollArgs& args) {
  Plan plan;
  plan.rank = 0;
  plan.nranks = 1;
  if (!args.inPlace && args.kind != CollKind::kBarrier)
    gen::append(plan.lanes.emplace_back(),
                gen::copyOp(gen::region(kBufRecv, 0, args.count), gen::region(kBufSend, 0, args.count)));
  return plan;
}

}  // namespace

std::vector<std::string> algorithmsFor(CollKind kind) {
  std::vector<std::string> names;
  for (const AlgorithmEntry& e : kAlgorithms)
    if (e.kind == kind) names.emplace_back(e.name);
  return names;
}

Plan makePlan(const CollArgs& args, const std::string& algorithm) {
  const AlgorithmEntry* entry = nullptr;
  for (const AlgorithmEntry& e : kAlgorithms)
    if (e.kind == args.kind && algorithm == e.name) entry = &e;
  if (!entry) {
    std::string known;
    for (const std::string& name : algorithmsFor(args.kind)) known += (known.empty() ? "" : ", ") + name;
    throw InvalidArgument(
        strprintf("unknown %s algorithm '%s' (known: %s)", collName(args.kind), algorithm.c_str(), known.c_str()));
  }
  checkArgs(args);
  Plan plan;
  if (args.kind == CollKind::kBarrier) {
    plan = entry->generate(args);
  } else if (args.count == 0) {
    plan = gen::emptyPlan(args);
  } else if (args.nranks == 1) {
    plan = singleRankPlan(args);
  } else {
    plan = entry->generate(args);
  }
  plan.algorithm = entry->name;
  std::erase_if(plan.lanes, [](const std::vector<Op>& lane) { return lane.empty(); });
  return plan;
}

}  // namespace strata
