// What the device engine needs from the host side of its communicator, and nothing more: the communicator's
// shape and settings, blocking host exchanges for its set-up and teardown, a queue for the host half of staged
// collectives, and the failure state. The engine depends on this interface, not on CommImpl, so the two do not
// include each other (CommImpl implements it).
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/call.h"
#include "core/failure.h"
#include "core/red_ops.h"
#include "core/work_queue.h"

namespace strata {

struct Config;
class Selector;

class HostSide {
 public:
  virtual ~HostSide() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// Every rank of the communicator runs on one host.
  virtual bool oneHost() const = 0;
  /// The lowest rank on `rank`'s host (host identity, STRATA_HOSTID): equal for ranks that share a host.
  virtual int hostLeader(int rank) const = 0;
  virtual const Config& config() const = 0;
  /// The most channels a device executor call takes: STRATA_GPU_CHANNELS, or with 0 the topology's
  /// (deviceChannelCap, collectives/cost_model.h). The same on every rank.
  virtual int gpuChannelCap() const = 0;
  /// Whether the device executor uses LL128: STRATA_GPU_LL128, or with auto the topology's (allGpusOnNvlink). The
  /// same on every rank.
  virtual bool gpuLL128() const = 0;
  /// The communicator's selector: its forced algorithms and loaded plan programs (STRATA_PLANS).
  virtual const Selector& selector() const = 0;
  virtual const FailureState& failure() const = 0;
  /// The kernel, pre-multiplication and post-division of a reducing call's op (valid) for `dtype` on this
  /// communicator (Avg over its size, its PreMulSum scalars).
  virtual EffectiveOp effectiveOp(strataRedOp_t op, strataDataType_t dtype) const = 0;
  /// Makes the communicator failed with this error (its asynchronous error), as a failed host call does, and
  /// tells the other ranks; from any thread.
  virtual void recordFailure(strataResult_t code, const std::string& message) = 0;

  /// Blocking host barrier over the communicator, in issue order with its queued work.
  virtual void barrier() = 0;
  /// Blocking host all-gather of `bytes` from every rank into `all` (rank order), in issue order.
  virtual void allGather(const void* mine, void* all, size_t bytes) = 0;
  /// Queues host calls behind earlier work (see WorkQueue::submit for `before` and `after`).
  virtual std::shared_ptr<Task> submit(std::vector<CollCall> calls, std::function<void()> before,
                                       std::function<void(strataResult_t)> after) = 0;

  // Sub-communicators, for a device call that runs in phases over some of the ranks (the hierarchical all-reduce).
  /// Collective over this communicator: a communicator of the ranks passing the same `color`, ordered by `key` (as
  /// strataCommSplit). A failure of the child becomes this communicator's failure too.
  virtual std::shared_ptr<HostSide> subgroup(int color, int key) = 0;
  /// A PreMulSum op of this communicator (strataRedOpCreatePreMulSum; local, not collective), and its destruction.
  virtual strataRedOp_t createPreMulSum(double scalar, int64_t intScalar) = 0;
  virtual void destroyRedOp(strataRedOp_t op) = 0;
  /// Enqueues validated device-buffer calls (one group, one stream) on this communicator's own device engine.
  virtual void runDevice(std::span<const CollCall> calls) = 0;
  /// Collective teardown (after its device work finished), or teardown without waiting for peers.
  virtual void destroy() = 0;
  virtual void abort() = 0;
};

/// The device engine as its communicator sees it (src/engine/, which implements it over a HostSide). The engine's
/// layer is above core, so core makes it through the factory the layer above both installs (the C API, before its
/// first communicator: setDeviceSideFactory); core itself never names the engine.
class DeviceSide {
 public:
  virtual ~DeviceSide() = default;
  /// Enqueues one group of calls (all on one stream) and returns. Errors in the arguments or in CUDA calls throw;
  /// errors of the collective itself become the communicator's asynchronous error.
  virtual void enqueue(std::span<const CollCall> calls, void* stream) = 0;
  /// The communicator's destroy, while it still works: waits until the GPU has finished with the engine's memory
  /// (collective where peers map it).
  virtual void quiesce() = 0;
  /// The communicator's abort and revoke, from any thread: aborts the sub-communicators of hierarchical calls.
  virtual void abortSubgroups() = 0;
};

/// Makes the device engine of a communicator (its first device call).
using DeviceSideFactory = std::unique_ptr<DeviceSide> (*)(HostSide& host);
/// Installs the factory every communicator of the process uses (the last installed; thread-safe).
void setDeviceSideFactory(DeviceSideFactory factory);

}  // namespace strata
