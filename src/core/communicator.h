// CommImpl: one rank's membership in a group of ranks. It owns the parts a collective passes through, in the
// order a call meets them (DESIGN.md, "One host all-reduce, hop by hop"):
//   validate.h      the call's arguments, checked once where it enters
//   work_queue.h    issue order: inline on the caller's thread, or on the worker thread
//   collective_exec.h  plans (selector.h chooses the algorithm), reduction ops (red_ops.h), buffers
//   connections.h   one transport connection per peer, made when a plan first needs it
//   progress.h      the wait loop: backoff, liveness, deadlines, failure
//   plan_runner.h   the plan's ops over the connections (the transports, then the kernels)
// and, for device buffers, the device engine (src/engine/, made through the DeviceSide factory of host_side.h), which
// sees it only as a HostSide.
// This file is creation, split, destroy and abort.
#pragma once

#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "bootstrap/bootstrap.h"
#include "collectives/selector.h"
#include "core/call.h"
#include "core/call_gate.h"
#include "core/collective_exec.h"
#include "core/connections.h"
#include "core/failure.h"
#include "core/flight_recorder.h"
#include "core/host_side.h"
#include "core/progress.h"
#include "core/red_ops.h"
#include "core/validate.h"
#include "core/work_queue.h"
#include "topology/topology.h"
#include "util/config.h"

namespace strata {

// Not named Communicator: that is the public C++ wrapper (include/strata/strata.hpp), whose inline members
// are compiled into libstrata too (the overlap scheduler uses it). Two classes with one name break the
// one-definition rule: the linker keeps one `Communicator::rank()`, and unoptimised builds called the
// wrapper's on this class.
class CommImpl final : public HostSide, public std::enable_shared_from_this<CommImpl> {
 public:
  /// Collective over the bootstrap's ranks: exchanges host identities and the topology. `name`: strataConfig_t's
  /// commName ("" : none), shown in flight recorder dumps.
  static std::shared_ptr<CommImpl> create(const Config& config, std::shared_ptr<Bootstrap> bootstrap,
                                          std::string name = "");
  ~CommImpl() override;

  int rank() const override { return rank_; }
  int size() const override { return nranks_; }
  bool oneHost() const override { return oneHost_; }
  int gpuChannelCap() const override;
  bool gpuLL128() const override;
  const Selector& selector() const override { return *selector_; }
  int hostLeader(int rank) const override;
  EffectiveOp effectiveOp(strataRedOp_t op, strataDataType_t dtype) const override {
    return redOps_.effective(op, dtype, nranks_);
  }
  const Config& config() const override { return config_; }
  const FailureState& failure() const override { return failure_; }
  void recordFailure(strataResult_t code, const std::string& message) override { fail(Error(code, message)); }

  /// Throws InvalidArgument describing what is wrong with the call. Every call is validated once, before it
  /// is run, queued or enqueued on a stream; run, submit and runDevice trust their calls.
  void validate(const CollCall& call) const { validateCall(call, rank_, nranks_, redOps_); }
  /// Runs validated host calls (one group) and returns when their results are in place.
  void run(std::span<const CollCall> calls);
  /// Queues validated host calls behind earlier work and returns at once (see WorkQueue::submit).
  std::shared_ptr<Task> submit(std::vector<CollCall> calls, std::function<void()> before = {},
                               std::function<void(strataResult_t)> after = {}) override;
  /// Enqueues validated device-buffer calls (one group, one stream) on the GPU and returns without waiting for
  /// them. Throws CudaError when CUDA cannot be used, naming the cause.
  void runDevice(std::span<const CollCall> calls) override;
  void barrier() override;
  void allGather(const void* mine, void* all, size_t bytes) override;

  /// strataCommSplit. The child runs with `config` and `name` (strataConfig_t), or this communicator's when null.
  std::shared_ptr<CommImpl> split(int color, int key, const Config* config = nullptr,
                                  const std::string* name = nullptr);
  std::shared_ptr<HostSide> subgroup(int color, int key) override;
  /// strataCommShrink: every rank but `excluded`, one shrink epoch later (Bootstrap::shrink), once this
  /// communicator's work has ended; works after a failure. `revokeFirst`: STRATA_SHRINK_ABORT.
  /// `config`, `name`: as split's.
  std::shared_ptr<CommImpl> shrink(const std::vector<int>& excluded, bool revokeFirst, const Config* config = nullptr,
                                   const std::string* name = nullptr);
  /// strataConfig_t's commName ("" : none).
  const std::string& name() const { return name_; }
  /// strataCommRevoke: fails this communicator here and in its other ranks (not the job), wakes and drops its
  /// work, and returns once no call is running in it. Does not free anything.
  void revoke();
  /// Waits for queued work and for calls of other threads, flushes connections and releases everything.
  /// Idempotent.
  void destroy() override;
  /// Stops without waiting for peers, from any thread: queued work fails, every call blocked in this
  /// communicator (on any thread) returns an error naming the abort, and what they use is freed once they left.
  void abort() override;

  /// Writes the flight recorder (flight_recorder.h) to `dir`/strata-flight-<comm id>-rank<rank>.json, replacing
  /// an earlier dump of this communicator; returns the path. Throws SysError if it cannot be written.
  std::string dumpFlightRecorder(const std::string& dir, const std::string& reason) const;
  /// dumpFlightRecorder into STRATA_FLIGHT_RECORDER_DIR, if set; never throws (a failed dump is logged).
  void autoDump(const std::string& reason) const noexcept;

  /// First error seen by asynchronous work or reported by a peer; strataSuccess if none.
  strataResult_t asyncError() const { return failure_.code(); }

  strataRedOp_t createPreMulSum(double scalar, int64_t intScalar) override {
    return redOps_.createPreMulSum(scalar, intScalar);
  }
  void destroyRedOp(strataRedOp_t op) override { redOps_.destroy(op); }

  /// The algorithm the selector would use (or STRATA_ALGO forces) for this call, with the cost model's
  /// predicted time (0 where the model has none).
  Prediction chooseAlgorithm(const CollCall& call) const {
    return selector_->choose(call.kind, callBytes(call, nranks_));
  }

 private:
  CommImpl(const Config& config, std::shared_ptr<Bootstrap> bootstrap);
  /// The work queue's executor: runs one group, and makes any error but a bad argument the communicator's.
  void execute(std::span<const CollCall> calls);
  void fail(const Error& e);
  /// Records calls refused on entry because the communicator had failed (FlightRecorder::refuse); the first one
  /// rewrites the dump.
  void noteRefused(std::span<const CollCall> calls);
  [[noreturn]] void throwGone() const;
  void probeLinks();
  size_t chunkBytes() const;

  Config config_;
  std::string name_;
  std::shared_ptr<Bootstrap> bootstrap_;
  int rank_ = 0;
  int nranks_ = 1;
  std::vector<std::string> hostIds_;  // host identity of every rank
  std::vector<int> hostLeader_;       // the lowest rank sharing each rank's host identity
  Topology topology_;                 // identical on every rank
  bool oneHost_ = true;
  FailureState failure_;
  RedOpTable redOps_;
  // Set by create() once the topology is known.
  std::unique_ptr<Selector> selector_;
  std::unique_ptr<ConnectionTable> conns_;
  std::unique_ptr<WaitBoard> waitBoard_;  // before progress_, which uses it
  std::unique_ptr<FlightRecorder> recorder_;
  std::atomic<uint64_t> refusedColls_{0}, refusedGroups_{0};  // refused calls so far: their numbers follow
  uint64_t commId_ = 0;
  std::unique_ptr<Progress> progress_;
  std::unique_ptr<CollectiveExecutor> exec_;
  WorkQueue queue_;
  CallGate gate_;  // calls in run/submit/runDevice/split; destroy and abort wait for them to leave

  std::mutex deviceMutex_;
  std::unique_ptr<DeviceSide> device_;  // created by the first device call
};

}  // namespace strata
