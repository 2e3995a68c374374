// The host executor of a communicator: turns validated calls into plans (built once per call shape, cached) and
// runs them over the connection table. Everything a call needs between "it is this rank's turn" (work_queue.h)
// and "bytes move" (plan_runner.h, the transports) happens here: the reduction op's pre-scaling and division,
// the in-place rule, the plan cache, the scratch and staging buffers, and the flush after the plan.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "collectives/plan.h"
#include "collectives/selector.h"
#include "collectives/send_refs.h"
#include "core/call.h"
#include "core/connections.h"
#include "core/flight_recorder.h"
#include "core/progress.h"
#include "core/red_ops.h"

namespace strata {

/// Records an operation in the flight recorder for its lifetime: completed if done() was called, else failed.
class FlightScope {
 public:
  FlightScope(FlightRecorder& r, uint64_t id) : r_(r), id_(id) {}
  ~FlightScope() { r_.finish(id_, ok_ ? FlightRecorder::State::kCompleted : FlightRecorder::State::kFailed); }
  void done() { ok_ = true; }
  FlightScope(const FlightScope&) = delete;
  FlightScope& operator=(const FlightScope&) = delete;

 private:
  FlightRecorder& r_;
  const uint64_t id_;
  bool ok_ = false;
};

class CollectiveExecutor {
 public:
  /// `hostOf`: host index of every rank (for hierarchical plans). `chunkBytes`: the pipeline chunk of plans.
  CollectiveExecutor(int rank, int nranks, std::vector<int> hostOf, size_t pieceBytes, size_t chunkBytes,
                     const Selector& selector, const RedOpTable& ops, ConnectionTable& conns, Progress& progress,
                     FlightRecorder& recorder);

  /// Runs one group of validated calls (one call for a blocking collective): each collective in turn, then
  /// every send and receive of the group as one plan.
  void execute(std::span<const CollCall> calls);

  /// Collectives and send/recv groups started so far (any thread may ask; the executing thread writes them).
  uint64_t collectivesStarted() const { return seq_.load(std::memory_order_relaxed); }
  uint64_t groupsStarted() const { return groups_.load(std::memory_order_relaxed); }

 private:
  void runCollective(const CollCall& call);
  void runP2P(std::span<const CollCall> calls);
  /// A receive from any source (alone in its group): waits for the first peer whose next send to this rank has
  /// arrived (AnySourceProbe), then receives it as a receive from that peer and stores the peer in call.source.
  void runRecvAny(const CollCall& call);
  /// Runs `plan` on `buffers`. `cachedRunner` (may be null): where a cached plan keeps its runner between calls.
  /// `refs` (may be null): the plan's sends that may go as references (shm single copy), kept with the plan.
  void runPlan(const Plan& plan, const std::vector<int>& peers, std::span<void*> buffers, strataDataType_t dtype,
               ReduceKind op, const OpLabel& what, PlanStamps stamps,
               std::unique_ptr<PlanRunner>* cachedRunner = nullptr, const SendRefs* refs = nullptr);
  size_t chunkElems(strataDataType_t dtype) const { return std::max<size_t>(1, chunkBytes_ / dtypeSize(dtype)); }

  const int rank_;
  const int nranks_;
  const std::vector<int> hostOf_;
  const size_t pieceBytes_;
  const size_t chunkBytes_;
  const Selector& selector_;
  const RedOpTable& ops_;
  ConnectionTable& conns_;
  Progress& progress_;
  FlightRecorder& recorder_;
  // Collectives executed so far: the number in every message's stamp (call.h, collStamp) and in error messages.
  // Written by the one executing thread only (load and store, no locked increment), read by others.
  std::atomic<uint64_t> seq_{0};
  std::atomic<uint64_t> groups_{0};  // send/recv groups executed so far, for error messages
  // Sends to and receives from each peer so far: the numbers in p2p stamps (call.h, p2pStamp).
  std::vector<uint32_t> sendsTo_, recvsFrom_;
  int lastAnySource_ = 0;  // the peer the last receive from any source took; the next one looks at the others first

  // Plans by call shape. The algorithm is a function of the key (the settings are fixed per communicator), so
  // the selector runs only when a plan is built.
  struct PlanKey {
    int kind, root, peer, inPlace;
    size_t count, chunkElems;
    int elemSize;
    auto operator<=>(const PlanKey&) const = default;
  };
  struct CachedPlan {
    Plan plan;
    std::vector<int> peers;              // every link the plan talks over, ascending (connections.h)
    std::unique_ptr<PlanRunner> runner;  // made at the plan's first run, rearmed by each later one
    SendRefs refs;                       // its sends that may go as references (shm single copy)
  };
  std::map<PlanKey, std::unique_ptr<CachedPlan>> planCache_;
  CachedPlan* lastPlan_ = nullptr;  // the last plan used (owned by planCache_, which is cleared only on a miss)
  PlanKey lastPlanKey_{};
  std::vector<char> scratch_;    // grown to the largest scratch a plan has asked for
  std::vector<char> preScaled_;  // pre-multiplied inputs (Avg on floats, PreMulSum)
};

}  // namespace strata
