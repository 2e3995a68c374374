// TCP transport: Config::nsocks sockets per peer, message i travelling on socket i % nsocks.
//
// Setup: the higher rank of the pair listens on an ephemeral port of exchange.localAddress() and sends
// "host:port" through the exchange; the lower rank connects nsocks sockets. The listener sends a random
// challenge on each accepted socket and keeps it only if the answer (a Hello, see tcp_auth.h) carries a MAC
// keyed by the job secret, the right communicator, ranks, tag and an unused socket index; anything else is
// closed and the listener keeps waiting until the deadline. It then tells the connecting rank through the
// exchange whether setup succeeded, so both sides fail together.
//
// Data path (every call non-blocking): on the wire a message is a 32-byte header {size, seq, stamp} followed by the
// payload. The sender owns nslots staging buffers; sendCommit queues one and tries to write it right away,
// progress() writes the rest (sendmsg, gathering every queued message of a socket). The receiver owns nslots
// receive buffers and reads ahead into all free ones (recvmsg scattering a payload and the next header), so
// a peer is never held back by our kernel buffers while we are busy elsewhere.
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "bootstrap/peer_exchange.h"
#include "bootstrap/socket_io.h"
#include "transport/connect_check.h"
#include "transport/staging_buffer.h"
#include "transport/tcp/tcp_auth.h"
#include "transport/tcp/tcp_socket.h"
#include "transport/transport.h"
#include "util/config.h"
#include "util/error.h"
#include "util/log.h"
#include "util/sys.h"

namespace strata {
namespace tcp {
namespace {

struct MsgHeader {
  uint64_t size;
  uint64_t seq;
  MsgStamp stamp;  // the call the message belongs to
};
static_assert(sizeof(MsgHeader) == 32, "the wire header has no padding");
constexpr size_t kHdr = sizeof(MsgHeader);
constexpr int kMaxIov = 64;
constexpr int kCloseFlushMs = 2000;
constexpr int kSetupPollMs = 50;  // how often a listener in set-up looks for an abort

enum Verdict : uint8_t { kVerdictFailed = 0, kVerdictOk = 1, kVerdictInvalidUsage = 2 };

class TcpConnection final : public Connection {
 public:
  TcpConnection(std::vector<Fd> fds, int me, int peer, std::string peerAddr, const Config& config)
      : me_(me),
        peer_(peer),
        peerAddr_(std::move(peerAddr)),
        pieceBytes_(config.pieceBytes),
        stride_((config.pieceBytes + 63) / 64 * 64),
        nslots_(static_cast<uint64_t>(config.nslots)),
        nsocks_(static_cast<uint64_t>(fds.size())),
        sendBuf_(allocStagingBuffer(stride_ * nslots_, "TCP")),
        recvBuf_(allocStagingBuffer(stride_ * nslots_, "TCP")),
        sendHdr_(nslots_),
        recvHdr_(nslots_),
        sendDone_(nslots_, 0),
        recvReady_(nslots_, 0) {
    for (size_t i = 0; i < fds.size(); ++i) {
      Sock s;
      s.fd = std::move(fds[i]);
      s.sendMsg = s.recvMsg = i;
      socks_.push_back(std::move(s));
    }
  }

  ~TcpConnection() override {
    // Best effort: push out what was committed, for a short while, then close.
    const auto deadline = Clock::now() + std::chrono::milliseconds(kCloseFlushMs);
    try {
      while (true) {
        for (auto& s : socks_) flushSock(s);
        advanceSendTail();
        if (sendTail_ == sendHead_ || Clock::now() >= deadline) break;
        std::vector<pollfd> pfds;
        for (auto& s : socks_) {
          if (s.sendMsg < sendHead_) pfds.push_back({s.fd.get(), POLLOUT, 0});
        }
        ::poll(pfds.data(), pfds.size(), std::max(1, msLeft(deadline)));
      }
    } catch (const std::exception& e) {
      STRATA_INFO(kLogNet, "rank %d: dropping unsent messages to rank %d on close: %s", me_, peer_, e.what());
    }
  }

  bool addPollFds(std::vector<pollfd>& fds) override {
    for (auto& s : socks_) {
      short events = 0;
      if (s.err == 0 && !s.eof && s.recvMsg < recvHead_ + nslots_) events |= POLLIN;
      if (s.sendMsg < sendHead_) events |= POLLOUT;
      if (events) fds.push_back({s.fd.get(), events, 0});
    }
    return true;
  }

  void* trySendReserve(size_t bytes) override {
    if (bytes > pieceBytes_) {
      throw InternalError(strprintf("rank %d: a %zu-byte message to rank %d exceeds STRATA_PIECE_BYTES=%zu", me_, bytes,
                                    peer_, pieceBytes_));
    }
    if (sendHead_ - sendTail_ >= nslots_) {
      for (auto& s : socks_) flushSock(s);
      advanceSendTail();
      if (sendHead_ - sendTail_ >= nslots_) return nullptr;
    }
    reserved_ = true;
    return sendPayload(sendHead_ % nslots_);
  }

  void sendCommit(size_t bytes, const MsgStamp& stamp) override {
    if (!reserved_ || bytes > pieceBytes_) {
      throw InternalError(
          strprintf("rank %d: sendCommit(%zu) to rank %d without a matching trySendReserve", me_, bytes, peer_));
    }
    reserved_ = false;
    const uint64_t slot = sendHead_ % nslots_;
    sendHdr_[slot] = MsgHeader{bytes, sendHead_, stamp};
    sendDone_[slot] = 0;
    Sock& s = socks_[sendHead_ % nsocks_];
    ++sendHead_;
    // Start writing now: the executor may not call progress() before it next needs this peer.
    flushSock(s);
    advanceSendTail();
  }

  const void* tryRecvPeek(size_t bytes, const MsgStamp& expected) override {
    const uint64_t slot = recvHead_ % nslots_;
    if (!recvReady_[slot]) {
      Sock& s = socks_[recvHead_ % nsocks_];
      readSock(s);
      if (!recvReady_[slot]) {
        if (s.err != 0 || s.eof) throwBroken(s);
        return nullptr;
      }
    }
    if (recvHdr_[slot].stamp != expected) [[unlikely]]
      throw StampMismatch(me_, peer_, expected, recvHdr_[slot].stamp);
    const uint64_t size = recvHdr_[slot].size;
    if (size != bytes) {
      throw InvalidUsage(
          strprintf("rank %d expected a %zu-byte message from rank %d but got %llu bytes: the ranks run "
                    "the same call with different plans (is STRATA_ALGO, STRATA_PIECE_BYTES or STRATA_NSLOTS set "
                    "differently?)",
                    me_, bytes, peer_, static_cast<unsigned long long>(size)));
    }
    return recvPayload(slot);
  }

  Head peekStamp(MsgStamp* stamp) override {
    const uint64_t slot = recvHead_ % nslots_;
    Sock& s = socks_[recvHead_ % nsocks_];  // message m travels on socket m % nsocks
    if (!recvReady_[slot]) readSock(s);
    if (recvReady_[slot] || (s.recvMsg == recvHead_ && s.recvGot >= kHdr)) {
      *stamp = recvHdr_[slot].stamp;
      return Head::kArrived;
    }
    if (s.err != 0) throwBroken(s);
    return s.eof ? Head::kClosed : Head::kEmpty;
  }

  void recvRelease() override {
    const uint64_t slot = recvHead_ % nslots_;
    if (!recvReady_[slot]) {
      throw InternalError(strprintf("rank %d: recvRelease from rank %d without a message", me_, peer_));
    }
    recvReady_[slot] = 0;
    ++recvHead_;
  }

  bool progress() override {
    bool moved = false;
    for (auto& s : socks_) moved |= flushSock(s);
    advanceSendTail();
    for (auto& s : socks_) {
      moved |= readSock(s);
      if (s.err != 0) throwBroken(s);
    }
    return moved;
  }

  bool flushed() override { return sendTail_ == sendHead_; }

  void checkPeer() override {
    progress();
    // A close only matters once the socket that carries the next message has delivered all it had.
    const Sock& next = socks_[recvHead_ % nsocks_];
    if (next.eof && !recvReady_[recvHead_ % nslots_]) throwBroken(next);
  }

  int peer() const override { return peer_; }
  const char* kind() const override { return "tcp"; }

 private:
  struct Sock {
    Fd fd;
    uint64_t sendMsg = 0;  // next message this socket writes
    size_t sendOff = 0;    // bytes of it (header + payload) already written
    uint64_t recvMsg = 0;  // next message this socket reads
    size_t recvGot = 0;    // bytes of it already read
    bool eof = false;
    int err = 0;
  };

  char* sendPayload(uint64_t slot) { return sendBuf_.get() + slot * stride_; }
  char* recvPayload(uint64_t slot) { return recvBuf_.get() + slot * stride_; }

  [[noreturn]] void throwBroken(const Sock& s) const {
    if (s.err != 0) {
      throw RemoteError(strprintf("rank %d: connection to rank %d (%s) failed: %s: peer exited?", me_, peer_,
                                  peerAddr_.c_str(), std::strerror(s.err)));
    }
    throw RemoteError(
        strprintf("rank %d: connection to rank %d (%s) closed: peer exited?", me_, peer_, peerAddr_.c_str()));
  }

  void advanceSendTail() {
    while (sendTail_ < sendHead_ && sendDone_[sendTail_ % nslots_]) ++sendTail_;
  }

  // Writes as much of this socket's queue as the kernel takes. Returns true if any byte moved.
  bool flushSock(Sock& s) {
    bool moved = false;
    while (s.sendMsg < sendHead_) {
      iovec iov[kMaxIov];
      int n = 0;
      size_t want = 0;
      size_t off = s.sendOff;
      for (uint64_t m = s.sendMsg; m < sendHead_ && n + 2 <= kMaxIov; m += nsocks_) {
        const uint64_t slot = m % nslots_;
        if (off < kHdr) {
          iov[n++] = {reinterpret_cast<char*>(&sendHdr_[slot]) + off, kHdr - off};
          off = kHdr;
        }
        const size_t size = sendHdr_[slot].size, poff = off - kHdr;
        if (size > poff) iov[n++] = {sendPayload(slot) + poff, size - poff};
        off = 0;
      }
      for (int i = 0; i < n; ++i) want += iov[i].iov_len;
      msghdr mh{};
      mh.msg_iov = iov;
      mh.msg_iovlen = static_cast<size_t>(n);
      ssize_t r = ::sendmsg(s.fd.get(), &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (r < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) break;
        s.err = errno;
        throwBroken(s);
      }
      moved = true;
      size_t left = static_cast<size_t>(r);
      while (left > 0) {
        const uint64_t slot = s.sendMsg % nslots_;
        const size_t rest = kHdr + sendHdr_[slot].size - s.sendOff;
        if (left < rest) {
          s.sendOff += left;
          break;
        }
        left -= rest;
        sendDone_[slot] = 1;
        s.sendMsg += nsocks_;
        s.sendOff = 0;
      }
      if (static_cast<size_t>(r) < want) break;  // the kernel buffer is full
    }
    return moved;
  }

  // Reads whatever has arrived on this socket into free receive buffers. Returns true if any byte moved.
  // EOF and errors are recorded in the socket and reported when a message from it is needed.
  bool readSock(Sock& s) {
    bool moved = false;
    while (s.err == 0 && !s.eof && s.recvMsg < recvHead_ + nslots_) {
      const uint64_t slot = s.recvMsg % nslots_;
      iovec iov[2];
      int n = 0;
      if (s.recvGot < kHdr) {
        iov[n++] = {reinterpret_cast<char*>(&recvHdr_[slot]) + s.recvGot, kHdr - s.recvGot};
      } else {
        const size_t poff = s.recvGot - kHdr;
        iov[n++] = {recvPayload(slot) + poff, recvHdr_[slot].size - poff};
        const uint64_t next = s.recvMsg + nsocks_;
        if (next < recvHead_ + nslots_) iov[n++] = {&recvHdr_[next % nslots_], kHdr};
      }
      const size_t want = iov[0].iov_len + (n > 1 ? iov[1].iov_len : 0);
      msghdr mh{};
      mh.msg_iov = iov;
      mh.msg_iovlen = static_cast<size_t>(n);
      ssize_t r = ::recvmsg(s.fd.get(), &mh, MSG_DONTWAIT);
      if (r < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) break;
        s.err = errno;
        break;
      }
      if (r == 0) {
        if (s.recvGot != 0) {
          throw RemoteError(
              strprintf("rank %d: connection to rank %d (%s) closed in the middle of a message: peer "
                        "exited?",
                        me_, peer_, peerAddr_.c_str()));
        }
        s.eof = true;
        break;
      }
      moved = true;
      consume(s, static_cast<size_t>(r));
      if (static_cast<size_t>(r) < want) break;  // drained
    }
    return moved;
  }

  // Accounts `r` freshly read bytes to the socket's current message (and the next header).
  void consume(Sock& s, size_t r) {
    while (true) {
      const uint64_t slot = s.recvMsg % nslots_;
      MsgHeader& h = recvHdr_[slot];
      if (s.recvGot < kHdr) {
        const size_t take = std::min(r, kHdr - s.recvGot);
        s.recvGot += take;
        r -= take;
        if (s.recvGot < kHdr) return;
        if (h.seq != s.recvMsg || h.size > pieceBytes_) {
          throw RemoteError(
              strprintf("rank %d: corrupted stream from rank %d (%s): message %llu has sequence "
                        "%llu and size %llu",
                        me_, peer_, peerAddr_.c_str(), static_cast<unsigned long long>(s.recvMsg),
                        static_cast<unsigned long long>(h.seq), static_cast<unsigned long long>(h.size)));
        }
      }
      const size_t total = kHdr + h.size;
      const size_t take = std::min(r, total - s.recvGot);
      s.recvGot += take;
      r -= take;
      if (s.recvGot < total) return;
      recvReady_[slot] = 1;
      s.recvMsg += nsocks_;
      s.recvGot = 0;
      if (r == 0) return;
    }
  }

  int me_, peer_;
  std::string peerAddr_;
  size_t pieceBytes_, stride_;
  uint64_t nslots_, nsocks_;
  StagingBuffer sendBuf_, recvBuf_;
  std::vector<MsgHeader> sendHdr_, recvHdr_;
  std::vector<uint8_t> sendDone_, recvReady_;
  std::vector<Sock> socks_;
  uint64_t sendHead_ = 0;  // messages committed
  uint64_t sendTail_ = 0;  // messages fully written (their staging buffers are free)
  bool reserved_ = false;
  uint64_t recvHead_ = 0;  // next message to deliver
};

// ---- setup ------------------------------------------------------------------------------------------

struct PendingSocket {
  Fd fd;
  Clock::time_point accepted = Clock::now();
  std::string from;
  uint8_t challenge[kChallengeBytes];
  Hello hello;
  size_t got = 0;
};

// Accepts nsocks authenticated sockets from `peer` on `listener`. Returns them by socket index. Strangers (sockets
// that have not sent a valid hello) are kept as the bootstrap root keeps them (bootstrap/socket_io.h, admission):
// each for a few seconds, at most kMaxStrangers at once, the oldest dropped for a newcomer only once it had its
// chance to answer, so a flood of connections cannot push the real peer's sockets out.
std::vector<Fd> acceptPeer(const Fd& listener, const std::string& listenAddr, const PeerExchange& exchange,
                           const Config& config, int peer, uint32_t tag, Clock::time_point deadline) {
  const int me = exchange.rank();
  const size_t nsocks = static_cast<size_t>(config.nsocks);
  std::vector<Fd> socks(nsocks);
  size_t have = 0;
  std::deque<PendingSocket> pending;
  std::string lastRefusal;
  namespace adm = bootstrap_io::admission;
  const size_t maxStrangers = adm::maxStrangers();
  Clock::time_point acceptPause = Clock::time_point::min();  // the listener is not polled until then

  auto refuse = [&](PendingSocket& p, const std::string& why) {
    lastRefusal = "refused " + p.from + ": " + why;
    STRATA_WARN(kLogNet, "rank %d: tcp listener %s %s", me, listenAddr.c_str(), lastRefusal.c_str());
    p.fd.reset();
  };

  while (have < nsocks) {
    exchange.throwIfCancelled();
    if (Clock::now() >= deadline) {
      throw TimeoutError(
          strprintf("rank %d: rank %d connected %zu of %zu tcp sockets to %s within "
                    "STRATA_TIMEOUT_MS=%lld%s%s",
                    me, peer, have, nsocks, listenAddr.c_str(), static_cast<long long>(config.timeoutMs),
                    lastRefusal.empty() ? "" : "; last ", lastRefusal.c_str()));
    }
    // Strangers past their own deadline go.
    const auto now = Clock::now();
    for (auto& p : pending) {
      if (now - p.accepted >= std::chrono::milliseconds(adm::kHelloDeadlineMs))
        refuse(p, strprintf("no hello within %lld ms", static_cast<long long>(adm::kHelloDeadlineMs)));
    }
    pending.erase(std::remove_if(pending.begin(), pending.end(), [](const PendingSocket& p) { return !p.fd; }),
                  pending.end());
    Clock::time_point wake = deadline;
    if (!pending.empty())
      wake = std::min(wake, pending.front().accepted + std::chrono::milliseconds(adm::kHelloDeadlineMs));
    if (acceptPause > now) wake = std::min(wake, acceptPause);
    std::vector<pollfd> pfds;
    pfds.push_back({listener.get(), static_cast<short>(acceptPause > now ? 0 : POLLIN), 0});
    for (auto& p : pending) pfds.push_back({p.fd.get(), POLLIN, 0});
    int rc = ::poll(pfds.data(), pfds.size(), std::max(1, msLeft(wake, kSetupPollMs)));
    if (rc < 0) {
      if (errno == EINTR) continue;
      STRATA_THROW_SYS("poll on the tcp listener");
    }
    // Hellos on pending sockets.
    for (size_t i = 0; i < pending.size(); ++i) {
      if (pfds[i + 1].revents == 0) continue;
      PendingSocket& p = pending[i];
      ssize_t r = ::recv(p.fd.get(), reinterpret_cast<char*>(&p.hello) + p.got, sizeof(Hello) - p.got, MSG_DONTWAIT);
      if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
      if (r <= 0) {
        refuse(p, r == 0 ? "closed before its hello" : std::strerror(errno));
        continue;
      }
      p.got += static_cast<size_t>(r);
      if (p.got < sizeof(Hello)) continue;
      const Hello& h = p.hello;
      if (h.magic != kHelloMagic) {
        refuse(p, "not a Strata hello");
      } else if (helloMac(exchange.secret(), p.challenge, h) != h.mac) {
        refuse(p, "wrong MAC (not started with this job's unique id / secret)");
      } else if (h.commId != exchange.commId() || h.fromRank != peer || h.toRank != me || h.tag != tag) {
        refuse(p, strprintf("hello for communicator %016llx rank %d -> %d tag %u",
                            static_cast<unsigned long long>(h.commId), h.fromRank, h.toRank, h.tag));
      } else if (h.nsocks != nsocks || h.nslots != static_cast<uint32_t>(config.nslots) ||
                 h.pieceBytes != config.pieceBytes) {
        throw InvalidUsage(
            strprintf("rank %d has STRATA_NSOCKS=%zu STRATA_NSLOTS=%d STRATA_PIECE_BYTES=%zu but rank %d "
                      "has %u, %u and %llu: every rank needs the same settings",
                      me, nsocks, config.nslots, config.pieceBytes, peer, h.nsocks, h.nslots,
                      static_cast<unsigned long long>(h.pieceBytes)));
      } else if (h.sockIndex >= nsocks || socks[h.sockIndex]) {
        refuse(p, strprintf("bad or repeated socket index %u", h.sockIndex));
      } else {
        socks[h.sockIndex] = std::move(p.fd);
        ++have;
      }
    }
    pending.erase(std::remove_if(pending.begin(), pending.end(), [](const PendingSocket& p) { return !p.fd; }),
                  pending.end());
    // New connections: challenge each.
    if (pfds[0].revents != 0) {
      while (true) {
        if (pending.size() >= maxStrangers) {
          // Full: the oldest stranger goes if it had its chance to answer, else newcomers wait in the backlog.
          if (Clock::now() - pending.front().accepted < std::chrono::milliseconds(adm::kHelloChanceMs)) {
            acceptPause = Clock::now() + std::chrono::milliseconds(adm::kAcceptPauseMs);
            break;
          }
          refuse(pending.front(), strprintf("no hello while %zu other connections waited", pending.size() - 1));
          pending.pop_front();
        }
        int fd = ::accept4(listener.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
          if (errno == EINTR || errno == ECONNABORTED) continue;
          if (errno == EAGAIN || errno == EWOULDBLOCK) break;
          STRATA_THROW_SYS(strprintf("rank %d: accept on tcp listener %s", me, listenAddr.c_str()));
        }
        PendingSocket p;
        p.fd = Fd(fd);
        // Accepted sockets need TCP_NODELAY too: without it Nagle holds a small message back until the
        // peer's delayed ACK (up to 40 ms) whenever an earlier one is still unacknowledged.
        setNoDelay(fd);
        p.from = peerName(fd);
        fillRandom(p.challenge, sizeof(p.challenge));
        if (::send(fd, p.challenge, sizeof(p.challenge), MSG_NOSIGNAL | MSG_DONTWAIT) !=
            static_cast<ssize_t>(sizeof(p.challenge))) {
          continue;  // a fresh socket takes 16 bytes; if not, it is not worth keeping
        }
        pending.push_back(std::move(p));
      }
    }
  }
  return socks;
}

std::vector<Fd> listenSide(PeerExchange& exchange, const Config& config, int peer, uint32_t tag,
                           Clock::time_point deadline, std::string& peerAddr) {
  const int me = exchange.rank();
  SockAddr local = numericAddress(exchange.localAddress(), 0);
  Fd listener(::socket(local.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!listener) STRATA_THROW_SYS(strprintf("rank %d: socket() for the tcp listener for rank %d", me, peer));
  if (::bind(listener.get(), local.sa(), local.len) != 0) {
    throw SysError(strprintf("rank %d: bind tcp listener to %s", me, local.str().c_str()), errno);
  }
  if (::listen(listener.get(), SOMAXCONN) != 0) STRATA_THROW_SYS(strprintf("rank %d: listen", me));
  const std::string listenAddr = localName(listener.get());
  exchange.send(peer, tag, listenAddr.data(), listenAddr.size());

  std::vector<uint8_t> verdict;
  std::vector<Fd> socks;
  try {
    socks = acceptPeer(listener, listenAddr, exchange, config, peer, tag, deadline);
  } catch (const std::exception& e) {
    // Tell the connecting rank, so it fails now instead of at its own deadline.
    verdict.push_back(dynamic_cast<const InvalidUsage*>(&e) ? kVerdictInvalidUsage : kVerdictFailed);
    const std::string why = e.what();
    verdict.insert(verdict.end(), why.begin(), why.end());
    exchange.send(peer, tag, verdict.data(), verdict.size());
    throw;
  }
  verdict.push_back(kVerdictOk);
  exchange.send(peer, tag, verdict.data(), verdict.size());
  peerAddr = peerName(socks[0].get());
  return socks;
}

std::vector<Fd> connectSide(PeerExchange& exchange, const Config& config, int peer, uint32_t tag,
                            Clock::time_point deadline, std::string& peerAddr) {
  const int me = exchange.rank();
  std::vector<uint8_t> addrBytes = exchange.recv(peer, tag);
  peerAddr.assign(addrBytes.begin(), addrBytes.end());
  const SockAddr to = parseHostPort(peerAddr);
  const std::string what = strprintf("the tcp connection from rank %d to rank %d (%s)", me, peer, peerAddr.c_str());
  std::vector<Fd> socks;
  for (int i = 0; i < config.nsocks; ++i) {
    Fd fd = connectBefore(to, deadline, what);
    uint8_t challenge[kChallengeBytes];
    recvAllBefore(fd.get(), challenge, sizeof(challenge), deadline, "the challenge of " + what);
    Hello h{};
    h.magic = kHelloMagic;
    h.commId = exchange.commId();
    h.fromRank = me;
    h.toRank = peer;
    h.tag = tag;
    h.sockIndex = static_cast<uint32_t>(i);
    h.nsocks = static_cast<uint32_t>(config.nsocks);
    h.nslots = static_cast<uint32_t>(config.nslots);
    h.pieceBytes = config.pieceBytes;
    h.mac = helloMac(exchange.secret(), challenge, h);
    sendAllBefore(fd.get(), &h, sizeof(h), deadline, "the hello of " + what);
    socks.push_back(std::move(fd));
  }
  std::vector<uint8_t> verdict = exchange.recv(peer, tag);
  if (verdict.empty() || verdict[0] != kVerdictOk) {
    const std::string why = verdict.size() > 1 ? std::string(verdict.begin() + 1, verdict.end()) : "no reason given";
    if (!verdict.empty() && verdict[0] == kVerdictInvalidUsage) throw InvalidUsage(why);
    throw RemoteError(strprintf("rank %d: rank %d refused %s: %s", me, peer, what.c_str(), why.c_str()));
  }
  return socks;
}

}  // namespace
}  // namespace tcp

std::unique_ptr<Connection> connectTcp(PeerExchange& exchange, const Config& config, int peer, uint32_t tag) {
  using namespace tcp;
  checkConnectRequest(exchange, config, peer, "tcp", {"STRATA_NSOCKS"});
  const int me = exchange.rank();
  const auto deadline = Clock::now() + std::chrono::milliseconds(std::max<int64_t>(1, config.timeoutMs));
  std::string peerAddr;
  std::vector<Fd> socks = me > peer ? listenSide(exchange, config, peer, tag, deadline, peerAddr)
                                    : connectSide(exchange, config, peer, tag, deadline, peerAddr);
  STRATA_INFO(kLogNet, "rank %d <-> rank %d: tcp connection to %s, %d sockets, %d slots of %zu bytes", me, peer,
              peerAddr.c_str(), config.nsocks, config.nslots, config.pieceBytes);
  return std::make_unique<TcpConnection>(std::move(socks), me, peer, std::move(peerAddr), config);
}

}  // namespace strata
