// The root service: rendezvous of the ranks, then the control plane of the job.
//
// One thread per service runs a poll() loop over the listening socket, an eventfd (process exit) and
// every connection. All sockets are non-blocking and every connection has its own input and output
// buffers, so a rank that stops reading can delay only itself, never the relay for the others.
// Services are owned by a process-wide registry that joins them; see RootRegistry for why.
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>

#include "bootstrap/bootstrap.h"
#include "bootstrap/socket_io.h"
#include "bootstrap/wire.h"
#include "util/config.h"
#include "util/error.h"
#include "util/log.h"
#include "util/sys.h"

namespace strata {
namespace {

using namespace bootstrap_io;
using namespace bootstrap_wire;

// How long a service whose process is exiting keeps relaying for ranks in other processes.
constexpr int64_t kExitGraceMaxMs = 60000;
// How long an error message to a refused rank may take to drain before the connection is dropped.
constexpr int64_t kCloseLingerMaxMs = 5000;

std::string localHostName() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "unknown-host";
  return buf;
}

uint64_t challengeMac(const std::array<uint8_t, 16>& secret, const uint8_t* challenge, uint32_t rank, uint32_t nranks) {
  WireWriter w;
  w.bytes(challenge, kChallengeBytes).u32(rank).u32(nranks);
  return sipHash24(secret, w.data().data(), w.data().size());
}

class RootService {
 public:
  RootService(const Config& config, Fd listenFd, const std::array<uint8_t, 16>& secret, int nranksHint,
              std::string name)
      : timeoutMs_(config.timeoutMs),
        listen_(std::move(listenFd)),
        secret_(secret),
        hinted_(nranksHint > 0),
        expected_(nranksHint > 0 ? nranksHint : 0),
        name_(std::move(name)),
        myHost_(localHostName()),
        myPid_(static_cast<uint32_t>(getpid())) {
    wake_.reset(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!wake_.valid()) STRATA_THROW_SYS("bootstrap root: eventfd");
    if (expected_ > 0) rankConn_.assign(static_cast<size_t>(expected_), nullptr);
  }

  ~RootService() {
    if (thread_.joinable()) thread_.join();
  }

  void start() {
    thread_ = std::thread([this] { run(); });
  }

  /// The process is exiting: finish soon (see shouldStop()).
  void requestProcessExit() {
    uint64_t one = 1;
    ssize_t rc;
    do {
      rc = ::write(wake_.get(), &one, sizeof(one));
    } while (rc < 0 && errno == EINTR);
  }

  bool finished() const { return finished_.load(); }
  void join() {
    if (thread_.joinable()) thread_.join();
  }

 private:
  enum class State { kAuthenticating, kWaiting, kActive, kClosing };

  struct Conn {
    Fd fd;
    State state = State::kAuthenticating;
    std::string peer;  // ip:port, for logs
    uint8_t challenge[kChallengeBytes] = {0};
    Deadline deadline;  // authentication or close-linger deadline
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

    std::string who() const { return strprintf("rank %d (host %s, pid %u)", rank, host.c_str(), pid); }
  };

  void run() {
    STRATA_INFO(kLogBootstrap, "bootstrap root %s: serving (%s)", name_.c_str(),
                hinted_ ? strprintf("%d ranks", expected_).c_str() : "nranks from the first rank");
    try {
      while (!shouldStop()) iterate();
    } catch (const std::exception& e) {
      STRATA_WARN(kLogBootstrap, "bootstrap root %s: stopped by an internal error: %s", name_.c_str(), e.what());
    }
    conns_.clear();
    listen_.reset();
    STRATA_INFO(kLogBootstrap, "bootstrap root %s: exiting", name_.c_str());
    finished_ = true;
  }

  void iterate() {
    std::vector<pollfd> pfds;
    pfds.push_back({wake_.get(), POLLIN, 0});
    pfds.push_back({listen_.get(), static_cast<short>(acceptPause_.expired() ? POLLIN : 0), 0});
    const size_t nconns = conns_.size();
    for (auto& c : conns_) {
      short ev = c->state == State::kClosing ? 0 : POLLIN;
      if (c->outOff < c->out.size()) ev |= POLLOUT;
      pfds.push_back({c->fd.get(), ev, 0});
    }
    int n = ::poll(pfds.data(), pfds.size(), nextDeadline().pollMs());
    if (n < 0) {
      if (errno == EINTR) return;
      STRATA_THROW_SYS("bootstrap root: poll");
    }
    if (pfds[0].revents & POLLIN) {
      uint64_t v;
      while (::read(wake_.get(), &v, sizeof(v)) > 0) {
      }
      if (!processExiting_) {
        processExiting_ = true;
        exitDeadline_ = Deadline::in(std::min(timeoutMs_, kExitGraceMaxMs));
      }
    }
    if (pfds[1].revents & POLLIN) acceptAll();
    // Only the connections that were polled; acceptAll() may have appended new ones.
    for (size_t i = 0; i < nconns; ++i) {
      Conn& c = *conns_[i];
      short re = pfds[2 + i].revents;
      if (c.dead) continue;
      if (re & (POLLIN | POLLHUP | POLLERR)) readFrom(c);
      if (!c.dead && (re & POLLOUT)) flush(c);
    }
    handleBroken();
    checkTimers();
    conns_.erase(std::remove_if(conns_.begin(), conns_.end(), [](const auto& c) { return c->dead; }), conns_.end());
  }

  // ---- termination and timers -----------------------------------------------------------------------

  bool anyRemoteActive() const {
    for (const auto& c : conns_) {
      if (c->dead || c->state != State::kActive || c->goodbye) continue;
      // Ranks living in this very process are exiting with it; only other processes are worth waiting for.
      if (processExiting_ && c->pid == myPid_ && c->host == myHost_) continue;
      return true;
    }
    return false;
  }

  bool shouldStop() const {
    if (failed_) return processExiting_ || failLinger_.expired();
    if (processExiting_) return !complete_ || !anyRemoteActive() || exitDeadline_.expired();
    // The job is over when every rank either said goodbye or died (and the others were told).
    return complete_ && !anyRemoteActive();
  }

  Deadline nextDeadline() const {
    Deadline d = Deadline::never();
    for (const auto& c : conns_) {
      if (c->state == State::kAuthenticating || c->state == State::kClosing) d = d.earlier(c->deadline);
    }
    if (!complete_ && !failed_ && arrived_ > 0) d = d.earlier(rendezvousDeadline_);
    if (failed_) d = d.earlier(failLinger_);
    if (processExiting_) d = d.earlier(exitDeadline_);
    if (!acceptPause_.expired()) d = d.earlier(acceptPause_);
    return d;
  }

  void checkTimers() {
    for (auto& c : conns_) {
      if (c->dead) continue;
      if (c->state == State::kAuthenticating && c->deadline.expired()) {
        STRATA_INFO(kLogBootstrap, "bootstrap root %s: dropping %s: no hello before the deadline", name_.c_str(),
                    c->peer.c_str());
        closeNow(*c);
      } else if (c->state == State::kClosing && c->deadline.expired()) {
        closeNow(*c);
      }
    }
    if (!complete_ && !failed_ && arrived_ > 0 && rendezvousDeadline_.expired()) {
      std::string missing;
      int shown = 0;
      for (int r = 0; r < expected_; ++r) {
        if (rankConn_[static_cast<size_t>(r)]) continue;
        if (shown++ < 16) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      }
      if (shown > 16) missing += strprintf(" and %d more", shown - 16);
      fail(strprintf("bootstrap rendezvous timed out after %lld ms: %d of %d ranks arrived; missing ranks: %s",
                     static_cast<long long>(timeoutMs_), arrived_, expected_, missing.c_str()));
    }
  }

  // ---- connections -----------------------------------------------------------------------------------

  void acceptAll() {
    for (;;) {
      sockaddr_storage ss{};
      socklen_t len = sizeof(ss);
      int fd = ::accept4(listen_.get(), reinterpret_cast<sockaddr*>(&ss), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
          // EMFILE and friends: the connection stays in the backlog. Stop polling the listener for a
          // moment, or poll() would report it again at once and this loop would spin.
          STRATA_WARN(kLogBootstrap, "bootstrap root %s: accept: %s", name_.c_str(), std::strerror(errno));
          acceptPause_ = Deadline::in(100);
        }
        return;
      }
      auto c = std::make_unique<Conn>();
      c->fd.reset(fd);
      configureStream(fd);
      SockAddr peer;
      std::memcpy(&peer.ss, &ss, len);
      peer.len = len;
      c->peer = peer.str();
      c->deadline = Deadline::in(timeoutMs_);
      fillRandomOrUrandom(c->challenge, kChallengeBytes, "bootstrap: ");
      WireWriter w;
      w.u32(kProtocolMagic).bytes(c->challenge, kChallengeBytes);
      queue(*c, MsgType::kChallenge, w.data());
      STRATA_TRACE(kLogBootstrap, "bootstrap root %s: connection from %s", name_.c_str(), c->peer.c_str());
      conns_.push_back(std::move(c));
    }
  }

  void readFrom(Conn& c) {
    uint8_t buf[65536];
    bool eof = false;
    std::string why = "connection closed";
    for (;;) {
      ssize_t r = ::recv(c.fd.get(), buf, sizeof(buf), MSG_DONTWAIT);
      if (r > 0) {
        c.in.insert(c.in.end(), buf, buf + r);
        if (static_cast<size_t>(r) < sizeof(buf)) break;
        continue;
      }
      if (r == 0) {
        eof = true;
        break;
      }
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      eof = true;
      why = std::strerror(errno);
      break;
    }
    // Frames before the disconnect still count (a GOODBYE is typically followed by the close).
    parseFrames(c);
    if (eof && !c.dead) disconnected(c, why);
  }

  void parseFrames(Conn& c) {
    while (!c.dead && c.state != State::kClosing && c.in.size() - c.inOff >= kFrameHeaderBytes) {
      WireReader hdr(c.in.data() + c.inOff, kFrameHeaderBytes);
      const uint32_t type = hdr.u32();
      const uint32_t len = hdr.u32();
      const size_t max = c.state == State::kAuthenticating ? kMaxUnauthenticatedFrame : kMaxFrame;
      if (len > max) {
        protocolError(c, strprintf("frame of %u bytes (type %u) exceeds the limit of %zu", len, type, max));
        return;
      }
      if (c.in.size() - c.inOff < kFrameHeaderBytes + len) break;
      const uint8_t* payload = c.in.data() + c.inOff + kFrameHeaderBytes;
      c.inOff += kFrameHeaderBytes + len;
      try {
        handleFrame(c, static_cast<MsgType>(type), payload, len);
      } catch (const RemoteError& e) {  // malformed payload
        protocolError(c, e.what());
        return;
      }
    }
    if (c.inOff == c.in.size()) {
      c.in.clear();
      c.inOff = 0;
    } else if (c.inOff > (size_t(1) << 20)) {
      c.in.erase(c.in.begin(), c.in.begin() + static_cast<std::ptrdiff_t>(c.inOff));
      c.inOff = 0;
    }
  }

  void handleFrame(Conn& c, MsgType type, const uint8_t* p, size_t len) {
    switch (c.state) {
      case State::kAuthenticating:
        if (type != MsgType::kHello) {
          refuse(c, strprintf("sent message type %u before authenticating", static_cast<uint32_t>(type)));
          return;
        }
        handleHello(c, p, len);
        return;
      case State::kWaiting:
        protocolError(c,
                      strprintf("sent message type %u before the rendezvous completed", static_cast<uint32_t>(type)));
        return;
      case State::kActive: break;
      case State::kClosing: return;
    }
    switch (type) {
      case MsgType::kRelay: relay(c, p, len); return;
      case MsgType::kReportFailure: {
        WireReader r(p, len);
        std::string reason = r.str();
        broadcastFailure(strprintf("%s reported a failure: %s", c.who().c_str(), reason.c_str()), c.rank);
        return;
      }
      case MsgType::kGoodbye:
        STRATA_INFO(kLogBootstrap, "bootstrap root %s: %s said goodbye", name_.c_str(), c.who().c_str());
        c.goodbye = true;
        // Before closing: the closing releases the leaving rank, whose process may then exit at once (a
        // forked worker ends with _exit(), skipping the grace period the registry gives at exit()).
        if (isLocal(c) && !anyLocalActive()) announceRootLeaving(c);
        closeNow(c);
        return;
      default: protocolError(c, strprintf("sent unexpected message type %u", static_cast<uint32_t>(type)));
    }
  }

  void handleHello(Conn& c, const uint8_t* p, size_t len) {
    WireReader r(p, len);
    const uint32_t rank = r.u32();
    const uint32_t nranks = r.u32();
    const uint64_t mac = r.u64();
    const uint32_t pid = r.u32();
    std::string host = r.str();
    std::string address = r.str();
    // Compare without an early exit so the time taken says nothing about how many bytes matched.
    const uint64_t diff = mac ^ challengeMac(secret_, c.challenge, rank, nranks);
    if (diff != 0) {
      refuse(c, strprintf("wrong MAC for rank %u of %u from host '%s' pid %u: the connecting process does not "
                          "hold this unique id's secret",
                          rank, nranks, host.c_str(), pid));
      return;
    }
    c.rank = static_cast<int>(rank);
    c.pid = pid;
    c.host = std::move(host);
    c.address = std::move(address);

    if (failed_) {
      sendErrorAndClose(c, failMsg_);
      return;
    }
    if (complete_) {
      sendErrorAndClose(c, strprintf("%s connected to a bootstrap root whose %d ranks have all arrived already; "
                                     "a unique id serves one communicator initialization only",
                                     c.who().c_str(), expected_));
      return;
    }
    if (nranks < 1 || nranks > (1u << 24) || rank >= nranks) {
      sendErrorAndClose(c, strprintf("%s connected with an invalid nranks=%u", c.who().c_str(), nranks));
      return;
    }
    if (expected_ == 0) {
      expected_ = static_cast<int>(nranks);
      firstWho_ = c.who();
      rankConn_.assign(nranks, nullptr);
    } else if (static_cast<int>(nranks) != expected_) {
      fail(strprintf("nranks mismatch: %s connected with nranks=%u, but %s", c.who().c_str(), nranks,
                     hinted_ ? strprintf("the bootstrap root was started for %d ranks", expected_).c_str()
                             : strprintf("%s connected with nranks=%d", firstWho_.c_str(), expected_).c_str()));
      sendErrorAndClose(c, failMsg_);
      return;
    }
    if (Conn* first = rankConn_[rank]) {
      fail(strprintf("duplicate rank: rank %u connected twice, from host %s pid %u and from host %s pid %u", rank,
                     first->host.c_str(), first->pid, c.host.c_str(), c.pid));
      sendErrorAndClose(c, failMsg_);
      return;
    }
    c.state = State::kWaiting;
    rankConn_[rank] = &c;
    if (arrived_++ == 0) rendezvousDeadline_ = Deadline::in(timeoutMs_);
    STRATA_INFO(kLogBootstrap, "bootstrap root %s: %s arrived (%d of %d) advertising %s", name_.c_str(),
                c.who().c_str(), arrived_, expected_, c.address.c_str());
    if (arrived_ == expected_) completeRendezvous();
  }

  void completeRendezvous() {
    WireWriter w;
    w.u32(static_cast<uint32_t>(expected_));
    for (Conn* c : rankConn_) w.str(c->address).str(c->host).u32(c->pid);
    for (Conn* c : rankConn_) {
      c->state = State::kActive;
      queue(*c, MsgType::kTable, w.data());
    }
    complete_ = true;
    STRATA_INFO(kLogBootstrap, "bootstrap root %s: all %d ranks arrived", name_.c_str(), expected_);
  }

  void relay(Conn& c, const uint8_t* p, size_t len) {
    WireReader r(p, len);
    r.u64();  // commId: opaque to the root
    r.u32();  // from: replaced below by the authenticated rank of the sender
    const uint32_t to = r.u32();
    std::vector<uint8_t> payload(p, p + len);
    const uint32_t from = static_cast<uint32_t>(c.rank);
    for (int i = 0; i < 4; ++i) payload[8 + static_cast<size_t>(i)] = static_cast<uint8_t>(from >> (8 * i));
    Conn* dst = to < rankConn_.size() ? rankConn_[to] : nullptr;
    if (!dst || dst->dead || dst->state != State::kActive || dst->goodbye) {
      // The destination left; if it died, the sender hears about it through a FAILURE.
      STRATA_TRACE(kLogBootstrap, "bootstrap root %s: dropping a message from rank %u to rank %u (gone)", name_.c_str(),
                   from, to);
      return;
    }
    queue(*dst, MsgType::kRelay, payload);
  }

  bool isLocal(const Conn& c) const { return c.pid == myPid_ && c.host == myHost_; }

  bool anyLocalActive() const {
    for (const Conn* c : rankConn_) {
      if (c && !c->dead && c->state == State::kActive && !c->goodbye && isLocal(*c)) return true;
    }
    return false;
  }

  /// The last rank of the root's own process left on purpose. The other ranks may still be finishing work
  /// that no longer involves it; tell them the root's disappearance will be orderly, so they do not abort.
  void announceRootLeaving(const Conn& last) {
    if (!complete_) return;
    WireWriter w;
    w.str(strprintf("the bootstrap root ran in the process of %s, which destroyed its communicators",
                    last.who().c_str()));
    for (Conn* c : rankConn_) {
      if (!c || c->dead || c->state != State::kActive || c->goodbye || isLocal(*c)) continue;
      queue(*c, MsgType::kRootLeaving, w.data());
    }
  }

  void broadcastFailure(const std::string& msg, int exceptRank) {
    STRATA_WARN(kLogBootstrap, "bootstrap root %s: %s", name_.c_str(), msg.c_str());
    WireWriter w;
    w.str(msg);
    for (Conn* c : rankConn_) {
      if (!c || c->dead || c->state != State::kActive || c->goodbye || c->rank == exceptRank) continue;
      queue(*c, MsgType::kFailure, w.data());
    }
  }

  /// The rendezvous cannot complete: tell every waiting rank (and, for a while, latecomers) why.
  void fail(const std::string& msg) {
    if (failed_) return;
    failed_ = true;
    failMsg_ = msg;
    failLinger_ = Deadline::in(timeoutMs_);
    STRATA_WARN(kLogBootstrap, "bootstrap root %s: rendezvous failed: %s", name_.c_str(), msg.c_str());
    for (Conn*& c : rankConn_) {
      if (c && !c->dead && c->state == State::kWaiting) sendErrorAndClose(*c, msg);
      c = nullptr;
    }
  }

  void disconnected(Conn& c, const std::string& why) {
    switch (c.state) {
      case State::kAuthenticating:
      case State::kClosing: closeNow(c); return;
      case State::kWaiting: {
        std::string who = c.who();
        closeNow(c);
        fail(strprintf("%s disconnected (%s) before all %d ranks arrived", who.c_str(), why.c_str(), expected_));
        return;
      }
      case State::kActive: {
        std::string who = c.who();
        int rank = c.rank;
        bool orderly = c.goodbye;
        closeNow(c);
        if (!orderly) {
          broadcastFailure(strprintf("%s died or disconnected from the bootstrap root without saying goodbye (%s)",
                                     who.c_str(), why.c_str()),
                           rank);
        }
        return;
      }
    }
  }

  void protocolError(Conn& c, const std::string& what) {
    if (c.state == State::kAuthenticating) {
      refuse(c, what);
      return;
    }
    STRATA_WARN(kLogBootstrap, "bootstrap root %s: protocol error from %s: %s", name_.c_str(), c.who().c_str(),
                what.c_str());
    disconnected(c, "protocol error: " + what);
  }

  /// An unauthenticated connection misbehaved: close it at once, tell it nothing.
  void refuse(Conn& c, const std::string& why) {
    STRATA_WARN(kLogBootstrap, "bootstrap root %s: refused connection from %s: %s", name_.c_str(), c.peer.c_str(),
                why.c_str());
    closeNow(c);
  }

  void sendErrorAndClose(Conn& c, const std::string& msg) {
    if (c.rank >= 0 && static_cast<size_t>(c.rank) < rankConn_.size() && rankConn_[c.rank] == &c) {
      rankConn_[c.rank] = nullptr;
    }
    WireWriter w;
    w.str(msg);
    c.state = State::kClosing;
    c.deadline = Deadline::in(std::min(timeoutMs_, kCloseLingerMaxMs));
    queue(c, MsgType::kError, w.data());
  }

  void closeNow(Conn& c) {
    if (c.rank >= 0 && static_cast<size_t>(c.rank) < rankConn_.size() && rankConn_[c.rank] == &c) {
      rankConn_[c.rank] = nullptr;
    }
    c.dead = true;
    c.fd.reset();
  }

  void queue(Conn& c, MsgType type, const std::vector<uint8_t>& payload) {
    WireWriter w;
    w.u32(static_cast<uint32_t>(type)).u32(static_cast<uint32_t>(payload.size()));
    c.out.insert(c.out.end(), w.data().begin(), w.data().end());
    c.out.insert(c.out.end(), payload.begin(), payload.end());
    flush(c);  // most messages go out right away; the rest wait for POLLOUT
  }

  void flush(Conn& c) {
    while (!c.dead && !c.broken && c.outOff < c.out.size()) {
      ssize_t w = ::send(c.fd.get(), c.out.data() + c.outOff, c.out.size() - c.outOff, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (w > 0) {
        c.outOff += static_cast<size_t>(w);
        continue;
      }
      if (w < 0 && errno == EINTR) continue;
      if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      // Handled after this round, so that a failure found while broadcasting does not recurse.
      c.broken = true;
      c.brokenWhy = w < 0 ? std::strerror(errno) : "send returned 0";
    }
    if (c.outOff == c.out.size()) {
      c.out.clear();
      c.outOff = 0;
      if (c.state == State::kClosing && !c.dead) closeNow(c);
    }
  }

  void handleBroken() {
    // A disconnect may broadcast a failure whose writes break more connections: repeat until quiet.
    for (bool again = true; again;) {
      again = false;
      for (auto& c : conns_) {
        if (c->broken && !c->dead) {
          c->broken = false;
          disconnected(*c, c->brokenWhy);
          again = true;
        }
      }
    }
  }

  const int64_t timeoutMs_;
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
  std::thread thread_;
};

// Owns every root service of the process. Detached threads would be simpler, but a detached thread
// still running while exit() destroys statics is undefined behaviour; instead, at exit the registry
// asks each service to finish (it keeps relaying for other processes' ranks for a bounded grace period)
// and joins it.
class RootRegistry {
 public:
  static RootRegistry& instance() {
    // Construct the log settings first so that they are destroyed after the registry: services log
    // until they are joined.
    (void)logSettings();
    static RootRegistry registry;
    return registry;
  }

  void add(std::unique_ptr<RootService> s) {
    std::lock_guard<std::mutex> lock(mu_);
    forgetInheritedServices();
    // Reap services that ended, so a long-lived process that makes many ids does not accumulate threads.
    for (auto& old : services_) {
      if (old->finished()) old->join();
    }
    services_.erase(std::remove_if(services_.begin(), services_.end(), [](const auto& o) { return o->finished(); }),
                    services_.end());
    services_.push_back(std::move(s));
  }

  ~RootRegistry() {
    std::lock_guard<std::mutex> lock(mu_);
    forgetInheritedServices();
    for (auto& s : services_) s->requestProcessExit();
    for (auto& s : services_) s->join();
  }

 private:
  RootRegistry() : ownerPid_(getpid()) {}

  // A fork()ed child has copies of the parent's service objects but not their threads: joining one
  // would wait forever and destroying one would close the parent's sockets' copies mid-use. Leak them.
  void forgetInheritedServices() {
    if (getpid() == ownerPid_) return;
    for (auto& s : services_) (void)s.release();
    services_.clear();
    ownerPid_ = getpid();
  }

  std::mutex mu_;
  std::vector<std::unique_ptr<RootService>> services_;
  pid_t ownerPid_;
};

bool isWildcard(const std::string& a) { return a == "0.0.0.0" || a == "::" || a == "*"; }

}  // namespace

UniqueIdInfo startRootService(const Config& config, const std::string& bindAddr, uint16_t port,
                              const std::array<uint8_t, 16>& secret, int nranksHint) {
  std::string advertise;
  SockAddr bindSa;
  if (bindAddr.empty()) {
    advertise = defaultAdvertiseAddress(config);
    bindSa = resolveHost(advertise, port, false, "bootstrap root bind address");
  } else if (isWildcard(bindAddr)) {
    bindSa = resolveHost(bindAddr == "*" ? "0.0.0.0" : bindAddr, port, true, "bootstrap root bind address");
    advertise = defaultAdvertiseAddress(config);
  } else {
    bindSa = resolveHost(bindAddr, port, false, "bootstrap root bind address");
    advertise = bindSa.host();
  }

  Fd fd(::socket(bindSa.family(), SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) STRATA_THROW_SYS("bootstrap root: socket()");
  int one = 1;
  // A root restarted on a fixed port (MASTER_PORT) must not wait out TIME_WAIT of the previous run.
  if (setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0) {
    STRATA_THROW_SYS("bootstrap root: SO_REUSEADDR");
  }
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&bindSa.ss), bindSa.len) != 0) {
    STRATA_THROW_SYS("bootstrap root: cannot listen on " + bindSa.str() +
                     (port ? " (is another job using this port? set MASTER_PORT)" : ""));
  }
  if (::listen(fd.get(), SOMAXCONN) != 0) STRATA_THROW_SYS("bootstrap root: listen on " + bindSa.str());
  const uint16_t actualPort = localAddressOf(fd.get()).port();

  const SockAddr adv = resolveHost(advertise, actualPort, false, "bootstrap root advertised address");
  UniqueIdInfo info;
  info.magic = kUniqueIdMagic;
  info.family = static_cast<uint8_t>(adv.family());
  sockAddrToRaw(adv, info.addr);
  info.port = actualPort;
  info.secret = secret;
  fillRandomOrUrandom(&info.nonce, sizeof(info.nonce), "bootstrap: ");

  auto service = std::make_unique<RootService>(config, std::move(fd), secret, nranksHint, adv.str());
  service->start();
  RootRegistry::instance().add(std::move(service));
  STRATA_INFO(kLogBootstrap, "bootstrap root listening on %s, advertised as %s", bindSa.str().c_str(),
              adv.str().c_str());
  return info;
}

}  // namespace strata
