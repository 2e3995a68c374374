// Internal to the bootstrap: one rank process's link to the root service. Shared by every Bootstrap view
// (the world and its splits) of that rank; the last view to go sends GOODBYE and closes it.
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "bootstrap/failure_scope.h"
#include "bootstrap/socket_io.h"
#include "bootstrap/unique_id.h"
#include "util/config.h"

namespace strata {

/// What the root's table says about one rank of the job.
struct BootstrapPeer {
  std::string address;  // advertised for transport listeners
  std::string host;
  uint32_t pid = 0;
};

class BootstrapNetwork {
 public:
  /// Connects (retrying until Config::timeoutMs), authenticates, and waits for the table of all ranks.
  static std::shared_ptr<BootstrapNetwork> connect(const Config& config, const UniqueIdInfo& id, int rank, int nranks);
  ~BootstrapNetwork();
  BootstrapNetwork(const BootstrapNetwork&) = delete;
  BootstrapNetwork& operator=(const BootstrapNetwork&) = delete;

  int worldRank() const { return rank_; }
  int worldSize() const { return static_cast<int>(peers_.size()); }
  const Config& config() const { return config_; }
  const std::array<uint8_t, 16>& secret() const { return secret_; }
  const std::string& localAddress() const { return localAddress_; }
  const BootstrapPeer& peer(int worldRank) const { return peers_[static_cast<size_t>(worldRank)]; }
  /// "rank R (host H, pid P)" of a world rank.
  std::string describe(int worldRank) const;

  /// Sends through the root (or straight into this process's mailbox for toWorld == worldRank()).
  /// Throws RemoteError if the connection to the root is gone, TimeoutError if the root stops reading.
  void send(uint64_t commId, int toWorld, uint64_t tag, const void* data, size_t len);

  enum class RecvStatus { kOk, kTimeout, kFailed, kCancelled };
  /// Waits for the next message for (commId, fromWorld, tag) until `deadline`. A message that already
  /// arrived is returned even after a failure; otherwise a failure ends the wait (kFailed, see failure()),
  /// and so does `*cancelled` becoming true (kCancelled; whoever sets it calls wakeReceivers()).
  /// Only failures `scope` covers end the wait (null: any failure).
  RecvStatus recv(uint64_t commId, int fromWorld, uint64_t tag, bootstrap_io::Deadline deadline,
                  std::vector<uint8_t>& out, const std::atomic<bool>* cancelled = nullptr,
                  const FailureScope* scope = nullptr);
  /// True when a message for (commId, fromWorld, tag) has arrived and recv() would return it at once.
  bool hasMessage(uint64_t commId, int fromWorld, uint64_t tag) const;
  /// Wakes every recv() so that it looks at its cancel flag again.
  void wakeReceivers();

  /// Runs `handler` once, for the first failure `scope` covers: later from the receiver thread, or right away on
  /// the calling thread if such a failure is already recorded.
  uint64_t addFailureHandler(std::function<void(const std::string&)> handler, FailureScope scope);
  void removeFailureHandler(uint64_t id);
  /// Records the failure locally (waiters wake) and asks the root to tell every other rank. `epoch`: the shrink
  /// epoch of the communicator that failed; `commId` non-zero: the failure is about that communicator only.
  void reportFailure(const std::string& reason, uint32_t epoch, uint64_t commId = 0);
  /// The first failure `scope` covers (null: the first of all), or "".
  std::string failure(const FailureScope* scope = nullptr) const;

  /// Tells the root that this rank has been waiting on `worldPeers` in `what` (empty peers: it is not
  /// waiting any more). Best effort: a lost root only loses the diagnosis.
  void publishWait(const std::vector<int>& worldPeers, const std::string& what);
  /// The root's account of what `worldPeers` are waiting on, following the chain to the ranks that are not
  /// waiting in Strata; "" if the root does not answer within `timeoutMs`.
  std::string explainWait(const std::vector<int>& worldPeers, int64_t timeoutMs);

 private:
  BootstrapNetwork(const Config& config, const UniqueIdInfo& id, int rank);
  void handshake(int nranks, bootstrap_io::Deadline deadline);
  void receiverLoop();
  void writeFrame(const std::vector<uint8_t>& frame, bootstrap_io::Deadline deadline);
  void deliver(uint64_t commId, int from, uint64_t tag, std::vector<uint8_t> data);
  /// Keeps the failure; each handler whose scope covers it and that has not run yet runs, on this thread.
  void recordFailure(BootstrapFailure failure, bool runHandlers);
  /// The first recorded failure `scope` covers (null: any), or nullptr. Under mu_.
  const BootstrapFailure* firstFailure(const FailureScope* scope) const;

  const Config config_;
  const std::array<uint8_t, 16> secret_;
  const int rank_;
  const bootstrap_io::SockAddr rootAddr_;
  const bool rootListening_;  // UniqueIdInfo::rootListening
  bootstrap_io::Fd fd_;
  std::string localAddress_;
  std::vector<BootstrapPeer> peers_;

  std::mutex sendMu_;  // one writer at a time, so frames never interleave

  using MailboxKey = std::tuple<uint64_t, int, uint64_t>;  // commId, from (world rank), tag
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<MailboxKey, std::deque<std::vector<uint8_t>>> mailboxes_;
  std::vector<BootstrapFailure> failures_;  // in the order recorded (kMaxFailures; those for every view always)
  bool rootLost_ = false;                   // the connection is unusable: sends fail fast
  std::string rootLeaving_;                 // the root announced that its process's ranks all left (kRootLeaving)
  bool closing_ = false;                    // the destructor said goodbye: EOF from the root is expected
  bool receiverDone_ = false;
  struct Handler {
    std::function<void(const std::string&)> run;
    FailureScope scope;
    bool ran = false;
  };
  std::map<uint64_t, Handler> handlers_;
  std::atomic<uint64_t> nextWaitQuery_{1};
  uint64_t nextHandlerId_ = 1;
  std::thread receiver_;
};

}  // namespace strata
