#include "transport/tcp/tcp_socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "util/error.h"

namespace strata::tcp {

void Fd::reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

uint16_t SockAddr::port() const {
  if (family() == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&storage)->sin_port);
  if (family() == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_port);
  return 0;
}

void SockAddr::setPort(uint16_t port) {
  if (family() == AF_INET) reinterpret_cast<sockaddr_in*>(&storage)->sin_port = htons(port);
  if (family() == AF_INET6) reinterpret_cast<sockaddr_in6*>(&storage)->sin6_port = htons(port);
}

std::string SockAddr::str() const {
  char host[NI_MAXHOST];
  if (len == 0 || getnameinfo(sa(), len, host, sizeof(host), nullptr, 0, NI_NUMERICHOST) != 0) return "?";
  // (Built with strprintf: GCC 12 -O3 warns falsely on operator+ chains here.)
  return strprintf(family() == AF_INET6 ? "[%s]:%u" : "%s:%u", host, static_cast<unsigned>(port()));
}

SockAddr numericAddress(const std::string& hostIn, uint16_t port) {
  std::string host = hostIn;
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &res);
  if (rc != 0 || res == nullptr) {
    throw InvalidArgument("not a numeric IPv4/IPv6 address: '" + hostIn + "' (" + gai_strerror(rc) + ")");
  }
  SockAddr a;
  std::memcpy(&a.storage, res->ai_addr, res->ai_addrlen);
  a.len = res->ai_addrlen;
  freeaddrinfo(res);
  return a;
}

SockAddr parseHostPort(const std::string& hostPort) {
  size_t colon = hostPort.rfind(':');
  if (colon == std::string::npos || colon + 1 >= hostPort.size()) {
    throw InvalidArgument("not a host:port address: '" + hostPort + "'");
  }
  const std::string portStr = hostPort.substr(colon + 1);
  if (portStr.size() > 5 || portStr.find_first_not_of("0123456789") != std::string::npos) {
    throw InvalidArgument("bad port in address '" + hostPort + "'");
  }
  unsigned long port = std::stoul(portStr);
  if (port == 0 || port > 65535) throw InvalidArgument("bad port in address '" + hostPort + "'");
  return numericAddress(hostPort.substr(0, colon), static_cast<uint16_t>(port));
}

static std::string sockName(int fd, bool peer) {
  SockAddr a;
  a.len = sizeof(a.storage);
  sockaddr* sa = reinterpret_cast<sockaddr*>(&a.storage);
  if ((peer ? getpeername(fd, sa, &a.len) : getsockname(fd, sa, &a.len)) != 0) return "?";
  return a.str();
}
std::string localName(int fd) { return sockName(fd, false); }
std::string peerName(int fd) { return sockName(fd, true); }

int msLeft(Clock::time_point deadline, int cap) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  if (left <= 0) return 0;
  return static_cast<int>(std::min<long long>(left, cap));
}

// Waits until `fd` has `events` or the deadline passes; returns false on timeout.
static bool waitFor(int fd, short events, Clock::time_point deadline) {
  while (true) {
    if (Clock::now() >= deadline) return false;
    pollfd p{fd, events, 0};
    int rc = ::poll(&p, 1, std::max(1, msLeft(deadline)));
    if (rc > 0) return true;
    if (rc < 0 && errno != EINTR) STRATA_THROW_SYS("poll");
  }
}

void setNoDelay(int fd) {
  int one = 1;
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0) STRATA_THROW_SYS("setsockopt(TCP_NODELAY)");
}

Fd connectBefore(const SockAddr& to, Clock::time_point deadline, const std::string& what) {
  Fd fd(::socket(to.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd) STRATA_THROW_SYS("socket() for " + what);
  setNoDelay(fd.get());
  if (::connect(fd.get(), to.sa(), to.len) != 0) {
    if (errno != EINPROGRESS && errno != EINTR) throw SysError("connect to " + to.str() + " for " + what, errno);
    if (!waitFor(fd.get(), POLLOUT, deadline))
      throw TimeoutError("timed out connecting to " + to.str() + " for " + what);
    int err = 0;
    socklen_t len = sizeof(err);
    if (getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0) STRATA_THROW_SYS("getsockopt(SO_ERROR)");
    if (err != 0) throw SysError("connect to " + to.str() + " for " + what, err);
  }
  return fd;
}

void sendAllBefore(int fd, const void* data, size_t len, Clock::time_point deadline, const std::string& what) {
  const char* p = static_cast<const char*>(data);
  while (len > 0) {
    ssize_t n = ::send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      len -= static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!waitFor(fd, POLLOUT, deadline)) throw TimeoutError("timed out sending " + what);
      continue;
    }
    throw SysError("sending " + what, errno);
  }
}

void recvAllBefore(int fd, void* data, size_t len, Clock::time_point deadline, const std::string& what) {
  char* p = static_cast<char*>(data);
  while (len > 0) {
    ssize_t n = ::recv(fd, p, len, MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      len -= static_cast<size_t>(n);
      continue;
    }
    if (n == 0) throw RemoteError("connection closed while receiving " + what);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!waitFor(fd, POLLIN, deadline)) throw TimeoutError("timed out receiving " + what);
      continue;
    }
    throw SysError("receiving " + what, errno);
  }
}

}  // namespace strata::tcp
