// The root service's loop, termination, timers and connection I/O; its registry; startRootService. See
// root_service.h.
#include "bootstrap/root_service.h"

#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

#include "bootstrap/bootstrap.h"
#include "util/config.h"
#include "util/error.h"
#include "util/log.h"
#include "util/sys.h"

namespace strata {
namespace bootstrap_root {

using namespace bootstrap_io;
using namespace bootstrap_wire;

namespace {

// How long a service whose process is exiting keeps relaying for ranks in other processes.
constexpr int64_t kExitGraceMaxMs = 60000;

std::string localHostName() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "unknown-host";
  return buf;
}

}  // namespace

RootService::RootService(const Config& config, Fd listenFd, const std::array<uint8_t, 16>& secret, int nranksHint,
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

RootService::~RootService() {
  if (thread_.joinable()) thread_.join();
}

namespace {
// The nonces of the unique ids this process's root services serve now, and of the last ones that ended.
std::mutex gNonceMu;
std::multiset<uint64_t> gServingNonces;
std::deque<uint64_t> gEndedNonces;
constexpr size_t kEndedNoncesKept = 4096;
}  // namespace

void RootService::start(uint64_t nonce) {
  nonce_ = nonce;
  if (nonce != 0) {
    std::lock_guard<std::mutex> lk(gNonceMu);
    gServingNonces.insert(nonce);
  }
  thread_ = std::thread([this] { run(); });
}

void RootService::requestProcessExit() {
  uint64_t one = 1;
  ssize_t rc;
  do {
    rc = ::write(wake_.get(), &one, sizeof(one));
  } while (rc < 0 && errno == EINTR);
}

void RootService::join() {
  if (thread_.joinable()) thread_.join();
}

void RootService::run() {
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
  noteEnded();
  finished_ = true;
}

void RootService::noteEnded() {
  if (ended_ || nonce_ == 0) return;
  ended_ = true;
  std::lock_guard<std::mutex> lk(gNonceMu);
  if (auto it = gServingNonces.find(nonce_); it != gServingNonces.end()) gServingNonces.erase(it);
  gEndedNonces.push_back(nonce_);
  if (gEndedNonces.size() > kEndedNoncesKept) gEndedNonces.pop_front();
}

void RootService::iterate() {
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
  // Hellos first, then new connections: a rank whose hello arrived is never dropped to make room for a stranger.
  for (size_t i = 0; i < nconns; ++i) {
    Conn& c = *conns_[i];
    short re = pfds[2 + i].revents;
    if (c.dead) continue;
    if (re & (POLLIN | POLLHUP | POLLERR)) readFrom(c);
    if (!c.dead && (re & POLLOUT)) flush(c);
  }
  if (pfds[1].revents & POLLIN) acceptAll();
  handleBroken();
  checkTimers();
  conns_.erase(std::remove_if(conns_.begin(), conns_.end(), [](const auto& c) { return c->dead; }), conns_.end());
}

// ---- termination and timers -----------------------------------------------------------------------

bool RootService::anyRemoteActive() const {
  for (const auto& c : conns_) {
    if (c->dead || c->state != State::kActive || c->goodbye) continue;
    // Ranks living in this very process are exiting with it; only other processes are worth waiting for.
    if (processExiting_ && c->pid == myPid_ && c->host == myHost_) continue;
    return true;
  }
  return false;
}

bool RootService::shouldStop() const {
  if (failed_) return processExiting_ || failLinger_.expired();
  if (processExiting_) return !complete_ || !anyRemoteActive() || exitDeadline_.expired();
  // The job is over when every rank either said goodbye or died (and the others were told).
  return complete_ && !anyRemoteActive();
}

Deadline RootService::nextDeadline() const {
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

void RootService::checkTimers() {
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

void RootService::readFrom(Conn& c) {
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

void RootService::parseFrames(Conn& c) {
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

void RootService::closeNow(Conn& c) {
  if (c.rank >= 0 && static_cast<size_t>(c.rank) < rankConn_.size() && rankConn_[c.rank] == &c) {
    rankConn_[c.rank] = nullptr;
  }
  c.dead = true;
  c.fd.reset();
}

void RootService::queue(Conn& c, MsgType type, const std::vector<uint8_t>& payload) {
  WireWriter w;
  w.u32(static_cast<uint32_t>(type)).u32(static_cast<uint32_t>(payload.size()));
  c.out.insert(c.out.end(), w.data().begin(), w.data().end());
  c.out.insert(c.out.end(), payload.begin(), payload.end());
  flush(c);  // most messages go out right away; the rest wait for POLLOUT
}

void RootService::flush(Conn& c) {
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

void RootService::handleBroken() {
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

}  // namespace bootstrap_root

bool rootEndedHere(uint64_t nonce) {
  if (nonce == 0) return false;
  std::lock_guard<std::mutex> lk(bootstrap_root::gNonceMu);
  if (bootstrap_root::gServingNonces.count(nonce)) return false;
  return std::find(bootstrap_root::gEndedNonces.begin(), bootstrap_root::gEndedNonces.end(), nonce) !=
         bootstrap_root::gEndedNonces.end();
}

namespace {

using namespace bootstrap_io;
using bootstrap_root::RootService;

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
  info.rootListening = true;  // the socket listens from here on

  auto service = std::make_unique<RootService>(config, std::move(fd), secret, nranksHint, adv.str());
  // Only an ephemeral port's id is one of a kind: an environment launch's root (a fixed port, a nonce derived
  // from the job's secret) may serve the same id again after a re-init, so it is not tracked.
  service->start(port == 0 ? info.nonce : 0);
  RootRegistry::instance().add(std::move(service));
  STRATA_INFO(kLogBootstrap, "bootstrap root listening on %s, advertised as %s", bindSa.str().c_str(),
              adv.str().c_str());
  return info;
}

}  // namespace strata
