// CommImpl: one rank's membership in a group of ranks, its connections, and the executor that runs
// plans over them. Calls are executed in issue order, either inline on the caller's thread (blocking
// calls with nothing queued: lowest latency) or on the communicator's worker thread (async work).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap/bootstrap.h"
#include "collectives/algorithms.h"
#include "collectives/selector.h"
#include "core/device_engine.h"
#include "core/plan_runner.h"
#include "strata/strata.h"
#include "transport/transport.h"
#include "util/config.h"
#include "util/error.h"

namespace strata {

/// One validated user call.
struct CollCall {
  CollKind kind = CollKind::kAllReduce;
  const void* sendbuff = nullptr;
  void* recvbuff = nullptr;
  size_t count = 0;
  strataDataType_t dtype = strataFloat32;
  strataRedOp_t op = strataSum;
  int root = 0;
  int peer = -1;
  /// Device buffers (a CUDA stream was passed, or a buffer is device memory): run by the DeviceEngine on
  /// `stream` (nullptr: the legacy default stream).
  bool device = false;
  void* stream = nullptr;
};

/// What an executing operation is, for error messages. Formatted only when something goes wrong, so the
/// small-message fast path does no string work.
struct OpLabel {
  int rank = 0;
  const char* name = "";
  uint64_t seq = 0;
  size_t count = 0;
  strataDataType_t dtype = strataFloat32;
  const char* algorithm = "";
  size_t nops = 0;  // send/recv groups: number of calls
  std::string str() const;
};

/// Completion of a batch of calls on one communicator.
class Task {
 public:
  void complete(strataResult_t result, std::string error);
  /// Waits until done or timeoutMs passes (< 0: forever). Returns false on timeout.
  bool wait(int64_t timeoutMs);
  bool done() const { return done_.load(std::memory_order_acquire); }
  strataResult_t result() const { return result_; }
  const std::string& error() const { return error_; }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::atomic<bool> done_{false};
  strataResult_t result_ = strataSuccess;
  std::string error_;
};

// Not named Communicator: that is the public C++ wrapper (include/strata/strata.hpp), whose inline members
// are compiled into libstrata too (the overlap scheduler uses it). Two classes with one name break the
// one-definition rule: the linker keeps one `Communicator::rank()`, and unoptimised builds called the
// wrapper's on this class.
class CommImpl : public std::enable_shared_from_this<CommImpl> {
 public:
  /// Collective over the bootstrap's ranks: exchanges host identities.
  static std::shared_ptr<CommImpl> create(const Config& config, std::shared_ptr<Bootstrap> bootstrap);
  ~CommImpl();

  int rank() const { return rank_; }
  int size() const { return nranks_; }
  const Config& config() const { return config_; }

  /// Throws InvalidArgument/InvalidUsage describing what is wrong with the call.
  void validate(const CollCall& call) const;
  /// Runs the calls (one group) and returns when their results are in place.
  void run(std::span<const CollCall> calls);
  /// Queues the calls behind earlier work and returns at once. `before` runs on the worker just before the
  /// calls (it may throw: the calls then fail), `after` always runs once they finished or failed, or when
  /// the work is dropped by abort (device work uses these to wait for its inputs and release its stream).
  std::shared_ptr<Task> submit(std::vector<CollCall> calls, std::function<void()> before = {},
                               std::function<void(strataResult_t)> after = {});
  /// Enqueues device-buffer calls (one group, one stream) on the GPU and returns without waiting for them.
  /// Throws CudaError when CUDA cannot be used, naming the cause.
  void runDevice(std::span<const CollCall> calls);
  /// Elements of sendbuff and recvbuff a call touches on this rank.
  void bufferElems(const CollCall& call, size_t* sendElems, size_t* recvElems) const;
  /// Every rank of this communicator runs on one host.
  bool oneHost() const { return oneHost_; }
  /// strataCommAbort was called: waits in teardown must not run to the deadline.
  bool aborted() const { return aborted_.load(); }
  /// The device engine, if a device call has created it (tests and tools).
  DeviceEngine* deviceEngine() { return device_.get(); }

  std::shared_ptr<CommImpl> split(int color, int key);
  /// Waits for queued work, flushes connections and releases everything. Idempotent.
  void destroy();
  /// Stops without waiting for peers; queued work fails.
  void abort();

  /// First error seen by asynchronous work or reported by a peer; strataSuccess if none.
  strataResult_t asyncError() const;
  std::string asyncErrorMessage() const;

  strataRedOp_t createPreMulSum(double scalar, strataDataType_t dtype);
  void destroyRedOp(strataRedOp_t op);

  /// Host identity of every rank (index: rank).
  const std::vector<std::string>& hostIds() const { return hostIds_; }
  /// The algorithm the selector would use (or STRATA_ALGO forces) for this call, with the cost model's
  /// predicted time (0 where the model has none).
  Prediction chooseAlgorithm(const CollCall& call) const;
  /// nccl-tests' "size" of the call: the all-reduce buffer, reduce-scatter input, all-gather output.
  size_t callBytes(const CollCall& call) const;
  const Topology& topology() const { return topology_; }

 private:
  CommImpl(const Config& config, std::shared_ptr<Bootstrap> bootstrap);
  void runLocked(std::span<const CollCall> calls);
  void executeCollective(const CollCall& call);
  void executeP2P(const std::vector<CollCall>& calls);
  void executePlan(const Plan& plan, const std::vector<int>& peers, std::span<void*> buffers,
                   strataDataType_t dtype, ReduceKind op, const OpLabel& what);
  void ensureConnections(const std::vector<int>& peers);
  void drive(Waitable& runner, const OpLabel& what, const char* phase = nullptr);
  /// Message for a transport error, naming the rank that failed first when the control plane knows it.
  std::string explainRemote(const std::string& what, const Error& e);
  void fail(const Error& e);
  void checkUsable() const;
  void workerLoop();
  size_t chunkElems(strataDataType_t dtype) const;
  size_t chunkBytes() const;
  void probeLinks();
  /// Blocks briefly on the sockets of a stalled wait; false if some link it waits on has none (shm).
  bool pollStalled(Waitable& runner);
  std::vector<pollfd> pollFds_;

  Config config_;
  std::shared_ptr<Bootstrap> bootstrap_;
  int rank_ = 0;
  int nranks_ = 1;
  std::vector<std::string> hostIds_;
  std::vector<int> hostIndex_;  // host of each rank, 0..H-1 in order of each host's lowest rank
  Topology topology_;           // identical on every rank
  std::unique_ptr<Selector> selector_;  // set by create(), once the topology is known
  std::vector<std::unique_ptr<Connection>> conns_;  // index: peer
  struct PlanKey {
    int kind, root, peer, inPlace;
    size_t count, chunkElems;
    int elemSize;
    auto operator<=>(const PlanKey&) const = default;
  };
  struct CachedPlan {
    Plan plan;
    std::vector<int> peers;  // every peer the plan talks to, ascending
  };
  std::map<PlanKey, std::unique_ptr<CachedPlan>> planCache_;
  CachedPlan* lastPlan_ = nullptr;  // the last plan used (owned by planCache_, which is cleared only on a miss)
  PlanKey lastPlanKey_{};
  std::vector<char> scratch_;    // grown to the largest scratch a plan has asked for
  std::vector<char> preScaled_;  // pre-multiplied inputs (Avg on floats, PreMulSum)
  bool oneHost_ = true;
  bool oversubscribed_ = false;  // more ranks on this host than CPUs this process may use
  uint64_t seq_ = 0;  // collective sequence number, for error messages

  struct PreMulSum {
    double scalar = 1.0;
    bool live = false;
  };
  std::vector<PreMulSum> preMulSums_;
  mutable std::mutex redOpMutex_;

  // Failure state: set by a failed operation or by the bootstrap when a peer fails.
  std::atomic<bool> failed_{false};
  mutable std::mutex failMutex_;
  strataResult_t failCode_ = strataSuccess;
  std::string failMessage_;
  std::atomic<bool> aborted_{false};
  bool destroyed_ = false;

  // Work queue: one executor at a time (inline caller or worker), in submission order.
  std::mutex queueMutex_;
  std::condition_variable queueCv_;
  struct QueueItem {
    std::vector<CollCall> calls;
    std::shared_ptr<Task> task;
    std::function<void()> before;
    std::function<void(strataResult_t)> after;
  };
  std::deque<QueueItem> queue_;
  bool busy_ = false;
  int queueWaiters_ = 0;  // threads inside waitQueue(); under queueMutex_
  /// queueCv_.wait, counted in queueWaiters_ so that a release with nobody waiting skips the notify.
  template <typename Pred>
  void waitQueue(std::unique_lock<std::mutex>& lk, Pred pred) {
    ++queueWaiters_;
    queueCv_.wait(lk, pred);
    --queueWaiters_;
  }
  bool stopWorker_ = false;
  std::thread worker_;

  std::mutex deviceMutex_;
  std::unique_ptr<DeviceEngine> device_;  // created by the first device call
};

/// Reduction operator that `op` maps to for `dtype` on a communicator of `nranks` ranks:
/// the element-wise kernel, the factor to pre-multiply inputs by (1 = none) and the integer to divide
/// results by (1 = none).
struct EffectiveOp {
  ReduceKind kind = ReduceKind::kSum;
  double preMul = 1.0;
  uint64_t postDiv = 1;
};

}  // namespace strata
