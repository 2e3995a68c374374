// Small socket utilities for the TCP transport: numeric addresses, an owning fd, deadline-bound blocking
// helpers for setup. The data path uses raw non-blocking sendmsg/recvmsg on these fds.
#pragma once

#include <sys/socket.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

namespace strata::tcp {

using Clock = std::chrono::steady_clock;

/// An owned file descriptor, closed on destruction.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  ~Fd() { reset(); }
  int get() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }
  void reset();

 private:
  int fd_ = -1;
};

/// A socket address (IPv4 or IPv6).
struct SockAddr {
  sockaddr_storage storage{};
  socklen_t len = 0;
  const sockaddr* sa() const { return reinterpret_cast<const sockaddr*>(&storage); }
  int family() const { return storage.ss_family; }
  uint16_t port() const;
  void setPort(uint16_t port);
  /// "1.2.3.4:5" or "[fe80::1%eth0]:5".
  std::string str() const;
};

/// Parses a numeric host ("10.0.0.1", "::1", "fe80::1%eth0", "[::1]") and a port; throws InvalidArgument.
SockAddr numericAddress(const std::string& host, uint16_t port);
/// Parses "host:port" as written by SockAddr::str(); throws InvalidArgument.
SockAddr parseHostPort(const std::string& hostPort);
/// The local or remote address of a connected socket ("?" when unknown).
std::string localName(int fd);
std::string peerName(int fd);

/// Milliseconds left until `deadline`, at least 0, at most `cap`.
int msLeft(Clock::time_point deadline, int cap = 1000);

/// Makes a non-blocking stream socket (TCP_NODELAY, close-on-exec) and connects it to `to` before
/// `deadline`; throws SysError / TimeoutError describing `what`.
Fd connectBefore(const SockAddr& to, Clock::time_point deadline, const std::string& what);
/// Writes or reads exactly `len` bytes on a non-blocking socket before `deadline`; throws on EOF, errors
/// and timeout, describing `what`.
void sendAllBefore(int fd, const void* data, size_t len, Clock::time_point deadline, const std::string& what);
void recvAllBefore(int fd, void* data, size_t len, Clock::time_point deadline, const std::string& what);
/// Sets TCP_NODELAY (small messages must not wait for Nagle).
void setNoDelay(int fd);

}  // namespace strata::tcp
