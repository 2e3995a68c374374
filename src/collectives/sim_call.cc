// The calls the simulator runs (sim.h): a call's plans, made by the same makePlan the executor uses; the symmetry
// that spares simulating every rank of identical hosts; and every algorithm of a collective that applies. The events
// themselves are the engine's (sim_engine.h).
#include <algorithm>
#include <chrono>
#include <memory>

#include "collectives/algorithms.h"
#include "collectives/host_layout.h"
#include "collectives/sim.h"
#include "collectives/sim_engine.h"
#include "util/error.h"

namespace strata {
namespace {

constexpr int kMaxFullRanks = 32768;  // the most ranks simulated one by one (16,384 ranks of a tree: ~20 s)

size_t countOf(const SimCall& call, int n) {
  const size_t elems = call.bytes / std::max<size_t>(1, call.elemSize);
  switch (call.kind) {
    case CollKind::kReduceScatter:
    case CollKind::kAllGather:
    case CollKind::kAllToAll: return elems / static_cast<size_t>(n);
    default: return elems;
  }
}

CollArgs argsFor(const SimCluster& c, const SimCall& call, int n, int rank, const std::vector<int>& hostOf) {
  CollArgs a = makeCollArgs(
      call.kind, n, rank, countOf(call, n),
      std::max<size_t>(1, c.chunkBytes() * static_cast<size_t>(std::max(1, call.coarsen)) / call.elemSize));
  a.hostOf = hostOf;
  return a;
}

// True if `b` is `a` with every peer shifted by `s` (mod n): the same lanes, op kinds, dependencies, and counts
// within one element (near-equal segments).
bool shiftsBy(const Plan& a, const Plan& b, int s, int n) {
  if (a.lanes.size() != b.lanes.size()) return false;
  auto shifted = [&](int peer) { return peer < 0 ? peer : (peer + s) % n; };
  for (size_t l = 0; l < a.lanes.size(); ++l) {
    const std::vector<Op>& x = a.lanes[l];
    const std::vector<Op>& y = b.lanes[l];
    if (x.size() != y.size()) return false;
    for (size_t i = 0; i < x.size(); ++i) {
      const size_t cx = x[i].count(), cy = y[i].count();
      if (x[i].kind != y[i].kind || shifted(x[i].sendPeer) != y[i].sendPeer ||
          shifted(x[i].recvPeer) != y[i].recvPeer || x[i].channel != y[i].channel || x[i].afterLane != y[i].afterLane ||
          x[i].afterOps != y[i].afterOps || (cx > cy ? cx - cy : cy - cx) > 1)
        return false;
    }
  }
  return true;
}

}  // namespace

SimResult simulate(const SimCluster& cluster, const SimCall& call) {
  const auto start = std::chrono::steady_clock::now();
  const int hosts = call.hosts > 0 ? call.hosts : cluster.hosts;
  SimCluster c = cluster;
  if (call.ranksPerHost > 0) c.ranksPerHost = call.ranksPerHost;
  if (c.maxHosts > 0 && hosts > c.maxHosts)
    throw InvalidArgument(strprintf("strata-sim: %d hosts is more than cluster '%s' takes (maxHosts %d)", hosts,
                                    c.name.c_str(), c.maxHosts));
  if (call.elemSize == 0) throw InvalidArgument("strata-sim: element size 0");
  std::vector<int> hostOf = call.hostOf;
  const bool uniform = hostOf.empty();
  if (uniform)
    for (int h = 0; h < hosts; ++h)
      for (int l = 0; l < c.ranksPerHost; ++l) hostOf.push_back(h);
  const int n = static_cast<int>(hostOf.size());
  if (n < 1) throw InvalidArgument("strata-sim: no ranks");
  const int nhosts = *std::max_element(hostOf.begin(), hostOf.end()) + 1;
  const PlanProgram* program = call.program;
  if (program) {
    if (program->kind != call.kind || program->nranks != n)
      throw InvalidArgument(strprintf("strata-sim: %s is a %s on %d ranks, not a %s on %d", program->file.c_str(),
                                      collName(program->kind), program->nranks, collName(call.kind), n));
    // Its channels are thread blocks of their own: one block's pieces and chunks, one block's rate per connection.
    c.channels = 1;
  } else {
    const AlgorithmRecord& algorithm = algorithmOf(call.kind, call.algorithm);
    if (!algorithm.applies(HostLayout(n, hostOf, "strata-sim"), call.bytes))
      throw InvalidArgument(strprintf("strata-sim: %s needs %s", algorithm.name, algorithm.requirement));
  }
  const size_t count = countOf(call, n);
  auto planFor = [&](int rank) {
    const CollArgs args = argsFor(c, call, n, rank, hostOf);
    return program ? planOf(*program, args) : makePlan(args, call.algorithm);
  };

  SimCall named = call;  // what the engine's messages call it
  if (program) named.algorithm = program->name;
  SimResult result;
  result.algorithm = named.algorithm;
  result.ranks = n;
  // Checks the algorithm's name, for every call.
  Plan first = planFor(0);
  if (count == 0 || n == 1) {
    // Nothing moves between ranks: a local copy at most.
    result.simulatedRanks = 1;
    if (!first.lanes.empty())
      result.us = c.messageUs + static_cast<double>(first.lanes[0][0].count() * call.elemSize) / (c.copyGBps * 1e3);
    result.wallMs = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    return result;
  }

  // The symmetry period: whole hosts (whole leaves when the fabric has several), doubled until the plans shift by
  // it; n (no symmetry) if none does. Each candidate's engine takes the plans as they are checked.
  std::unique_ptr<SimEngine> engine;
  int period = n;
  if (call.symmetry && uniform) {
    // On one host every rank is alike (a port each way, or a link per pair); across hosts, whole hosts shift
    // onto each other, and whole leaves when there are several.
    // (Not with shared memory: the host's memory serves all its ranks, so one rank stands for none of them.)
    const bool hostShared = c.intra == SimCluster::Intra::kShm && c.memoryGBps > 0;
    int base = nhosts == 1 && !hostShared ? 1 : c.ranksPerHost;
    if (c.hostsPerLeaf > 0 && nhosts > c.hostsPerLeaf) base *= c.hostsPerLeaf;
    for (int s = base; s < n && n % s == 0 && !engine; s *= 2) {
      auto candidate = std::make_unique<SimEngine>(c, named, n, hostOf, s);
      bool ok = shiftsBy(first, planFor(n - s), n - s, n);
      for (int r = 0; r < s && ok; ++r) {
        Plan p = r == 0 ? first : planFor(r);
        ok = shiftsBy(p, planFor(r + s), s, n);
        if (ok) candidate->addPlan(p);
      }
      if (ok) {
        engine = std::move(candidate);
        period = s;
      }
    }
  }
  if (!engine) {
    // Without symmetry every rank's plan is built and run (a tree's plans cost O(n) each): beyond this the
    // simulation would take hours, so it is refused rather than left to look hung.
    if (n > kMaxFullRanks)
      throw InvalidArgument(
          strprintf("strata-sim: %s on %d ranks has no symmetry to use (its plans do not shift "
                    "with the hosts), and simulating every rank is limited to %d ranks",
                    result.algorithm.c_str(), n, kMaxFullRanks));
    engine = std::make_unique<SimEngine>(c, named, n, hostOf, n);
    for (int r = 0; r < n; ++r) engine->addPlan(r == 0 ? first : planFor(r));
  }
  const SimResult r = engine->run();
  result.us = r.us;
  result.laneUs = r.laneUs;
  result.pieces = r.pieces;
  result.events = r.events;
  result.simulatedRanks = period;
  result.wallMs = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return result;
}

SimResult simulatePlans(const SimCluster& cluster, const std::vector<Plan>& plans, size_t elemSize,
                        const std::vector<int>& hostOf) {
  const auto start = std::chrono::steady_clock::now();
  const int n = static_cast<int>(plans.size());
  if (n < 1) throw InvalidArgument("strata-sim: no plans");
  SimCall call;
  call.elemSize = elemSize;
  call.algorithm = plans[0].algorithm;
  call.hostOf = hostOf.empty() ? std::vector<int>(static_cast<size_t>(n), 0) : hostOf;
  if (static_cast<int>(call.hostOf.size()) != n)
    throw InvalidArgument(strprintf("strata-sim: hostOf names %zu ranks for %d plans", call.hostOf.size(), n));
  for (int r = 0; r < n; ++r) {
    if (plans[static_cast<size_t>(r)].rank != r || plans[static_cast<size_t>(r)].nranks != n)
      throw InvalidArgument(strprintf("strata-sim: plan %d is rank %d's of %d", r, plans[static_cast<size_t>(r)].rank,
                                      plans[static_cast<size_t>(r)].nranks));
    validatePlan(plans[static_cast<size_t>(r)]);
  }
  SimEngine engine(cluster, call, n, call.hostOf, n);
  for (const Plan& p : plans) engine.addPlan(p);
  SimResult result = engine.run();
  result.algorithm = call.algorithm;
  result.ranks = result.simulatedRanks = n;
  result.wallMs = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return result;
}

std::vector<SimResult> simulateAll(const SimCluster& cluster, const SimCall& call) {
  std::vector<SimResult> out;
  std::vector<int> hostOf = call.hostOf;
  if (hostOf.empty()) {
    const int hosts = call.hosts > 0 ? call.hosts : cluster.hosts;
    const int perHost = call.ranksPerHost > 0 ? call.ranksPerHost : cluster.ranksPerHost;
    for (int h = 0; h < hosts; ++h) hostOf.insert(hostOf.end(), static_cast<size_t>(std::max(0, perHost)), h);
  }
  const HostLayout layout(static_cast<int>(hostOf.size()), hostOf, "strata-sim");
  for (const AlgorithmRecord* algorithm : algorithmRecords(call.kind)) {
    if (!algorithm->applies(layout, call.bytes)) continue;
    SimCall one = call;
    one.algorithm = algorithm->name;
    out.push_back(simulate(cluster, one));
  }
  std::stable_sort(out.begin(), out.end(), [](const SimResult& a, const SimResult& b) { return a.us < b.us; });
  return out;
}

}  // namespace strata
