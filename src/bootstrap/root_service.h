// The bootstrap root service (startRootService in bootstrap.h): rendezvous of the ranks, then the control plane
// of the job. Internal to src/bootstrap/.
//
// One thread per service runs a poll() loop over the listening socket, an eventfd (process exit) and
// every connection. All sockets are non-blocking and every connection has its own input and output
// buffers, so a rank that stops reading can delay only itself, never the relay for the others.
// Services are owned by a process-wide registry that joins them; see RootRegistry for why.
//
// Its parts: root_service.cc, the loop, timers, connection I/O and the registry; root_accept.cc, accepting and
// authenticating ranks and the rendezvous; root_relay.cc, what the root does with each message once they are
// in: relays, failures, goodbyes and disconnects.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap/socket_io.h"
#include "bootstrap/wire.h"
#include "util/error.h"

namespace strata {

struct Config;

namespace bootstrap_root {

using bootstrap_io::Clock;
using bootstrap_io::Deadline;
using bootstrap_io::Fd;
using bootstrap_wire::kChallengeBytes;
using bootstrap_wire::MsgType;

class RootService {
 public:
  RootService(const Config& config, Fd listenFd, const std::array<uint8_t, 16>& secret, int nranksHint,
              std::string name);
  ~RootService();

  /// Starts serving the unique id whose nonce is `nonce` (see rootEndedHere; 0: not tracked).
  void start(uint64_t nonce);
  /// The process is exiting: finish soon (see shouldStop()).
  void requestProcessExit();
  bool finished() const { return finished_.load(); }
  void join();

 private:
  enum class State { kAuthenticating, kWaiting, kActive, kClosing };

  struct Conn {
    Fd fd;
    State state = State::kAuthenticating;
    std::string peer;  // ip:port, for logs
    uint8_t challenge[kChallengeBytes] = {0};
    Deadline deadline;  // authentication or close-linger deadline
    Clock::time_point accepted = Clock::now();
    int rank = -1;
    uint32_t pid = 0;
    std::string host, address;
    bool goodbye = false;
    bool dead = false;    // closed; erased after this poll round
    bool broken = false;  // a write failed; handled as a disconnect after this poll round
    std::string brokenWhy;
    std::vector<uint8_t> in;
    size_t inOff = 0;
    std::vector<uint8_t> out;
    size_t outOff = 0;
    // What the rank last said it waits on (kWaitState): ranks, in what, since when (empty: not waiting).
    std::vector<int> waitingOn;
    std::string waitWhat;
    Clock::time_point waitSince;

    std::string who() const { return strprintf("rank %d (host %s, pid %u)", rank, host.c_str(), pid); }
  };

  // The loop, termination, timers and connection I/O (root_service.cc).
  void run();
  void iterate();
  bool anyRemoteActive() const;
  bool shouldStop() const;
  /// Records that this id's communicator is over (see rootEndedHere); idempotent.
  void noteEnded();
  Deadline nextDeadline() const;
  void checkTimers();
  void readFrom(Conn& c);
  void parseFrames(Conn& c);
  void closeNow(Conn& c);
  void queue(Conn& c, MsgType type, const std::vector<uint8_t>& payload);
  void flush(Conn& c);
  void handleBroken();

  // Accepting and authenticating ranks, and the rendezvous (root_accept.cc).
  void acceptAll();
  /// Room for one more unauthenticated connection (admission in socket_io.h): true if there is, possibly after
  /// dropping the oldest stranger; false if the listener must wait.
  bool admitStranger();
  void handleHello(Conn& c, const uint8_t* p, size_t len);
  void completeRendezvous();
  /// The rendezvous cannot complete: tell every waiting rank (and, for a while, latecomers) why.
  void fail(const std::string& msg);
  /// An unauthenticated connection misbehaved: close it at once, tell it nothing.
  void refuse(Conn& c, const std::string& why);
  void sendErrorAndClose(Conn& c, const std::string& msg);

  // Each message, and the control plane once the ranks are in: relays, failures, goodbyes, disconnects
  // (root_relay.cc).
  void handleFrame(Conn& c, MsgType type, const uint8_t* p, size_t len);
  void relay(Conn& c, const uint8_t* p, size_t len);
  /// Who `peers` wait on, and so on down the chain to the ranks that are not waiting (kWaitQuery).
  std::string explainWaits(const std::vector<int>& peers) const;
  bool isLocal(const Conn& c) const { return c.pid == myPid_ && c.host == myHost_; }
  bool anyLocalActive() const;
  /// The last rank of the root's own process left on purpose. The other ranks may still be finishing work
  /// that no longer involves it; tell them the root's disappearance will be orderly, so they do not abort.
  void announceRootLeaving(const Conn& last);
  /// Tells every other active rank. `epoch`: the shrink epoch of the communicator a rank reported for;
  /// `deadRank`: the rank that died (-1 for a report); `commId`: the one communicator it is about (0: any).
  void broadcastFailure(const std::string& msg, int exceptRank, uint32_t epoch, int deadRank, uint64_t commId);
  void disconnected(Conn& c, const std::string& why);
  void protocolError(Conn& c, const std::string& what);

  const int64_t timeoutMs_;
  const size_t maxStrangers_ = bootstrap_io::admission::maxStrangers();
  Fd listen_;
  Fd wake_;
  const std::array<uint8_t, 16> secret_;
  const bool hinted_;
  int expected_;            // 0 until known
  std::string firstWho_;    // the rank whose nranks set expected_ (no hint)
  const std::string name_;  // "host:port", for logs
  const std::string myHost_;
  const uint32_t myPid_;
  std::vector<std::unique_ptr<Conn>> conns_;
  std::vector<Conn*> rankConn_;  // by rank; null = absent
  int arrived_ = 0;
  bool complete_ = false;
  bool failed_ = false;
  std::string failMsg_;
  Deadline rendezvousDeadline_, failLinger_, exitDeadline_;
  bool processExiting_ = false;
  Deadline acceptPause_{Clock::time_point::min()};  // listener not polled until then (after EMFILE)
  std::atomic<bool> finished_{false};
  uint64_t nonce_ = 0;
  bool ended_ = false;  // noteEnded() ran
  std::thread thread_;
};

}  // namespace bootstrap_root

}  // namespace strata
