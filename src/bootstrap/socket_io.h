// Internal to the bootstrap: owned file descriptors, deadlines, addresses, and socket I/O that never
// blocks past a deadline. Every socket here is non-blocking and close-on-exec; waiting is done in
// poll() so that a deadline (or a shutdown() from another thread) always ends the wait.
#pragma once

#include <sys/socket.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace strata {

struct Config;

namespace bootstrap_io {

using Clock = std::chrono::steady_clock;

/// A point in time after which a wait gives up. never() waits without limit (only for threads that a
/// shutdown() wakes instead).
struct Deadline {
  Clock::time_point at = Clock::time_point::max();
  static Deadline in(int64_t ms) { return Deadline{Clock::now() + std::chrono::milliseconds(ms)}; }
  static Deadline never() { return Deadline{}; }
  bool isNever() const { return at == Clock::time_point::max(); }
  bool expired() const { return !isNever() && Clock::now() >= at; }
  /// Milliseconds left, rounded up, as poll() wants them: -1 for never, 0 once expired.
  int pollMs() const;
  Deadline earlier(const Deadline& o) const { return o.at < at ? o : *this; }
};

/// How a listener that strangers can reach (the bootstrap root, a tcp transport listener during connection set-up)
/// keeps them from starving it or the process: at most maxStrangers() accepted connections that have not
/// authenticated yet, each for at most kHelloDeadlineMs. A full listener makes room by dropping its oldest stranger
/// once that one has had kHelloChanceMs to answer (a real rank answers its challenge within milliseconds); while
/// every stranger is younger, new connections wait in the kernel's backlog (the listener pauses kAcceptPauseMs).
namespace admission {
inline constexpr int64_t kHelloDeadlineMs = 5000;
inline constexpr int64_t kHelloChanceMs = 200;
inline constexpr int64_t kAcceptPauseMs = 10;
/// A quarter of this process's open-file limit (RLIMIT_NOFILE), between 64 and 4096: strangers never take the
/// descriptors the job needs, and a flood from one process (which holds at most its own limit) rarely fills it.
size_t maxStrangers();
}  // namespace admission

/// An owned file descriptor (move-only); closes on destruction.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int f = fd_;
    fd_ = -1;
    return f;
  }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

/// A socket address with a printable form ("10.0.0.1:29500", "[fe80::1]:29500").
struct SockAddr {
  sockaddr_storage ss{};
  socklen_t len = 0;
  int family() const { return ss.ss_family; }
  uint16_t port() const;
  /// Numeric host only ("10.0.0.1", "fe80::1").
  std::string host() const;
  std::string str() const;
};

/// Address from the raw bytes a unique id carries (network order address, host order port).
SockAddr sockAddrFromRaw(uint8_t family, const uint8_t addr[16], uint16_t port);
/// Raw bytes of `a`'s address into `out` (16 bytes, zero padded for IPv4).
void sockAddrToRaw(const SockAddr& a, uint8_t* out);
/// Resolves a host name or numeric address (getaddrinfo, IPv4 preferred). `passive` allows an empty host
/// for "any". Throws InvalidArgument naming `what` if it does not resolve.
SockAddr resolveHost(const std::string& host, uint16_t port, bool passive, const std::string& what);
/// The numeric address of the local end of a connected socket.
SockAddr localAddressOf(int fd);
SockAddr peerAddressOf(int fd);

/// Address of the interface named `ifname` (IPv4 preferred). Throws InvalidArgument listing the
/// interfaces that exist when there is no such interface or it has no address.
std::string interfaceAddress(const std::string& ifname);
/// The address a root service advertises when the caller did not name one: STRATA_SOCKET_IFNAME's,
/// else the one the default route leaves from, else the first non-loopback interface, else 127.0.0.1.
std::string defaultAdvertiseAddress(const Config& config);

/// Sets the options every bootstrap TCP socket gets: non-blocking, TCP_NODELAY.
void configureStream(int fd);
/// True when a connected socket's local and peer addresses are the same: a connect to an unused local
/// port can be handed that port as its source and connect to itself. connectWithRetry treats it as refused.
bool isSelfConnected(int fd);
/// Connects to `addr`, retrying refused/unreachable attempts with short sleeps until `deadline` (the
/// root may not be listening yet). Throws TimeoutError with `who` and the last error when it runs out.
/// With `rootListening` (the root listened before its address was handed out) refusals for more than
/// kRefusedGraceMs mean nobody listens there any more: RemoteError at once, not a wait for the deadline.
Fd connectWithRetry(const SockAddr& addr, Deadline deadline, const std::string& who, bool rootListening = false);
/// How long a root that listened before its id existed may refuse connections before it counts as gone.
inline constexpr int kRefusedGraceMs = 1000;

enum class IoStatus { kOk, kEof, kTimeout };
/// Reads exactly `n` bytes. kEof when the peer closed (even mid-way); throws SysError on socket errors.
IoStatus readFull(int fd, void* buf, size_t n, Deadline deadline);
/// Writes all `n` bytes (MSG_NOSIGNAL: a dead peer is an error, not SIGPIPE). kEof if the peer is gone.
IoStatus writeFull(int fd, const void* buf, size_t n, Deadline deadline);

}  // namespace bootstrap_io
}  // namespace strata
