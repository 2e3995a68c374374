#include "bootstrap/socket_io.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "util/config.h"
#include "util/error.h"
#include "util/log.h"

namespace strata::bootstrap_io {

int Deadline::pollMs() const {
  if (isNever()) return -1;
  auto left = at - Clock::now();
  if (left <= Clock::duration::zero()) return 0;
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(left).count() + 1;  // round up: no early wake
  return static_cast<int>(std::min<int64_t>(ms, 1 << 30));
}

Fd& Fd::operator=(Fd&& o) noexcept {
  if (this != &o) reset(o.release());
  return *this;
}

void Fd::reset(int fd) {
  // close() is not retried on EINTR: on Linux the descriptor is released either way.
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

uint16_t SockAddr::port() const {
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&ss)->sin_port);
  if (ss.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_port);
  return 0;
}

std::string SockAddr::host() const {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (ss.ss_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&ss)->sin_addr, buf, sizeof(buf));
  } else if (ss.ss_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_addr, buf, sizeof(buf));
  } else {
    return "<unknown family " + std::to_string(ss.ss_family) + ">";
  }
  return buf;
}

std::string SockAddr::str() const {
  if (ss.ss_family == AF_INET6) return "[" + host() + "]:" + std::to_string(port());
  return host() + ":" + std::to_string(port());
}

SockAddr sockAddrFromRaw(uint8_t family, const uint8_t addr[16], uint16_t port) {
  SockAddr a;
  if (family == AF_INET) {
    auto* in = reinterpret_cast<sockaddr_in*>(&a.ss);
    in->sin_family = AF_INET;
    in->sin_port = htons(port);
    std::memcpy(&in->sin_addr, addr, 4);
    a.len = sizeof(sockaddr_in);
  } else if (family == AF_INET6) {
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&a.ss);
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons(port);
    std::memcpy(&in6->sin6_addr, addr, 16);
    a.len = sizeof(sockaddr_in6);
  } else {
    throw InvalidArgument(strprintf("bootstrap: address family %u is neither AF_INET nor AF_INET6", family));
  }
  return a;
}

void sockAddrToRaw(const SockAddr& a, uint8_t* out) {
  std::memset(out, 0, 16);
  if (a.family() == AF_INET) std::memcpy(out, &reinterpret_cast<const sockaddr_in*>(&a.ss)->sin_addr, 4);
  else if (a.family() == AF_INET6) std::memcpy(out, &reinterpret_cast<const sockaddr_in6*>(&a.ss)->sin6_addr, 16);
}

SockAddr resolveHost(const std::string& host, uint16_t port, bool passive, const std::string& what) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (passive) hints.ai_flags |= AI_PASSIVE;
  addrinfo* res = nullptr;
  std::string service = std::to_string(port);
  int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &res);
  if (rc != 0 || res == nullptr) {
    throw InvalidArgument(strprintf("bootstrap: cannot resolve %s '%s': %s", what.c_str(), host.c_str(),
                                    rc == EAI_SYSTEM ? std::strerror(errno) : gai_strerror(rc)));
  }
  // IPv4 first: clusters configure it everywhere, while IPv6 answers are often link-local or unrouted.
  const addrinfo* pick = res;
  for (const addrinfo* p = res; p; p = p->ai_next) {
    if (p->ai_family == AF_INET) {
      pick = p;
      break;
    }
  }
  SockAddr a;
  std::memcpy(&a.ss, pick->ai_addr, pick->ai_addrlen);
  a.len = pick->ai_addrlen;
  freeaddrinfo(res);
  return a;
}

SockAddr localAddressOf(int fd) {
  SockAddr a;
  a.len = sizeof(a.ss);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&a.ss), &a.len) != 0) STRATA_THROW_SYS("bootstrap: getsockname");
  return a;
}

SockAddr peerAddressOf(int fd) {
  SockAddr a;
  a.len = sizeof(a.ss);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&a.ss), &a.len) != 0) a.len = 0;
  return a;
}

namespace {

struct IfAddrs {
  ifaddrs* list = nullptr;
  IfAddrs() {
    if (getifaddrs(&list) != 0) STRATA_THROW_SYS("bootstrap: getifaddrs");
  }
  ~IfAddrs() { freeifaddrs(list); }
};

std::string numericHost(const sockaddr* sa) {
  SockAddr a;
  size_t len = sa->sa_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
  std::memcpy(&a.ss, sa, len);
  a.len = static_cast<socklen_t>(len);
  return a.host();
}

bool isLinkLocal6(const sockaddr* sa) {
  const auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
  return IN6_IS_ADDR_LINKLOCAL(&in6->sin6_addr);
}

}  // namespace

std::string interfaceAddress(const std::string& ifname) {
  IfAddrs ifs;
  std::string v6;
  std::vector<std::string> available;
  for (ifaddrs* p = ifs.list; p; p = p->ifa_next) {
    if (!p->ifa_addr || (p->ifa_addr->sa_family != AF_INET && p->ifa_addr->sa_family != AF_INET6)) continue;
    std::string entry = std::string(p->ifa_name) + " (" + numericHost(p->ifa_addr) + ")";
    if (std::find(available.begin(), available.end(), entry) == available.end()) available.push_back(entry);
    if (ifname != p->ifa_name) continue;
    if (p->ifa_addr->sa_family == AF_INET) return numericHost(p->ifa_addr);
    // A link-local IPv6 address needs a scope id that a numeric string cannot carry to other hosts.
    if (v6.empty() && !isLinkLocal6(p->ifa_addr)) v6 = numericHost(p->ifa_addr);
  }
  if (!v6.empty()) return v6;
  std::string list;
  for (const auto& a : available) list += (list.empty() ? "" : ", ") + a;
  throw InvalidArgument("STRATA_SOCKET_IFNAME='" + ifname + "' names no interface with a usable address; available: " +
                        (list.empty() ? std::string("none") : list));
}

std::string defaultAdvertiseAddress(const Config& config) {
  if (!config.socketIfname.empty()) return interfaceAddress(config.socketIfname);
  // The source address the kernel would pick for an outside destination is the default route's.
  // connect() on a UDP socket sends nothing; it only chooses the route.
  {
    Fd s(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    sockaddr_in probe{};
    probe.sin_family = AF_INET;
    probe.sin_port = htons(9);
    inet_pton(AF_INET, "192.0.2.1", &probe.sin_addr);  // TEST-NET-1: never actually reached
    if (s.valid() && ::connect(s.get(), reinterpret_cast<sockaddr*>(&probe), sizeof(probe)) == 0) {
      std::string h = localAddressOf(s.get()).host();
      if (h != "0.0.0.0") return h;
    }
  }
  IfAddrs ifs;
  for (ifaddrs* p = ifs.list; p; p = p->ifa_next) {
    if (!p->ifa_addr || p->ifa_addr->sa_family != AF_INET) continue;
    if ((p->ifa_flags & IFF_LOOPBACK) || !(p->ifa_flags & IFF_UP)) continue;
    return numericHost(p->ifa_addr);
  }
  return "127.0.0.1";
}

void configureStream(int fd) {
  int fl = fcntl(fd, F_GETFL, 0);
  if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) != 0) STRATA_THROW_SYS("bootstrap: fcntl(O_NONBLOCK)");
  int one = 1;
  // Control messages are small and latency-bound; Nagle would hold them back.
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0) STRATA_THROW_SYS("bootstrap: TCP_NODELAY");
}

// A connect to a local port in the ephemeral range that nobody listens on yet can be given that very
// port as its source and connect to itself (TCP simultaneous open). The socket then holds the port the
// root is about to listen on, and the root fails with EADDRINUSE. Such a socket is a refusal.
bool isSelfConnected(int fd) {
  sockaddr_storage local{}, peer{};
  socklen_t llen = sizeof(local), plen = sizeof(peer);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &llen) != 0) return false;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &plen) != 0) return false;
  return llen == plen && std::memcmp(&local, &peer, llen) == 0;
}

namespace {

// One non-blocking connect attempt; returns 0 or the errno that ended it (ETIMEDOUT at the deadline).
int tryConnect(int fd, const SockAddr& addr, Deadline deadline) {
  int rc;
  do {
    rc = ::connect(fd, reinterpret_cast<const sockaddr*>(&addr.ss), addr.len);
  } while (rc != 0 && errno == EINTR);
  if (rc == 0) return isSelfConnected(fd) ? ECONNREFUSED : 0;
  if (errno != EINPROGRESS) return errno;
  for (;;) {
    pollfd p{fd, POLLOUT, 0};
    int n = ::poll(&p, 1, deadline.pollMs());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    if (n == 0) return ETIMEDOUT;
    int err = 0;
    socklen_t len = sizeof(err);
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) return errno;
    if (err == 0 && isSelfConnected(fd)) return ECONNREFUSED;
    return err;
  }
}

}  // namespace

Fd connectWithRetry(const SockAddr& addr, Deadline deadline, const std::string& who, bool rootListening) {
  auto sleep = std::chrono::milliseconds(5);
  int lastErr = 0;
  int attempts = 0;
  Clock::time_point firstRefusal{};  // of the current run of refusals; the epoch while there is none
  for (;;) {
    Fd fd(::socket(addr.family(), SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!fd.valid()) STRATA_THROW_SYS(who + ": socket()");
    ++attempts;
    lastErr = tryConnect(fd.get(), addr, deadline);
    if (lastErr == 0) {
      configureStream(fd.get());
      return fd;
    }
    // Refused / unreachable / reset are what a root that is not listening yet looks like: retry.
    // Anything else (bad address family, no permission) will not get better.
    bool transient = lastErr == ECONNREFUSED || lastErr == ETIMEDOUT || lastErr == EHOSTUNREACH ||
                     lastErr == ENETUNREACH || lastErr == ECONNRESET || lastErr == ECONNABORTED || lastErr == EAGAIN ||
                     lastErr == EADDRNOTAVAIL;
    if (!transient) throw SysError(who + ": connect to bootstrap root " + addr.str(), lastErr);
    if (lastErr != ECONNREFUSED) {
      firstRefusal = Clock::time_point{};
    } else if (firstRefusal == Clock::time_point{}) {
      firstRefusal = Clock::now();
    } else if (rootListening && Clock::now() - firstRefusal >= std::chrono::milliseconds(kRefusedGraceMs)) {
      throw RemoteError(strprintf(
          "%s: the bootstrap root %s refused %d connections over %d ms: its process has ended or destroyed it "
          "(the id was made by strataGetUniqueId, whose root listens before the id exists). An id from an "
          "earlier run or an earlier generation of the group?",
          who.c_str(), addr.str().c_str(), attempts, kRefusedGraceMs));
    }
    if (deadline.expired() || Clock::now() + sleep >= deadline.at) {
      throw TimeoutError(
          strprintf("%s: could not connect to bootstrap root %s before the deadline "
                    "(%d attempts, last error: %s); is the root running and reachable?",
                    who.c_str(), addr.str().c_str(), attempts, std::strerror(lastErr)));
    }
    std::this_thread::sleep_for(sleep);
    sleep = std::min(sleep * 2, std::chrono::milliseconds(200));
  }
}

IoStatus readFull(int fd, void* buf, size_t n, Deadline deadline) {
  auto* p = static_cast<uint8_t*>(buf);
  size_t done = 0;
  while (done < n) {
    ssize_t r = ::recv(fd, p + done, n - done, MSG_DONTWAIT);
    if (r > 0) {
      done += static_cast<size_t>(r);
      continue;
    }
    if (r == 0) return IoStatus::kEof;
    if (errno == EINTR) continue;
    if (errno == ECONNRESET || errno == EPIPE) return IoStatus::kEof;
    if (errno != EAGAIN && errno != EWOULDBLOCK) STRATA_THROW_SYS("bootstrap: recv");
    pollfd pfd{fd, POLLIN, 0};
    int pr = ::poll(&pfd, 1, deadline.pollMs());
    if (pr < 0 && errno != EINTR) STRATA_THROW_SYS("bootstrap: poll");
    if (pr == 0) return IoStatus::kTimeout;
  }
  return IoStatus::kOk;
}

IoStatus writeFull(int fd, const void* buf, size_t n, Deadline deadline) {
  const auto* p = static_cast<const uint8_t*>(buf);
  size_t done = 0;
  while (done < n) {
    ssize_t w = ::send(fd, p + done, n - done, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (w > 0) {
      done += static_cast<size_t>(w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EPIPE || errno == ECONNRESET)) return IoStatus::kEof;
    if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK) STRATA_THROW_SYS("bootstrap: send");
    pollfd pfd{fd, POLLOUT, 0};
    int pr = ::poll(&pfd, 1, deadline.pollMs());
    if (pr < 0 && errno != EINTR) STRATA_THROW_SYS("bootstrap: poll");
    if (pr == 0) return IoStatus::kTimeout;
  }
  return IoStatus::kOk;
}

size_t admission::maxStrangers() {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return 4096;
  return std::clamp<size_t>(static_cast<size_t>(rl.rlim_cur) / 4, 64, 4096);
}

}  // namespace strata::bootstrap_io
