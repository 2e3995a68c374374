// The table of every algorithm's record, its lookups, and makePlan: argument checks, the cases every algorithm
// shares (count 0, a single rank), then the record's generator.
#include "collectives/algorithms.h"

#include <cstdint>

#include "collectives/generators.h"
#include "util/error.h"

namespace strata {

namespace {

// The families, in the order that makes each collective's default its first record. Each family's records are a
// constant array in its file, so the table costs nothing to build.
constexpr std::span<const AlgorithmRecord> (*kFamilies[])() = {
    ringAlgorithms, oneshotAlgorithms, twoshotAlgorithms,  rhdAlgorithms, treeAlgorithms,
    hierAlgorithms, chainAlgorithms,   pairwiseAlgorithms, p2pAlgorithms, disseminationAlgorithms,
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

std::vector<const AlgorithmRecord*> allAlgorithms() {
  std::vector<const AlgorithmRecord*> out;
  for (int k = 0; k < kNumCollKinds; ++k)
    for (const AlgorithmRecord* r : algorithmRecords(static_cast<CollKind>(k))) out.push_back(r);
  return out;
}

std::vector<const AlgorithmRecord*> algorithmRecords(CollKind kind) {
  std::vector<const AlgorithmRecord*> out;
  for (auto family : kFamilies)
    for (const AlgorithmRecord& r : family())
      if (r.kind == kind) out.push_back(&r);
  return out;
}

std::vector<std::string> algorithmsFor(CollKind kind) {
  std::vector<std::string> names;
  for (const AlgorithmRecord* r : algorithmRecords(kind)) names.emplace_back(r->name);
  return names;
}

const AlgorithmRecord& defaultAlgorithm(CollKind kind) {
  for (auto family : kFamilies)
    for (const AlgorithmRecord& r : family())
      if (r.kind == kind) return r;
  throw InternalError(strprintf("%s has no algorithm", collName(kind)));
}

const AlgorithmRecord* findAlgorithm(CollKind kind, std::string_view name) {
  for (auto family : kFamilies)
    for (const AlgorithmRecord& r : family())
      if (r.kind == kind && name == r.name) return &r;
  return nullptr;
}

const AlgorithmRecord& algorithmOf(CollKind kind, std::string_view name) {
  if (const AlgorithmRecord* r = findAlgorithm(kind, name)) return *r;
  std::string known;
  for (const std::string& n : algorithmsFor(kind)) known += (known.empty() ? "" : ", ") + n;
  throw InvalidArgument(strprintf("unknown %s algorithm '%.*s' (known: %s)", collName(kind),
                                  static_cast<int>(name.size()), name.data(), known.c_str()));
}

Plan makePlan(const CollArgs& args, const std::string& algorithm) {
  const AlgorithmRecord* entry = &algorithmOf(args.kind, algorithm);
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
