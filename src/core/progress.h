// Driving a wait to completion: the executor's only blocking loop. It polls a Waitable (a plan, a flush) and,
// while nothing moves, backs off (spin, then yield or block on sockets, then sleep), checks that the peers it
// waits on are alive, notices the communicator's failure, and enforces the deadline. Every error it throws
// names the operation, and, where the control plane knows it, the rank that failed first.
#pragma once

#include <poll.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/call.h"
#include "core/connections.h"
#include "core/failure.h"
#include "core/plan_runner.h"
#include "util/error.h"

namespace strata {

/// The control plane's record of who waits on whom (the bootstrap root, through CommImpl): a wait that lasts
/// is published, and a timeout asks who its peers wait on, so that it names the rank at the end of the chain.
class WaitBoard {
 public:
  virtual ~WaitBoard() = default;
  /// This rank has been waiting on `peers` in `what`; empty peers: it is not waiting any more.
  virtual void publishWait(const std::vector<int>& peers, const std::string& what) = 0;
  /// What `peers` are themselves waiting on, down the chain; "" if unknown.
  virtual std::string explainWait(const std::vector<int>& peers) = 0;
};

class Progress {
 public:
  // Backoff while a wait makes no progress.
  static constexpr int kSpinRoundsBeforeClock = 32;      // idle rounds before the clock is first read
  static constexpr int64_t kLivenessCheckNs = 50000000;  // peers' liveness, and the deadline, every 50 ms
  static constexpr int64_t kYieldNs = 50000000;          // after the spin, yield this long, then sleep
  static constexpr int64_t kFirstSleepNs = 1000;         // sleeps double from 1 us ...
  static constexpr int64_t kMaxSleepNs = 100000;         // ... to 100 us
  static constexpr int kPollTimeoutMs = 1;               // blocking on sockets: failures and deadlines stay visible
  static constexpr int64_t kVerdictWaitNs = 2000000000;  // how long a broken link waits for the root's verdict
  static constexpr int64_t kPublishWaitNs = 20000000;    // a wait stalled this long is published (WaitBoard)

  /// `spinUs`: how long an idle wait spins before it yields (0: yield at once, for oversubscribed hosts).
  /// `board` (may be null) hears of waits that last and explains timeouts.
  Progress(int64_t timeoutMs, int spinUs, ConnectionTable& conns, const FailureState& failure,
           WaitBoard* board = nullptr);

  /// Drives `w` until done. Throws RemoteError (a peer died, or the communicator failed meanwhile) or
  /// TimeoutError (STRATA_TIMEOUT_MS), naming `label` (+ `phase`) and what it was waiting on.
  void drive(Waitable& w, const OpLabel& label, const char* phase = nullptr);
  /// Message for a transport error, naming the rank that failed first when the control plane knows it.
  std::string explainRemote(const std::string& what, const Error& e) const;

 private:
  /// Blocks briefly on the sockets of a stalled wait; false if some link it waits on has none (shm).
  bool pollStalled(Waitable& w);

  const int64_t timeoutMs_;
  const int64_t spinNs_;
  ConnectionTable& conns_;
  const FailureState& failure_;
  WaitBoard* const board_;
  std::vector<pollfd> pollFds_;
};

}  // namespace strata
