// The root service's front door: accepting connections, authenticating each rank by its answer to a random
// challenge (a MAC under the unique id's secret), and the rendezvous that completes when every rank is in.
// See root_service.h.
#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "bootstrap/bootstrap.h"
#include "bootstrap/root_service.h"
#include "util/config.h"
#include "util/error.h"
#include "util/log.h"
#include "util/sys.h"

namespace strata {
namespace bootstrap_root {

using namespace bootstrap_io;
using namespace bootstrap_wire;

namespace {

// How long an error message to a refused rank may take to drain before the connection is dropped.
constexpr int64_t kCloseLingerMaxMs = 5000;

uint64_t challengeMac(const std::array<uint8_t, 16>& secret, const uint8_t* challenge, uint32_t rank, uint32_t nranks) {
  WireWriter w;
  w.bytes(challenge, kChallengeBytes).u32(rank).u32(nranks);
  return sipHash24(secret, w.data().data(), w.data().size());
}

}  // namespace

bool RootService::admitStranger() {
  Conn* oldest = nullptr;
  size_t strangers = 0;
  for (auto& c : conns_) {
    if (c->dead || c->state != State::kAuthenticating) continue;
    ++strangers;
    if (!oldest || c->accepted < oldest->accepted) oldest = c.get();
  }
  if (strangers < maxStrangers_) return true;
  if (Clock::now() - oldest->accepted < std::chrono::milliseconds(admission::kHelloChanceMs)) return false;
  STRATA_INFO(kLogBootstrap, "bootstrap root %s: dropping %s: %zu connections without a hello, the most kept",
              name_.c_str(), oldest->peer.c_str(), strangers);
  closeNow(*oldest);
  return true;
}

void RootService::acceptAll() {
  for (;;) {
    if (!admitStranger()) {
      acceptPause_ = Deadline::in(admission::kAcceptPauseMs);
      return;
    }
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
    // A stranger until it answers the challenge: a short deadline of its own, not the job's.
    c->deadline = Deadline::in(std::min(timeoutMs_, admission::kHelloDeadlineMs));
    fillRandomOrUrandom(c->challenge, kChallengeBytes, "bootstrap: ");
    WireWriter w;
    w.u32(kProtocolMagic).bytes(c->challenge, kChallengeBytes);
    queue(*c, MsgType::kChallenge, w.data());
    STRATA_TRACE(kLogBootstrap, "bootstrap root %s: connection from %s", name_.c_str(), c->peer.c_str());
    conns_.push_back(std::move(c));
  }
}

void RootService::handleHello(Conn& c, const uint8_t* p, size_t len) {
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
  STRATA_INFO(kLogBootstrap, "bootstrap root %s: %s arrived (%d of %d) advertising %s", name_.c_str(), c.who().c_str(),
              arrived_, expected_, c.address.c_str());
  if (arrived_ == expected_) completeRendezvous();
}

void RootService::completeRendezvous() {
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

void RootService::fail(const std::string& msg) {
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

void RootService::refuse(Conn& c, const std::string& why) {
  STRATA_WARN(kLogBootstrap, "bootstrap root %s: refused connection from %s: %s", name_.c_str(), c.peer.c_str(),
              why.c_str());
  closeNow(c);
}

void RootService::sendErrorAndClose(Conn& c, const std::string& msg) {
  if (c.rank >= 0 && static_cast<size_t>(c.rank) < rankConn_.size() && rankConn_[c.rank] == &c) {
    rankConn_[c.rank] = nullptr;
  }
  WireWriter w;
  w.str(msg);
  c.state = State::kClosing;
  c.deadline = Deadline::in(std::min(timeoutMs_, kCloseLingerMaxMs));
  queue(c, MsgType::kError, w.data());
}

}  // namespace bootstrap_root
}  // namespace strata
