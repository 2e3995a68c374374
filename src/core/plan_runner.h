// PlanRunner: the non-blocking state machine that executes one rank's Plan over Connections.
// The real executor drives it with waits and deadlines; the reference interpreter drives every rank's
// runner round-robin over in-memory connections in one thread. One implementation, tested both ways.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "collectives/plan.h"
#include "collectives/send_refs.h"
#include "kernels/reduce.h"
#include "transport/transport.h"

namespace strata {

/// Something the executor waits on: polled until done, with a description for timeout messages.
class Waitable {
 public:
  virtual ~Waitable() = default;
  /// Advances without blocking; true if anything moved.
  virtual bool progress() = 0;
  virtual bool done() const = 0;
  virtual std::string describeStall() const = 0;
  /// Peers whose liveness to check while stalled.
  virtual std::vector<int> stalledPeers() const = 0;
};

/// The stamps (transport.h) of a plan's calls, one per call of a group (call k owns buffers k x kBuffersPerColl
/// onwards): what this rank's messages of call k carry, and what it expects on the messages it receives for call
/// k. Empty spans stand for one all-zero stamp (the interpreter, tests of plans alone).
struct PlanStamps {
  std::span<const MsgStamp> send;
  std::span<const MsgStamp> expect;
};

class PlanRunner : public Waitable {
 public:
  /// `buffers[i]` is the base of plan buffer i (nullptr allowed where the plan never touches it); the list,
  /// like the plan, must outlive the runner;
  /// `connFor(peer, channel)` returns the connection to that peer on that channel (Op::channel; called lazily, at most
  /// once per pair); `stamps`, like the plan, must outlive the runner.
  PlanRunner(const Plan& plan, std::span<void* const> buffers, strataDataType_t dtype, ReduceKind op, size_t pieceBytes,
             std::function<Connection*(int, int)> connFor, PlanStamps stamps = {});
  PlanRunner(const PlanRunner&) = delete;  // lanes_/conns_ may point into the runner itself
  /// Runs the same plan again from its start, on `buffers` (same rules as the constructor's) with `dtype` of the
  /// same size, `op` and `stamps`: a cached plan keeps its runner, so a repeated small call constructs nothing.
  /// Connections are looked up again through connFor.
  void rearm(std::span<void* const> buffers, strataDataType_t dtype, ReduceKind op, PlanStamps stamps);
  PlanRunner& operator=(const PlanRunner&) = delete;

  /// Lets the ops `refs` allows send pieces of at least `minBytes` as references to this rank's memory, where
  /// their connection can (Connection::refMinBytes). `refs`, like the plan it analysed, must outlive the runner.
  void allowSendRefs(const SendRefs* refs, size_t minBytes) {
    refs_ = refs && !refs->empty() ? refs : nullptr;
    refMinBytes_ = std::max<size_t>(minBytes, 1);
  }

  /// Advances every lane as far as it can without waiting. Returns true if anything moved.
  /// Throws on transport errors and on size mismatches with a peer.
  bool progress() override;
  bool done() const override { return lanesLeft_ == 0; }
  /// Human-readable position of each unfinished lane (for timeout messages): op index, kind, peers.
  std::string describeStall() const override;
  /// Peers that unfinished lanes are waiting on right now.
  std::vector<int> stalledPeers() const override;
  /// The op lane `lane` is at (its op count once it is done), and whether it waits for a cross-lane dependency.
  size_t laneOp(size_t lane) const { return lanes_[lane].op; }
  bool laneWaitsForLane(size_t lane) const {
    const size_t at = lanes_[lane].op;
    return at < plan_.lanes[lane].size() && lanes_[lane].piece == 0 && !dependencyMet(plan_.lanes[lane][at]);
  }

 private:
  struct LaneState {
    size_t op = 0;     // index of the current op
    size_t piece = 0;  // elements of the current op already done
  };
  bool advanceLane(size_t lane);
  /// True if `op` has no cross-lane dependency or the lane it names has completed enough ops. A dependency on a
  /// lane the plan lacks is never met (validatePlan refuses such plans; the interpreter reports the stall).
  bool dependencyMet(const Op& op) const {
    return op.afterLane < 0 ||
           (static_cast<size_t>(op.afterLane) < nLanes_ && lanes_[static_cast<size_t>(op.afterLane)].op >= op.afterOps);
  }
  /// Runs one piece of `op` starting at element `at`; returns false if it must wait.
  bool runPiece(const Op& op, size_t at, size_t n);
  char* addr(const Region& r, size_t at) const;
  /// The stamp of the call `op` belongs to, from `stamps` (send or expect).
  static const MsgStamp& stampOf(std::span<const MsgStamp> stamps, const Op& op);
  Connection* conn(int peer, int channel);
  /// Whether this piece of `op` goes to `c` as a reference (checked cheapest first).
  bool sendsRef(const Op& op, size_t bytes, Connection* c) const {
    if (!refs_ || bytes < refMinBytes_ || !refs_->allows(&op)) return false;
    const size_t min = c->refMinBytes();
    return min != 0 && bytes >= min;
  }

  const Plan& plan_;
  std::span<void* const> buffers_;
  strataDataType_t dtype_;
  size_t elemSize_;
  ReduceKind op_;
  size_t pieceElems_;
  std::function<Connection*(int, int)> connFor_;
  PlanStamps stamps_;
  const SendRefs* refs_ = nullptr;  // sends that may go as references (null: none)
  size_t refMinBytes_ = SIZE_MAX;
  // Per-(peer, channel) connection cache (index: channel x nranks + peer) and per-lane state. Small plans (every
  // small-message call) keep them inline: a small all-reduce costs a few hundred nanoseconds in all, and two heap
  // allocations are a visible part.
  static constexpr size_t kInlinePeers = 16, kInlineLanes = 8;
  std::array<Connection*, kInlinePeers> connInline_;  // the first nConns_ are set in the constructor
  std::vector<Connection*> connHeap_;
  Connection** conns_;
  size_t nConns_;
  size_t nranks_;
  std::array<LaneState, kInlineLanes> laneInline_;  // LaneState initialises itself
  std::vector<LaneState> laneHeap_;
  LaneState* lanes_;
  size_t nLanes_;
  size_t lanesLeft_;
};

}  // namespace strata
