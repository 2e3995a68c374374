// Dissemination barrier (Hensgen, Finkel, Manber): in round k = 1, 2, 4, ... < n every rank sends a token
// to rank+k and waits for one from rank-k. After ceil(log2 n) rounds every rank has heard, directly or
// transitively, from every other, so none leaves before all have arrived. Tokens are one scratch element.
#include "collectives/generators.h"

namespace strata {

namespace {

Plan disseminationBarrier(const CollArgs& args) {
  const int n = args.nranks, r = args.rank;
  Plan plan = gen::emptyPlan(args);
  if (n == 1) return plan;
  plan.scratchElems = 1;
  std::vector<Op>& lane = plan.lanes.emplace_back();
  const Region token = gen::region(kBufScratch, 0, 1);
  for (long long k = 1; k < n; k *= 2) {
    const int d = static_cast<int>(k);
    lane.push_back(gen::sendOp(gen::mod(r + d, n), token));
    lane.push_back(gen::recvOp(gen::mod(r - d, n), token));
  }
  return plan;
}

// ceil(log2 n) rounds of a one-element token.
std::vector<Phase> disseminationBarrierShape(const ShapeBuilder& b, double) {
  int rounds = 0;
  for (long long k = 1; k < b.nranks(); k *= 2) ++rounds;
  return {b.rounds(rounds, 1)};
}

const AlgorithmRecord kRecords[] = {
    {.kind = CollKind::kBarrier,
     .name = "dissemination",
     .generate = disseminationBarrier,
     .costShape = disseminationBarrierShape,
     .applies = appliesEverywhere,
     .description = "dissemination barrier: ceil(log2 n) rounds of a token to rank+2^k"},
};

}  // namespace

std::span<const AlgorithmRecord> disseminationAlgorithms() { return kRecords; }

}  // namespace strata
