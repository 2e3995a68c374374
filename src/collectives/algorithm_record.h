// An algorithm is one record: everything the rest of Strata asks about it (its plans, its cost shape, where it
// applies, whether the device executor may cut it into channels, NCCL's name for it, what it is), declared in its
// family file next to its generator. The table of every record is algorithms.h; nothing outside the table compares
// an algorithm's name with a literal.
#pragma once

#include <cstddef>

#include "collectives/coll_args.h"
#include "collectives/cost_shape.h"
#include "collectives/host_layout.h"
#include "collectives/plan.h"

namespace strata {

struct AlgorithmRecord {
  CollKind kind = CollKind::kAllReduce;
  /// As STRATA_ALGO, strataCommExplain, Plan::algorithm and the tools spell it; unique within `kind`.
  const char* name = "";
  /// The plan of one rank. Called by makePlan with validated arguments, count > 0 and nranks > 1 (a barrier's for
  /// any count and nranks).
  Plan (*generate)(const CollArgs& args) = nullptr;
  /// The phases the cost model prices (cost_shape.h).
  CostShape costShape = nullptr;
  /// Whether the algorithm makes sense for `layout` and a call of `bytes` (its full buffer). Where it does not,
  /// the selector and the simulator leave it out; forced, it still runs (its plans are correct on any layout).
  bool (*applies)(const HostLayout& layout, size_t bytes) = nullptr;
  /// What `applies` asks for, for messages ("ranks on two hosts or more"); "" when it applies everywhere.
  const char* requirement = "";
  /// The device executor may cut its plans into channels (every op's region split in equal parts, each channel
  /// a thread block): no op reads part of what another op of the plan wrote (dev_plan.h, channelsFor).
  bool deviceCapable = false;
  /// NCCL_ALGO's name for the same algorithm ("Ring", "Tree"), or nullptr: the drop-in translates NCCL_ALGO by it.
  const char* ncclName = nullptr;
  /// One line for `strata-topo --algorithms`.
  const char* description = "";
};

/// `applies` of the algorithms that run anywhere.
inline bool appliesEverywhere(const HostLayout&, size_t) { return true; }
/// `applies` of the hierarchical algorithms: their inter-host phase needs two hosts or more.
inline bool appliesAcrossHosts(const HostLayout& layout, size_t) { return layout.nhosts() > 1; }
inline constexpr const char* kAcrossHostsRequirement = "ranks on two hosts or more";

}  // namespace strata
