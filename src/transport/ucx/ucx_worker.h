// The UCP context and worker behind the UCX transport: one of each per process, shared by every UCX
// connection of every communicator, created on first use and destroyed with the last connection.
//
// Why one worker for the whole process, not one per communicator: UCX completes some operations only when
// the peer's worker runs (a rendezvous send finishes when the receiver acknowledges it; closing an endpoint
// may wait for the peer). With one worker per communicator, a rank that moved on to another communicator's
// collective would stop answering for the first one, and a peer waiting there would wait until the
// deadline. With one worker, any Strata call in a process moves all of its UCX traffic.
//
// Communicators run on different threads at once, so every call into the worker (and every connection's
// state that its progress touches) is serialized by the worker's mutex; UCX itself runs in its
// serialized thread mode.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "transport/ucx/ucx_api.h"

namespace strata::ucx {

class Context;

/// What an endpoint's error callback writes, and the buffers UCX may still read while the endpoint closes.
/// Allocated per endpoint; it lives until the endpoint's close completed, which can be after its connection
/// is gone (see Worker::retire).
struct EndpointState {
  bool failed = false;
  ucs_status_t status = UCS_OK;
  int me = -1, peer = -1;
  uint64_t goodbye = 0;    // payload of the goodbye message
  uint8_t hello[64] = {};  // payload of the hello message
};

class Worker {
 public:
  /// The process's worker, created on first use. Thread-safe.
  static std::shared_ptr<Worker> acquire();

  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;
  ~Worker();

  /// Held around every call into UCX and every read of state that progress() may change.
  std::mutex& mutex() { return mu_; }
  ucp_worker_h handle() const { return worker_; }
  /// The packed worker address that peers create their endpoints from.
  const std::vector<uint8_t>& address() const { return address_; }

  /// One ucp_worker_progress (caller holds mutex()); also finishes endpoints being closed. Returns how many
  /// events UCX processed.
  unsigned progress();
  /// Progresses until nothing more happens (at most `rounds` calls): a peer's last messages may still sit
  /// in a FIFO or socket that one call only partly drains. Caller holds mutex().
  void drain(int rounds = 1000);
  /// Takes over an endpoint whose close request (from ucp_ep_close_nbx) is still in flight, with its state:
  /// both are released when the close completes, so a connection never waits for a peer to close.
  /// Caller holds mutex().
  void retire(void* closeRequest, std::unique_ptr<EndpointState> state);
  /// Takes over an endpoint that cannot close yet because `requests` on it are unfinished (UCX 1.13 aborts when an
  /// endpoint is closed under them): it is force-closed, and the requests freed, once they have all finished.
  /// Caller holds mutex().
  void deferClose(ucp_ep_h ep, std::vector<void*> requests, std::unique_ptr<EndpointState> state);
  /// Records that a request was abandoned unfinished (a receive from a dead peer that UCX could not cancel).
  /// UCX aborts when a worker is destroyed under unfinished requests, so such a worker is left alive at the
  /// end (leaked) instead. Caller holds mutex().
  void abandonRequest() { abandoned_ = true; }

 private:
  Worker(std::shared_ptr<Context> context, ucp_worker_h worker, std::vector<uint8_t> address);
  void reap();

  const Api& api_;
  std::mutex mu_;
  std::shared_ptr<Context> context_;
  ucp_worker_h worker_;
  std::vector<uint8_t> address_;
  std::vector<std::pair<void*, std::unique_ptr<EndpointState>>> closing_;
  struct DeferredClose {
    ucp_ep_h ep;
    std::vector<void*> requests;
    std::unique_ptr<EndpointState> state;
  };
  std::vector<DeferredClose> deferred_;
  bool abandoned_ = false;
};

}  // namespace strata::ucx
