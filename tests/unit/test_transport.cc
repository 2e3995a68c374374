// Tests of the shm and tcp transports: two ranks as two threads (an in-process PeerExchange), or as two
// processes (a socketpair PeerExchange) where a rank must really die. Also the home of the transport suite
// (transport_suite.h), the tests every transport passes; test_ucx.cc instantiates it for ucx.
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "bootstrap/peer_exchange.h"
#include "transport/connect_check.h"
#include "transport/tcp/tcp_auth.h"
#include "transport/tcp/tcp_socket.h"
#include "transport/transport.h"
#include "transport_suite.h"
#include "util/config.h"
#include "util/error.h"
#ifdef STRATA_HAVE_UCX
#include "transport/ucx/ucx_api.h"
#endif

namespace strata {
namespace transport_suite {

void PrintTo(const TransportCase& c, std::ostream* os) {
  *os << c.kind << " nsocks=" << c.nsocks << " nslots=" << c.nslots << " pieceBytes=" << c.pieceBytes;
  if (c.kind == "ucx") *os << " UCX_TLS=" << (c.ucxTls ? c.ucxTls : "(unset)");
}

std::string caseName(const testing::TestParamInfo<TransportCase>& info) {
  const auto& c = info.param;
  std::string middle = "socks" + std::to_string(c.nsocks);
  if (c.kind == "ucx") {
    middle = c.ucxTls ? c.ucxTls : "default";
    for (char& ch : middle)
      if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return c.kind + "_" + middle + "_slots" + std::to_string(c.nslots) + "_piece" + std::to_string(c.pieceBytes);
}

void TransportTest::SetUp() {
  if (GetParam().kind != "ucx") return;
#ifdef STRATA_HAVE_UCX
  // A build with UCX's headers may run where libucp is missing.
  try {
    ucx::api();
  } catch (const Error& e) {
    GTEST_SKIP() << e.what();
  }
#endif
  ucxTls_.emplace("UCX_TLS", GetParam().ucxTls);
}

void TransportTest::TearDown() { ucxTls_.reset(); }

Config TransportTest::config() const {
  Config c;
  c.nsocks = GetParam().nsocks;
  c.nslots = GetParam().nslots;
  c.pieceBytes = GetParam().pieceBytes;
  c.timeoutMs = 20000;
  return c;
}

}  // namespace transport_suite

namespace {

using transport_suite::caseName;
using transport_suite::TransportCase;
using transport_suite::TransportTest;

using Clock = std::chrono::steady_clock;
constexpr auto kHangGuard = std::chrono::seconds(60);  // only turns a hang into a failure; never timing

uint64_t freshCommId() {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t base = (static_cast<uint64_t>(std::random_device{}()) << 32) ^ static_cast<uint64_t>(getpid());
  return base + (++counter << 20);
}

std::string commHex(uint64_t commId) {
  char buf[32];
  snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(commId));
  return buf;
}

// Names in /dev/shm that belong to a communicator.
std::vector<std::string> shmFilesOf(uint64_t commId) {
  std::vector<std::string> out;
  const std::string hex = commHex(commId);
  if (DIR* d = opendir("/dev/shm")) {
    while (dirent* e = readdir(d)) {
      std::string name = e->d_name;
      if (name.find("strata") != std::string::npos && name.find(hex) != std::string::npos) out.push_back(name);
    }
    closedir(d);
  }
  return out;
}

// ---- an in-process PeerExchange: ranks are threads --------------------------------------------------

struct Hub {
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::tuple<int, int, uint32_t>, std::deque<std::vector<uint8_t>>> boxes;  // (from, to, tag)
  /// Runs inside send(), before the message is delivered.
  std::function<void(int from, int to, uint32_t tag, const std::vector<uint8_t>&)> onSend;
  uint64_t commId = freshCommId();
};

class InProcessExchange : public PeerExchange {
 public:
  InProcessExchange(Hub& hub, int rank, int size, uint8_t secretByte = 7, std::string address = "127.0.0.1")
      : hub_(hub), rank_(rank), size_(size), address_(std::move(address)) {
    for (size_t i = 0; i < secret_.size(); ++i) secret_[i] = static_cast<uint8_t>(secretByte + i);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void send(int peer, uint32_t tag, const void* data, size_t len) override {
    std::vector<uint8_t> msg(static_cast<const uint8_t*>(data), static_cast<const uint8_t*>(data) + len);
    if (hub_.onSend) hub_.onSend(rank_, peer, tag, msg);
    std::lock_guard<std::mutex> lk(hub_.mu);
    hub_.boxes[{rank_, peer, tag}].push_back(std::move(msg));
    hub_.cv.notify_all();
  }
  std::vector<uint8_t> recv(int peer, uint32_t tag) override {
    std::unique_lock<std::mutex> lk(hub_.mu);
    auto& box = hub_.boxes[{peer, rank_, tag}];
    if (!hub_.cv.wait_for(lk, std::chrono::seconds(20), [&] { return !box.empty(); })) {
      throw TimeoutError(strprintf("test exchange: rank %d waited for rank %d tag %u", rank_, peer, tag));
    }
    auto msg = std::move(box.front());
    box.pop_front();
    return msg;
  }
  /// Test-only: a message if one is there.
  bool tryRecv(int peer, uint32_t tag) {
    std::lock_guard<std::mutex> lk(hub_.mu);
    auto& box = hub_.boxes[{peer, rank_, tag}];
    if (box.empty()) return false;
    box.pop_front();
    return true;
  }
  const std::array<uint8_t, 16>& secret() const override { return secret_; }
  std::string localAddress() const override { return address_; }
  uint64_t commId() const override { return hub_.commId; }

 private:
  Hub& hub_;
  int rank_, size_;
  std::string address_;
  std::array<uint8_t, 16> secret_{};
};

// ---- a PeerExchange over a socketpair: ranks are processes ------------------------------------------

class SocketPairExchange : public PeerExchange {
 public:
  SocketPairExchange(int fd, int rank, uint64_t commId) : fd_(fd), rank_(rank), commId_(commId) { secret_.fill(42); }
  int rank() const override { return rank_; }
  int size() const override { return 2; }
  void send(int, uint32_t tag, const void* data, size_t len) override {
    uint32_t hdr[2] = {tag, static_cast<uint32_t>(len)};
    writeAll(hdr, sizeof(hdr));
    writeAll(data, len);
  }
  std::vector<uint8_t> recv(int, uint32_t tag) override {
    while (pending_[tag].empty()) {
      uint32_t hdr[2];
      readAll(hdr, sizeof(hdr));
      std::vector<uint8_t> msg(hdr[1]);
      readAll(msg.data(), msg.size());
      pending_[hdr[0]].push_back(std::move(msg));
    }
    auto msg = std::move(pending_[tag].front());
    pending_[tag].pop_front();
    return msg;
  }
  const std::array<uint8_t, 16>& secret() const override { return secret_; }
  std::string localAddress() const override { return "127.0.0.1"; }
  uint64_t commId() const override { return commId_; }

 private:
  void writeAll(const void* p, size_t n) {
    const char* c = static_cast<const char*>(p);
    while (n > 0) {
      ssize_t r = ::write(fd_, c, n);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) throw RemoteError("test exchange: write failed");
      c += r;
      n -= static_cast<size_t>(r);
    }
  }
  void readAll(void* p, size_t n) {
    char* c = static_cast<char*>(p);
    while (n > 0) {
      pollfd pfd{fd_, POLLIN, 0};
      if (::poll(&pfd, 1, 20000) == 0) throw TimeoutError("test exchange: no message from the other process");
      ssize_t r = ::read(fd_, c, n);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) throw RemoteError("test exchange: the other process is gone");
      c += r;
      n -= static_cast<size_t>(r);
    }
  }
  int fd_, rank_;
  uint64_t commId_;
  std::array<uint8_t, 16> secret_{};
  std::map<uint32_t, std::deque<std::vector<uint8_t>>> pending_;
};

// ---- helpers ------------------------------------------------------------------------------------------

// Runs body(rank) on two threads; reports each rank's exception as a failure.
void runPair(const std::function<void(int)>& body) {
  std::string errors[2];
  std::thread threads[2];
  for (int r = 0; r < 2; ++r) {
    threads[r] = std::thread([&, r] {
      try {
        body(r);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

void checkNotStuck(Clock::time_point start, const char* what) {
  if (Clock::now() - start > kHangGuard) throw std::runtime_error(std::string("stuck: ") + what);
}

std::unique_ptr<Connection> connect(const std::string& kind, PeerExchange& ex, const Config& cfg, int peer,
                                    uint32_t tag = 1) {
  if (kind == "shm") return connectShm(ex, cfg, peer, tag);
  if (kind == "ucx") return connectUcx(ex, cfg, peer, tag);
  return connectTcp(ex, cfg, peer, tag);
}

uint8_t patternByte(int sender, uint64_t msg, size_t i) {
  return static_cast<uint8_t>(sender * 97 + msg * 131 + i * 7 + (i >> 8));
}
size_t messageSize(uint64_t k, size_t pieceBytes) {
  if (k % 7 == 0) return pieceBytes;
  if (k % 11 == 0) return 1;
  if (k % 13 == 0) return 0;
  uint64_t h = (k + 1) * 0x9e3779b97f4a7c15ull;
  return 1 + static_cast<size_t>((h >> 17) % pieceBytes);
}

// Polls until a message of `bytes` arrives; returns it (not yet released). With `into`, the receiver wants it there
// (tryRecvPeekInto: a reference is read straight into `into`).
const void* recvBlocking(Connection& c, size_t bytes, const MsgStamp& expect = {}, void* into = nullptr) {
  const auto start = Clock::now();
  while (true) {
    if (const void* p = into ? c.tryRecvPeekInto(into, bytes, expect) : c.tryRecvPeek(bytes, expect)) return p;
    c.progress();
    checkNotStuck(start, "receiving");
    std::this_thread::yield();
  }
}

void sendBlocking(Connection& c, const void* data, size_t bytes, const MsgStamp& stamp = {}) {
  const auto start = Clock::now();
  while (true) {
    if (void* p = c.trySendReserve(bytes)) {
      std::memcpy(p, data, bytes);
      c.sendCommit(bytes, stamp);
      return;
    }
    c.progress();
    checkNotStuck(start, "sending");
    std::this_thread::yield();
  }
}

void flushBlocking(Connection& c) {
  const auto start = Clock::now();
  while (!c.flushed()) {
    c.progress();
    checkNotStuck(start, "flushing");
    std::this_thread::yield();
  }
}

// A barrier over the exchange (tag 999).
void exchangeBarrier(PeerExchange& ex, int peer) {
  uint8_t b = 1;
  ex.send(peer, 999, &b, 1);
  ex.recv(peer, 999);
}

// ---- the transport suite (transport_suite.h), parameterized over transports -----------------------------

// Both directions at once, many messages of sizes 0 .. pieceBytes, checked for content and order.
TEST_P(TransportTest, StreamsBothWaysInOrder) {
  Hub hub;
  const Config cfg = config();
  const uint64_t n = cfg.pieceBytes >= 65536 ? 300 : 3000;
  runPair([&](int rank) {
    InProcessExchange ex(hub, rank, 2);
    const int peer = 1 - rank;
    auto conn = connect(GetParam().kind, ex, cfg, peer);
    EXPECT_EQ(conn->peer(), peer);
    EXPECT_STREQ(conn->kind(), GetParam().kind.c_str());
    uint64_t sent = 0, received = 0;
    const auto start = Clock::now();
    while (sent < n || received < n) {
      if (sent < n) {
        const size_t size = messageSize(sent, cfg.pieceBytes);
        if (auto* p = static_cast<uint8_t*>(conn->trySendReserve(size))) {
          for (size_t i = 0; i < size; ++i) p[i] = patternByte(rank, sent, i);
          conn->sendCommit(size, {});
          ++sent;
        }
      }
      if (received < n) {
        const size_t size = messageSize(received, cfg.pieceBytes);
        if (auto* p = static_cast<const uint8_t*>(conn->tryRecvPeek(size, {}))) {
          // Payloads are 64-byte aligned, except shm's small messages, which ride in the slot header's
          // cache line (16-byte aligned, after the size and ready words).
          const size_t align = GetParam().kind == "shm" && size <= 48 ? 16 : 64;
          EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % align, 0u) << "payload alignment, " << size << " bytes";
          size_t bad = size;
          for (size_t i = 0; i < size && bad == size; ++i) {
            if (p[i] != patternByte(peer, received, i)) bad = i;
          }
          if (bad != size)
            throw std::runtime_error(
                strprintf("message %llu differs at byte %zu", static_cast<unsigned long long>(received), bad));
          conn->recvRelease();
          ++received;
        }
      }
      conn->progress();
      checkNotStuck(start, "streaming");
    }
    flushBlocking(*conn);
    EXPECT_NO_THROW(conn->checkPeer());
    exchangeBarrier(ex, peer);
  });
}

// With a receiver that reads nothing, exactly nslots messages fit (tcp: at least nslots, the kernel buffers
// hold more). The receiver then gets all of them.
TEST_P(TransportTest, SenderCanCommitNslotsAheadOfTheReceiver) {
  Hub hub;
  const Config cfg = config();
  const bool isShm = GetParam().kind == "shm";
  std::atomic<int> committed{0};
  runPair([&](int rank) {
    InProcessExchange ex(hub, rank, 2);
    auto conn = connect(GetParam().kind, ex, cfg, 1 - rank);
    if (rank == 0) {
      int count = 0;
      const int limit = 4 * cfg.nslots + 8;
      while (count < limit) {
        auto* p = static_cast<uint8_t*>(conn->trySendReserve(cfg.pieceBytes));
        if (!p) {
          conn->progress();
          p = static_cast<uint8_t*>(conn->trySendReserve(cfg.pieceBytes));
          if (!p) break;
        }
        std::memset(p, count + 1, cfg.pieceBytes);
        conn->sendCommit(cfg.pieceBytes, {});
        ++count;
      }
      if (isShm) {
        EXPECT_EQ(count, cfg.nslots);
      } else {
        EXPECT_GE(count, cfg.nslots);
      }
      committed = count;
      uint8_t b = 1;
      ex.send(1, 5, &b, 1);
      // Keep the bytes moving until the receiver has them all.
      const auto start = Clock::now();
      while (!ex.tryRecv(1, 6)) {
        conn->progress();
        checkNotStuck(start, "waiting for the receiver");
        std::this_thread::yield();
      }
    } else {
      ex.recv(0, 5);
      for (int k = 0; k < committed; ++k) {
        auto* p = static_cast<const uint8_t*>(recvBlocking(*conn, cfg.pieceBytes));
        EXPECT_EQ(p[0], static_cast<uint8_t>(k + 1));
        EXPECT_EQ(p[cfg.pieceBytes - 1], static_cast<uint8_t>(k + 1));
        conn->recvRelease();
      }
      uint8_t b = 1;
      ex.send(0, 6, &b, 1);
    }
  });
}

// A message of another size than expected, larger or smaller, is a usage error that names both ranks and both
// sizes, and leaves the message in place.
TEST_P(TransportTest, SizeMismatchIsInvalidUsage) {
  Hub hub;
  const Config cfg = config();
  const size_t sent = std::min<size_t>(100, cfg.pieceBytes);
  runPair([&](int rank) {
    InProcessExchange ex(hub, rank, 2);
    auto conn = connect(GetParam().kind, ex, cfg, 1 - rank);
    if (rank == 1) {
      std::vector<uint8_t> data(sent, 3);
      sendBlocking(*conn, data.data(), data.size());
      flushBlocking(*conn);
    } else {
      for (const size_t expected : {sent + 1, sent - 1}) {
        const auto start = Clock::now();
        bool threw = false;
        while (!threw) {
          try {
            if (conn->tryRecvPeek(expected, {})) break;
          } catch (const InvalidUsage& e) {
            threw = true;
            EXPECT_NE(std::string(e.what()).find(strprintf("rank 0 expected a %zu-byte message from rank 1 but got "
                                                           "%zu bytes",
                                                           expected, sent)),
                      std::string::npos)
                << e.what();
          }
          conn->progress();
          checkNotStuck(start, "waiting for the mismatch");
        }
        EXPECT_TRUE(threw) << "expecting " << expected << " bytes";
      }
      auto* p = static_cast<const uint8_t*>(conn->tryRecvPeek(sent, {}));
      ASSERT_NE(p, nullptr);
      EXPECT_EQ(p[0], 3);
      conn->recvRelease();
    }
    exchangeBarrier(ex, 1 - rank);
  });
}

// Stamps travel with every message, inline or not, and a message of another call is refused before its size is
// looked at (the sizes differ here too: the stamp decides); the right stamp then takes it.
TEST_P(TransportTest, StampMismatchIsRefusedAndStampsTravel) {
  Hub hub;
  const Config cfg = config();
  const MsgStamp a{0x1234, 0xabcd}, b{0x1234, 0xabce};
  runPair([&](int rank) {
    InProcessExchange ex(hub, rank, 2);
    auto conn = connect(GetParam().kind, ex, cfg, 1 - rank);
    const std::vector<size_t> sizes{1, std::min<size_t>(32, cfg.pieceBytes), std::min<size_t>(33, cfg.pieceBytes),
                                    cfg.pieceBytes};
    if (rank == 1) {
      for (size_t i = 0; i < sizes.size(); ++i) {
        std::vector<uint8_t> data(sizes[i], static_cast<uint8_t>(i + 1));
        sendBlocking(*conn, data.data(), data.size(), MsgStamp{a.lo + i, a.hi});
      }
      flushBlocking(*conn);
    } else {
      for (size_t i = 0; i < sizes.size(); ++i) {
        const MsgStamp right{a.lo + i, a.hi}, wrong{b.lo + i, b.hi};
        const auto start = Clock::now();
        bool threw = false;
        while (!threw) {
          try {
            if (conn->tryRecvPeek(sizes[i] + 1, wrong)) break;
          } catch (const StampMismatch& e) {
            threw = true;
            EXPECT_EQ(e.peer, 1);
            EXPECT_EQ(e.expected, wrong);
            EXPECT_EQ(e.got, right);
          }
          conn->progress();
          checkNotStuck(start, "waiting for the stamp mismatch");
        }
        EXPECT_TRUE(threw) << "message " << i;
        auto* p = static_cast<const uint8_t*>(recvBlocking(*conn, sizes[i], right));
        EXPECT_EQ(p[0], i + 1);
        EXPECT_EQ(p[sizes[i] - 1], i + 1);
        conn->recvRelease();
      }
    }
    exchangeBarrier(ex, 1 - rank);
  });
}

// A peer that sends and then closes its end: what it sent arrives, then the next receive fails with a
// RemoteError naming it.
TEST_P(TransportTest, OrderlyCloseDeliversThenFails) {
  Hub hub;
  const Config cfg = config();
  runPair([&](int rank) {
    InProcessExchange ex(hub, rank, 2);
    auto conn = connect(GetParam().kind, ex, cfg, 1 - rank);
    // Rank 0 reads only after the close, so send no more than fits.
    const uint64_t count = std::min(2, cfg.nslots);
    if (rank == 1) {
      for (uint64_t v = 11; v < 11 + count; ++v) sendBlocking(*conn, &v, sizeof(v));
      conn.reset();
      exchangeBarrier(ex, 0);
    } else {
      exchangeBarrier(ex, 1);
      for (uint64_t want = 11; want < 11 + count; ++want) {
        uint64_t got = 0;
        std::memcpy(&got, recvBlocking(*conn, sizeof(got)), sizeof(got));
        EXPECT_EQ(got, want);
        conn->recvRelease();
      }
      try {
        recvBlocking(*conn, 8);
        ADD_FAILURE() << "receiving from a closed peer succeeded";
      } catch (const RemoteError& e) {
        EXPECT_NE(std::string(e.what()).find("rank 1"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("closed"), std::string::npos) << e.what();
      }
      EXPECT_THROW(conn->checkPeer(), RemoteError);
    }
  });
}

// Connections of one pair with different tags do not mix.
TEST_P(TransportTest, TagsSeparateConnections) {
  Hub hub;
  const Config cfg = config();
  runPair([&](int rank) {
    InProcessExchange ex(hub, rank, 2);
    auto a = connect(GetParam().kind, ex, cfg, 1 - rank, 10);
    auto b = connect(GetParam().kind, ex, cfg, 1 - rank, 20);
    uint32_t va = 100 + rank, vb = 200 + rank;
    sendBlocking(*a, &va, 4);
    sendBlocking(*b, &vb, 4);
    uint32_t got = 0;
    std::memcpy(&got, recvBlocking(*b, 4), 4);
    EXPECT_EQ(got, 200u + (1 - rank));
    b->recvRelease();
    std::memcpy(&got, recvBlocking(*a, 4), 4);
    EXPECT_EQ(got, 100u + (1 - rank));
    a->recvRelease();
    flushBlocking(*a);
    flushBlocking(*b);
    exchangeBarrier(ex, 1 - rank);
  });
}

// Empty messages are legal (the executor does not send them, but nothing breaks if it does).
TEST_P(TransportTest, ZeroByteMessages) {
  Hub hub;
  const Config cfg = config();
  runPair([&](int rank) {
    InProcessExchange ex(hub, rank, 2);
    auto conn = connect(GetParam().kind, ex, cfg, 1 - rank);
    const uint8_t five[5] = {1, 2, 3, 4, 5};
    for (int k = 0; k < 2 * cfg.nslots + 3; ++k) {
      const size_t size = k % 2 == 0 ? 0 : std::min<size_t>(5, cfg.pieceBytes);
      if (rank == 0) {
        sendBlocking(*conn, five, size);
      } else {
        auto* p = static_cast<const uint8_t*>(recvBlocking(*conn, size));
        EXPECT_EQ(std::memcmp(p, five, size), 0);
        conn->recvRelease();
      }
    }
    flushBlocking(*conn);
    exchangeBarrier(ex, 1 - rank);
  });
}

// Connections of one pair with different setup tags, and of two communicators, do not mix, with several messages
// in flight on each (as many as the slots allow: the receiver reads only after the sender has sent them).
TEST_P(TransportTest, ConnectionsAndCommunicatorsDoNotMix) {
  Hub hub1, hub2;
  const Config cfg = config();
  runPair([&](int rank) {
    InProcessExchange ex1(hub1, rank, 2), ex2(hub2, rank, 2);
    auto a = connect(GetParam().kind, ex1, cfg, 1 - rank, 10);
    auto b = connect(GetParam().kind, ex1, cfg, 1 - rank, 20);
    auto c = connect(GetParam().kind, ex2, cfg, 1 - rank, 10);  // same tag, another communicator
    const uint32_t rounds = 3, ahead = std::min<uint32_t>(rounds, static_cast<uint32_t>(cfg.nslots));
    auto sendRound = [&](uint32_t k) {
      uint32_t va = 100 + rank + 10 * k, vb = 200 + rank + 10 * k, vc = 300 + rank + 10 * k;
      sendBlocking(*c, &vc, 4);
      sendBlocking(*b, &vb, 4);
      sendBlocking(*a, &va, 4);
    };
    for (uint32_t k = 0; k < ahead; ++k) sendRound(k);
    for (uint32_t k = 0; k < rounds; ++k) {
      uint32_t got = 0;
      std::memcpy(&got, recvBlocking(*a, 4), 4);
      EXPECT_EQ(got, 100u + (1 - rank) + 10 * k);
      a->recvRelease();
      std::memcpy(&got, recvBlocking(*c, 4), 4);
      EXPECT_EQ(got, 300u + (1 - rank) + 10 * k);
      c->recvRelease();
      std::memcpy(&got, recvBlocking(*b, 4), 4);
      EXPECT_EQ(got, 200u + (1 - rank) + 10 * k);
      b->recvRelease();
      if (k + ahead < rounds) sendRound(k + ahead);
    }
    flushBlocking(*a);
    flushBlocking(*b);
    flushBlocking(*c);
    exchangeBarrier(ex1, 1 - rank);
  });
}

INSTANTIATE_TEST_SUITE_P(Transports, TransportTest,
                         testing::Values(TransportCase{"shm", 1, 4, 4096}, TransportCase{"shm", 1, 3, 3001},
                                         TransportCase{"shm", 1, 1, 64}, TransportCase{"tcp", 1, 4, 4096},
                                         TransportCase{"tcp", 3, 4, 4096}, TransportCase{"tcp", 3, 2, 3001},
                                         TransportCase{"tcp", 2, 1, 64}),
                         caseName);

// ---- the factories' check (connect_check.h) ------------------------------------------------------------------

// Every factory refuses, before any set-up, a peer that is not another rank and a slot geometry the config table
// refuses (a Config set in code rather than parsed), naming the rank, the peer, the variable and the value. The
// test hook lets smaller geometries through, down to one slot of one byte but never less.
TEST(TransportCheck, WhatTheConfigTableRefusesIsInvalidArgument) {
  Hub hub;
  InProcessExchange ex(hub, 0, 2);
  std::vector<std::string> kinds{"shm", "tcp"};
#ifdef STRATA_HAVE_UCX
  kinds.push_back("ucx");
#endif
  auto expectRefused = [&](const std::string& kind, const Config& cfg, int peer, const std::string& message) {
    try {
      connect(kind, ex, cfg, peer);
      ADD_FAILURE() << kind << " connected; expected: " << message;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  };
  struct Refused {
    std::function<void(Config&)> set;
    std::string message;
  };
  const std::vector<Refused> refused{
      {[](Config& c) { c.nslots = 1; }, "STRATA_NSLOTS=1 is out of range [2, 1024]"},
      {[](Config& c) { c.nslots = 1025; }, "STRATA_NSLOTS=1025 is out of range [2, 1024]"},
      {[](Config& c) { c.pieceBytes = 64; }, "STRATA_PIECE_BYTES=64 is out of range [256, 67108864]"},
      {[](Config& c) { c.pieceBytes = size_t{1} << 36; },
       "STRATA_PIECE_BYTES=68719476736 is out of range [256, 67108864]"},
      {[](Config& c) { c.pieceBytes = 3001; }, "STRATA_PIECE_BYTES=3001 is not a multiple of 64"},
  };
  for (const std::string& kind : kinds) {
    expectRefused(kind, Config{}, 0, "rank 0: no " + kind + " connection possible to rank 0 of 2");
    expectRefused(kind, Config{}, 2, "rank 0: no " + kind + " connection possible to rank 2 of 2");
    for (const Refused& r : refused) {
      Config cfg;
      r.set(cfg);
      expectRefused(kind, cfg, 1, "rank 0: no " + kind + " connection to rank 1: " + r.message);
    }
  }
  Config manySockets;
  manySockets.nsocks = 65;
  expectRefused("tcp", manySockets, 1, "rank 0: no tcp connection to rank 1: STRATA_NSOCKS=65 is out of range [1, 64]");

  AnySlotGeometryForTesting anyGeometry;
  for (const std::string& kind : kinds) {
    Config noSlots, emptyPieces;
    noSlots.nslots = 0;
    emptyPieces.pieceBytes = 0;
    expectRefused(kind, noSlots, 1, "STRATA_NSLOTS=0: a connection has at least one slot");
    expectRefused(kind, emptyPieces, 1, "STRATA_PIECE_BYTES=0: a piece has at least one byte");
  }
}

// ---- shm specifics --------------------------------------------------------------------------------------

// Segments are 0600 while they exist, and nothing is left in /dev/shm once the connection is set up.
TEST(ShmTransport, SegmentsArePrivateAndUnlinkedAfterSetup) {
  Hub hub;
  std::mutex mu;
  std::vector<std::string> names;
  std::vector<unsigned> modes;
  hub.onSend = [&](int, int, uint32_t, const std::vector<uint8_t>& msg) {
    std::string name(msg.begin(), msg.end());
    if (name.rfind("/strata-", 0) != 0) return;
    int fd = shm_open(name.c_str(), O_RDONLY, 0);
    std::lock_guard<std::mutex> lk(mu);
    names.push_back(name);
    if (fd < 0) {
      modes.push_back(~0u);
      return;
    }
    struct stat st;
    modes.push_back(fstat(fd, &st) == 0 ? static_cast<unsigned>(st.st_mode & 0777) : ~0u);
    close(fd);
  };
  Config cfg;
  cfg.pieceBytes = 8192;
  cfg.nslots = 2;
  runPair([&](int rank) {
    InProcessExchange ex(hub, rank, 2);
    auto conn = connectShm(ex, cfg, 1 - rank, 3);
    exchangeBarrier(ex, 1 - rank);
    if (rank == 0) {
      EXPECT_EQ(shmFilesOf(hub.commId), std::vector<std::string>{});
    }
    exchangeBarrier(ex, 1 - rank);
  });
  ASSERT_EQ(names.size(), 2u);
  for (size_t i = 0; i < names.size(); ++i) {
    EXPECT_EQ(modes[i], 0600u) << names[i];
    EXPECT_NE(names[i].find(commHex(hub.commId)), std::string::npos) << names[i];
  }
  EXPECT_NE(names[0], names[1]);
  EXPECT_EQ(shmFilesOf(hub.commId), std::vector<std::string>{});
}

// kill -9 of both ranks between creating their FIFOs and unlinking them leaves the segments in /dev/shm with
// no one to unlink them. The next shm connection on the host removes the segments whose creator is dead.
TEST(ShmTransport, SegmentsOfRanksKilledDuringSetupAreRemovedByTheNextConnection) {
  Hub stale;  // each child gets its own copy: no name ever reaches the other, so both wait in set-up
  Config cfg;
  cfg.pieceBytes = 4096;
  cfg.nslots = 2;
  pid_t kids[2];
  for (int r = 0; r < 2; ++r) {
    kids[r] = fork();
    ASSERT_GE(kids[r], 0);
    if (kids[r] == 0) {
      InProcessExchange ex(stale, r, 2);
      try {
        connectShm(ex, cfg, 1 - r, 5);
      } catch (...) {
      }
      _exit(1);
    }
  }
  for (int i = 0; i < 2000 && shmFilesOf(stale.commId).size() < 2; ++i) usleep(5000);
  for (pid_t k : kids) kill(k, SIGKILL);
  for (pid_t k : kids) waitpid(k, nullptr, 0);
  ASSERT_EQ(shmFilesOf(stale.commId).size(), 2u) << "both children should have died in set-up";

  Hub hub;
  runPair([&](int rank) {
    InProcessExchange ex(hub, rank, 2);
    auto conn = connectShm(ex, cfg, 1 - rank, 3);
  });
  EXPECT_EQ(shmFilesOf(stale.commId), std::vector<std::string>{});
  for (const std::string& name : shmFilesOf(stale.commId)) shm_unlink(("/" + name).c_str());
}

// A failed setup (ranks disagree on the piece size) fails on both ranks and leaves no segment behind.
TEST(ShmTransport, MismatchedSettingsFailBothRanksAndCleanUp) {
  Hub hub;
  std::string errors[2];
  std::thread threads[2];
  for (int r = 0; r < 2; ++r) {
    threads[r] = std::thread([&, r] {
      InProcessExchange ex(hub, r, 2);
      Config cfg;
      cfg.pieceBytes = r == 0 ? 4096 : 8192;
      cfg.nslots = 2;
      try {
        connectShm(ex, cfg, 1 - r, 1);
      } catch (const InvalidUsage& e) {
        errors[r] = e.what();
      } catch (const std::exception& e) {
        errors[r] = std::string("wrong exception type: ") + e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(errors[r].find("STRATA_PIECE_BYTES"), std::string::npos) << "rank " << r << ": " << errors[r];
  }
  EXPECT_EQ(shmFilesOf(hub.commId), std::vector<std::string>{});
}

// A peer process that dies without closing: its last message is still readable (it lives in our segment),
// then checkPeer reports the death, naming the rank.
TEST(ShmTransport, DeadPeerProcessIsRemoteError) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  const uint64_t commId = freshCommId();
  Config cfg;
  cfg.pieceBytes = 4096;
  cfg.nslots = 4;
  cfg.timeoutMs = 20000;
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(sv[0]);
    int rc = 1;
    try {
      SocketPairExchange ex(sv[1], 1, commId);
      auto conn = connectShm(ex, cfg, 0, 1);
      uint32_t v = 77;
      void* p = conn->trySendReserve(4);
      if (p) {
        std::memcpy(p, &v, 4);
        conn->sendCommit(4, {});
        rc = 0;
      }
      _exit(rc);  // abruptly: no destructor, no closed flag
    } catch (...) {
    }
    _exit(rc);
  }
  close(sv[1]);
  SocketPairExchange ex(sv[0], 0, commId);
  std::unique_ptr<Connection> conn;
  ASSERT_NO_THROW(conn = connectShm(ex, cfg, 1, 1));
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  close(sv[0]);
  EXPECT_EQ(shmFilesOf(commId), std::vector<std::string>{});

  auto* p = static_cast<const uint32_t*>(conn->tryRecvPeek(4, {}));
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(*p, 77u);
  conn->recvRelease();
  try {
    conn->checkPeer();
    ADD_FAILURE() << "checkPeer did not notice the dead peer";
  } catch (const RemoteError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("exited"), std::string::npos) << e.what();
  }
}

// ---- tcp specifics --------------------------------------------------------------------------------------

TEST(TcpTransport, SipHashMatchesReferenceVectors) {
  std::array<uint8_t, 16> key;
  for (int i = 0; i < 16; ++i) key[i] = static_cast<uint8_t>(i);
  uint8_t msg[64];
  for (int i = 0; i < 64; ++i) msg[i] = static_cast<uint8_t>(i);
  // From the SipHash paper's reference implementation (vectors.h).
  EXPECT_EQ(tcp::sipHash24Tcp(key, msg, 0), 0x726fdb47dd0e0e31ull);
  EXPECT_EQ(tcp::sipHash24Tcp(key, msg, 1), 0x74f839c593dc67fdull);
  EXPECT_EQ(tcp::sipHash24Tcp(key, msg, 8), 0x93f5f5799a932462ull);
  EXPECT_EQ(tcp::sipHash24Tcp(key, msg, 15), 0xa129ca6149be45e5ull);
}

// Sockets that do not answer the challenge with this job's MAC are closed; the real peer still connects.
TEST(TcpTransport, UnauthenticatedSocketsAreRefused) {
  Hub hub;
  std::vector<int> intruders;
  std::thread impostor;
  hub.onSend = [&](int from, int, uint32_t tag, const std::vector<uint8_t>& msg) {
    if (from != 1 || tag != 1 || !intruders.empty()) return;
    const auto addr = tcp::parseHostPort(std::string(msg.begin(), msg.end()));
    // One sends garbage, one a well-formed hello under a wrong key, one nothing at all.
    for (int i = 0; i < 3; ++i) {
      int fd = socket(addr.family(), SOCK_STREAM | SOCK_CLOEXEC, 0);
      ASSERT_GE(fd, 0);
      ASSERT_EQ(::connect(fd, addr.sa(), addr.len), 0);
      timeval tv{20, 0};
      setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
      intruders.push_back(fd);
    }
    std::vector<uint8_t> garbage(sizeof(tcp::Hello), 'x');
    ASSERT_EQ(::send(intruders[0], garbage.data(), garbage.size(), MSG_NOSIGNAL), ssize_t(garbage.size()));
    // The listener challenges only once it accepts, after this hook returns: answer from a thread.
    impostor = std::thread([&hub, fd = intruders[1]] {
      uint8_t challenge[tcp::kChallengeBytes];
      if (::recv(fd, challenge, sizeof(challenge), MSG_WAITALL) != ssize_t(sizeof(challenge))) return;
      tcp::Hello h{};
      h.magic = tcp::kHelloMagic;
      h.commId = hub.commId;
      h.fromRank = 0;
      h.toRank = 1;
      h.tag = 1;
      h.sockIndex = 0;
      h.nsocks = 2;
      h.nslots = 4;
      h.pieceBytes = 1024;
      std::array<uint8_t, 16> wrongKey;
      wrongKey.fill(0xee);
      h.mac = helloMac(wrongKey, challenge, h);
      (void)::send(fd, &h, sizeof(h), MSG_NOSIGNAL);  // best effort: setup may already be over
    });
  };
  Config cfg;
  cfg.nsocks = 2;
  cfg.nslots = 4;
  cfg.pieceBytes = 1024;
  cfg.timeoutMs = 20000;
  runPair([&](int rank) {
    InProcessExchange ex(hub, rank, 2);
    auto conn = connectTcp(ex, cfg, 1 - rank, 1);
    for (uint32_t k = 0; k < 10; ++k) {
      uint32_t v = k * 10 + rank;
      sendBlocking(*conn, &v, 4);
    }
    for (uint32_t k = 0; k < 10; ++k) {
      uint32_t got = 0;
      std::memcpy(&got, recvBlocking(*conn, 4), 4);
      EXPECT_EQ(got, k * 10 + (1 - rank));
      conn->recvRelease();
    }
    flushBlocking(*conn);
    exchangeBarrier(ex, 1 - rank);
  });
  if (impostor.joinable()) impostor.join();
  ASSERT_EQ(intruders.size(), 3u);
  // Each intruder got at most the challenge, then its socket was closed by the listener.
  for (size_t i = 0; i < intruders.size(); ++i) {
    char buf[256];
    size_t total = 0;
    ssize_t r;
    while ((r = ::recv(intruders[i], buf, sizeof(buf), 0)) > 0) total += static_cast<size_t>(r);
    EXPECT_TRUE(r == 0 || (r < 0 && errno == ECONNRESET)) << "intruder " << i << ": " << strerror(errno);
    EXPECT_LE(total, tcp::kChallengeBytes) << "intruder " << i;
    close(intruders[i]);
  }
}

// A stranger floods the listener while the real peer connects: silent sockets, and some sending garbage, as fast
// as it can, from the moment the listener's address is out until the connection is up. The real peer's sockets must
// not be pushed out (the listener kept 64 pending sockets and dropped the oldest, so garbage evicted the peer).
TEST(TcpTransport, FloodedListenerStillAcceptsItsPeer) {
  Hub hub;
  std::atomic<bool> stop{false};
  std::atomic<int> made{0};
  std::thread flooder;
  hub.onSend = [&](int from, int, uint32_t tag, const std::vector<uint8_t>& msg) {
    if (from != 1 || tag != 1 || flooder.joinable()) return;
    const auto addr = tcp::parseHostPort(std::string(msg.begin(), msg.end()));
    flooder = std::thread([&, addr] {
      std::deque<int> held;
      while (!stop) {
        if (held.size() >= 400) {
          close(held.front());
          held.pop_front();
        }
        int fd = socket(addr.family(), SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0) break;
        if (::connect(fd, addr.sa(), addr.len) != 0 && errno != EINPROGRESS) {
          close(fd);
          continue;
        }
        if (++made % 5 == 0) (void)::send(fd, "garbage garbage garbage garbage", 31, MSG_NOSIGNAL);
        held.push_back(fd);
      }
      for (int fd : held) close(fd);
    });
    // The peer learns the address only once the flood is on.
    while (made < 200) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  };
  Config cfg;
  cfg.nsocks = 4;
  cfg.nslots = 4;
  cfg.pieceBytes = 1024;
  cfg.timeoutMs = 60000;
  runPair([&](int rank) {
    InProcessExchange ex(hub, rank, 2);
    auto conn = connectTcp(ex, cfg, 1 - rank, 1);
    uint32_t v = 40 + rank, got = 0;
    sendBlocking(*conn, &v, 4);
    std::memcpy(&got, recvBlocking(*conn, 4), 4);
    EXPECT_EQ(got, 40u + (1 - rank));
    conn->recvRelease();
    flushBlocking(*conn);
    exchangeBarrier(ex, 1 - rank);
  });
  stop = true;
  if (flooder.joinable()) flooder.join();
  EXPECT_GT(made.load(), 64) << "the flood was too small to test anything";
}

// Two ranks with different secrets never connect: both fail (no hang, no connection).
TEST(TcpTransport, WrongSecretFailsSetup) {
  Hub hub;
  Config cfg;
  cfg.nsocks = 1;
  cfg.timeoutMs = 1500;
  std::string errors[2];
  std::thread threads[2];
  for (int r = 0; r < 2; ++r) {
    threads[r] = std::thread([&, r] {
      InProcessExchange ex(hub, r, 2, r == 0 ? 1 : 2);
      try {
        connectTcp(ex, cfg, 1 - r, 1);
        errors[r] = "connected";
      } catch (const Error& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_NE(errors[1].find("wrong MAC"), std::string::npos) << errors[1];  // the listener
  EXPECT_NE(errors[0].find("refused"), std::string::npos) << errors[0];    // the connecting rank
}

// A peer process that dies: its sockets close and the next receive is a RemoteError naming it.
TEST(TcpTransport, DeadPeerProcessIsRemoteError) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  const uint64_t commId = freshCommId();
  Config cfg;
  cfg.nsocks = 3;
  cfg.pieceBytes = 4096;
  cfg.timeoutMs = 20000;
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(sv[0]);
    try {
      SocketPairExchange ex(sv[1], 1, commId);
      auto conn = connectTcp(ex, cfg, 0, 1);
      _exit(0);  // abruptly: the kernel closes the sockets
    } catch (...) {
    }
    _exit(1);
  }
  close(sv[1]);
  SocketPairExchange ex(sv[0], 0, commId);
  std::unique_ptr<Connection> conn;
  ASSERT_NO_THROW(conn = connectTcp(ex, cfg, 1, 1));
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  close(sv[0]);
  try {
    recvBlocking(*conn, 16);
    ADD_FAILURE() << "received from a dead peer";
  } catch (const RemoteError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("closed"), std::string::npos) << e.what();
  }
  EXPECT_THROW(conn->checkPeer(), RemoteError);
}

// IPv6 loopback, where the machine has one.
TEST(TcpTransport, WorksOverIpv6) {
  int probe = socket(AF_INET6, SOCK_STREAM, 0);
  sockaddr_in6 a{};
  a.sin6_family = AF_INET6;
  a.sin6_addr = in6addr_loopback;
  const bool ok = probe >= 0 && bind(probe, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  if (probe >= 0) close(probe);
  if (!ok) GTEST_SKIP() << "no IPv6 loopback here";
  Hub hub;
  Config cfg;
  cfg.nsocks = 2;
  cfg.pieceBytes = 256;
  runPair([&](int rank) {
    InProcessExchange ex(hub, rank, 2, 7, "::1");
    auto conn = connectTcp(ex, cfg, 1 - rank, 1);
    for (uint32_t k = 0; k < 5; ++k) sendBlocking(*conn, &k, 4);
    for (uint32_t k = 0; k < 5; ++k) {
      uint32_t got = 0;
      std::memcpy(&got, recvBlocking(*conn, 4), 4);
      EXPECT_EQ(got, k);
      conn->recvRelease();
    }
    flushBlocking(*conn);
    exchangeBarrier(ex, 1 - rank);
  });
}

// ---- shm single copy (process_vm_readv) --------------------------------------------------------------------

// Runs `body(rank, exchange)` as two processes: rank 0 in this one (gtest assertions count), rank 1 in a child
// whose exit status carries its verdict (non-zero: the child's check failed). `inChild` runs in the child first.
void runForkedPair(const std::function<void(int, PeerExchange&)>& body, const std::function<void()>& inChild = {}) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  const uint64_t commId = freshCommId();
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(sv[0]);
    int rc = 0;
    try {
      if (inChild) inChild();
      SocketPairExchange ex(sv[1], 1, commId);
      body(1, ex);
      if (testing::Test::HasFailure()) rc = 2;
    } catch (const std::exception& e) {
      fprintf(stderr, "child: %s\n", e.what());
      rc = 3;
    }
    _exit(rc);
  }
  close(sv[1]);
  {
    SocketPairExchange ex(sv[0], 0, commId);
    body(0, ex);
  }
  close(sv[0]);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "rank 1 (the child) failed: status " << status;
}

Config singleCopyConfig() {
  Config cfg;
  cfg.pieceBytes = 65536;
  cfg.nslots = 4;
  cfg.shmSingleCopyBytes = 4096;
  cfg.timeoutMs = 20000;
  return cfg;
}

uint8_t refPattern(size_t i) { return static_cast<uint8_t>(i * 131 + 7); }

// Sends `bytes` at `src` the way the executor would: a reference from the threshold up, else through the slot.
void sendPiece(Connection& c, const void* src, size_t bytes, const MsgStamp& stamp = {}) {
  const auto start = Clock::now();
  void* p;
  while (!(p = c.trySendReserve(bytes))) {
    checkNotStuck(start, "sending");
    std::this_thread::yield();
  }
  if (c.refMinBytes() && bytes >= c.refMinBytes()) {
    c.sendCommitRef(src, bytes, stamp);
  } else {
    std::memcpy(p, src, bytes);
    c.sendCommit(bytes, stamp);
  }
}

// Between two processes, pieces from the threshold up travel as references and arrive intact, read straight
// into the receiver's destination (tryRecvPeekInto) or into the bounce buffer (tryRecvPeek); smaller ones still
// travel through the slot; a wrong stamp on a reference is still refused before anything is read.
TEST(ShmSingleCopy, PiecesAboveAndBelowTheThresholdArriveIntact) {
  const Config cfg = singleCopyConfig();
  const std::vector<size_t> sizes = {1, 32, 33, 4095, 4096, 4097, 65535, 65536, 65536, 12345, 65536};
  runForkedPair([&](int rank, PeerExchange& ex) {
    auto conn = connectShm(ex, cfg, 1 - rank, 7);
    EXPECT_EQ(shm::singleCopyState(*conn), "on");
    EXPECT_EQ(conn->refMinBytes(), 4096u);
    std::vector<uint8_t> data(65536 * 2);
    for (size_t i = 0; i < data.size(); ++i) data[i] = refPattern(i);
    if (rank == 1) {
      size_t off = 0;
      for (size_t s : sizes) {
        sendPiece(*conn, data.data() + off, s);
        off = (off + 4097) % 65536;
      }
      sendPiece(*conn, data.data(), 65536, MsgStamp{1, 2});
      flushBlocking(*conn);
      exchangeBarrier(ex, 0);
      return;
    }
    size_t off = 0;
    for (size_t k = 0; k < sizes.size(); ++k) {
      const size_t s = sizes[k];
      std::vector<uint8_t> dst(s, 0xEE);
      // Alternate the receivers: into the destination, or peeked (a reducing receive: bounce buffer).
      const void* in = recvBlocking(*conn, s, {}, k % 2 ? dst.data() : nullptr);
      if (k % 2 && s >= 4096) {
        EXPECT_EQ(in, dst.data()) << "a reference is read straight into the destination";
      }
      EXPECT_EQ(std::memcmp(in, data.data() + off, s), 0) << "piece " << k << " of " << s << " bytes";
      conn->recvRelease();
      off = (off + 4097) % 65536;
    }
    std::vector<uint8_t> dst(65536);
    const auto start = Clock::now();
    bool refused = false;
    while (!refused) {
      try {
        if (conn->tryRecvPeekInto(dst.data(), dst.size(), {})) break;
      } catch (const StampMismatch&) {
        refused = true;
      }
      checkNotStuck(start, "receiving");
    }
    EXPECT_TRUE(refused) << "a reference with another call's stamp must be refused";
    EXPECT_EQ(dst, std::vector<uint8_t>(65536, 0)) << "nothing may be read before the stamp check";
    // The refused message is still first in line; release it so the sender's flush can complete.
    (void)conn->tryRecvPeekInto(dst.data(), dst.size(), MsgStamp{1, 2});
    conn->recvRelease();
    exchangeBarrier(ex, 1);
  });
}

// The sender's flushed() stays false while the receiver has not read a reference, and turns true once it has
// (the executor's FlushWait keeps the call from completing until then).
TEST(ShmSingleCopy, FlushedOnlyOnceThePeerHasReadTheReference) {
  const Config cfg = singleCopyConfig();
  runForkedPair([&](int rank, PeerExchange& ex) {
    auto conn = connectShm(ex, cfg, 1 - rank, 7);
    ASSERT_EQ(shm::singleCopyState(*conn), "on");
    std::vector<uint8_t> data(65536);
    for (size_t i = 0; i < data.size(); ++i) data[i] = refPattern(i);
    if (rank == 0) {
      EXPECT_TRUE(conn->flushed());
      sendPiece(*conn, data.data(), 1000);  // below the threshold, through the slot: flushed at once
      EXPECT_TRUE(conn->flushed());
      sendPiece(*conn, data.data(), 65536);  // a reference
      for (int i = 0; i < 100; ++i) {
        EXPECT_FALSE(conn->flushed()) << "the peer has not read the reference yet";
        usleep(200);
      }
      exchangeBarrier(ex, 1);  // now the peer reads
      flushBlocking(*conn);
      EXPECT_TRUE(conn->flushed());
      exchangeBarrier(ex, 1);
      return;
    }
    exchangeBarrier(ex, 0);
    std::vector<uint8_t> dst(65536);
    for (size_t s : {size_t{1000}, size_t{65536}}) {
      const void* in = recvBlocking(*conn, s, {}, dst.data());
      EXPECT_EQ(std::memcmp(in, data.data(), s), 0);
      conn->recvRelease();
    }
    exchangeBarrier(ex, 0);
  });
}

// A sender that unmaps the buffer behind a reference before the receiver read it (a bug: the call had not
// completed) gives the receiver a SingleCopyReadError naming the peer, the address and the size, not a crash.
TEST(ShmSingleCopy, FreedBufferIsAnErrorNamingPeerAddressAndSize) {
  const Config cfg = singleCopyConfig();
  runForkedPair([&](int rank, PeerExchange& ex) {
    auto conn = connectShm(ex, cfg, 1 - rank, 7);
    ASSERT_EQ(shm::singleCopyState(*conn), "on");
    if (rank == 1) {
      void* buf = mmap(nullptr, 65536, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      ASSERT_NE(buf, MAP_FAILED);
      std::memset(buf, 1, 65536);
      uint64_t address = reinterpret_cast<uint64_t>(buf);
      sendPiece(*conn, buf, 65536);
      munmap(buf, 65536);
      ex.send(0, 5, &address, sizeof(address));
      exchangeBarrier(ex, 0);
      _exit(0);  // the reference is never released: leave without waiting for it
    }
    const std::vector<uint8_t> got = ex.recv(1, 5);
    uint64_t address = 0;
    std::memcpy(&address, got.data(), sizeof(address));
    std::vector<uint8_t> dst(65536);
    try {
      recvBlocking(*conn, dst.size(), {}, dst.data());
      ADD_FAILURE() << "reading an unmapped buffer succeeded";
    } catch (const SingleCopyReadError& e) {
      const std::string what = e.what();
      EXPECT_EQ(e.peer, 1);
      EXPECT_EQ(e.address, address);
      EXPECT_EQ(e.bytes, 65536u);
      EXPECT_NE(what.find("rank 1"), std::string::npos) << what;
      EXPECT_NE(what.find(strprintf("0x%llx", static_cast<unsigned long long>(address))), std::string::npos) << what;
      EXPECT_NE(what.find("65536 bytes"), std::string::npos) << what;
      EXPECT_EQ(e.code(), strataRemoteError);
    }
    exchangeBarrier(ex, 1);
  });
}

// Each reason to stay with two copies is chosen when it holds, by both ranks, with the reason in the state.
void expectFallback(const Config& c0, const Config& c1, const std::string& why, int forcedErrno = 0) {
  runForkedPair(
      [&](int rank, PeerExchange& ex) {
        auto conn = connectShm(ex, rank == 0 ? c0 : c1, 1 - rank, 7);
        const std::string state = shm::singleCopyState(*conn);
        EXPECT_EQ(conn->refMinBytes(), 0u) << state;
        EXPECT_EQ(state.rfind("off: ", 0), 0u) << state;
        EXPECT_NE(state.find(why), std::string::npos) << state;
        // Data still flows, through the slots.
        std::vector<uint8_t> data(65536);
        for (size_t i = 0; i < data.size(); ++i) data[i] = refPattern(i);
        if (rank == 0) {
          sendPiece(*conn, data.data(), data.size());
          flushBlocking(*conn);
        } else {
          const void* in = recvBlocking(*conn, data.size());
          EXPECT_EQ(std::memcmp(in, data.data(), data.size()), 0);
          conn->recvRelease();
        }
        exchangeBarrier(ex, 1 - rank);
      },
      [&] {
        if (forcedErrno) shm::setSingleCopyProbeErrorForTesting(forcedErrno);
      });
}

TEST(ShmSingleCopy, OffOnEitherRankTurnsItOffForBoth) {
  Config on = singleCopyConfig(), off = singleCopyConfig();
  off.shmSingleCopy = "off";
  expectFallback(off, on, "STRATA_SHM_SINGLE_COPY=off on rank 0");
  expectFallback(on, off, "STRATA_SHM_SINGLE_COPY=off on rank 1");
}

// EPERM (yama ptrace_scope, no CAP_SYS_PTRACE) and ENOSYS cannot be made real here (root, no yama): a test hook
// makes rank 1's probe see them; rank 0's probe succeeds, and both still agree on off.
TEST(ShmSingleCopy, RefusedProbeTurnsItOffForBoth) {
  expectFallback(singleCopyConfig(), singleCopyConfig(), "EPERM", EPERM);
}

TEST(ShmSingleCopy, KernelWithoutTheSyscallTurnsItOffForBoth) {
  expectFallback(singleCopyConfig(), singleCopyConfig(), "ENOSYS", ENOSYS);
}

// A peer in another pid namespace: its pid means nothing here. Rank 1 runs in a fresh pid namespace (as root).
TEST(ShmSingleCopy, PeerInAnotherPidNamespaceTurnsItOffForBoth) {
  int probe[2];
  ASSERT_EQ(pipe(probe), 0);
  pid_t tester = fork();
  ASSERT_GE(tester, 0);
  if (tester == 0) _exit(unshare(CLONE_NEWPID) == 0 ? 0 : 1);
  int status = 0;
  waitpid(tester, &status, 0);
  close(probe[0]);
  close(probe[1]);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) GTEST_SKIP() << "unshare(CLONE_NEWPID) is not permitted here";

  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  const uint64_t commId = freshCommId();
  const Config cfg = singleCopyConfig();
  std::vector<uint8_t> data(65536);
  for (size_t i = 0; i < data.size(); ++i) data[i] = refPattern(i);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(sv[0]);
    if (unshare(CLONE_NEWPID) != 0) _exit(4);
    pid_t inner = fork();  // the first child of the new namespace is its pid 1
    if (inner == 0) {
      int rc = 0;
      try {
        SocketPairExchange ex(sv[1], 1, commId);
        auto conn = connectShm(ex, cfg, 0, 7);
        if (conn->refMinBytes() != 0) rc = 5;
        sendPiece(*conn, data.data(), data.size());
        flushBlocking(*conn);
        exchangeBarrier(ex, 0);
      } catch (const std::exception& e) {
        fprintf(stderr, "child: %s\n", e.what());
        rc = 3;
      }
      _exit(rc);
    }
    int st = 0;
    waitpid(inner, &st, 0);
    _exit(WIFEXITED(st) ? WEXITSTATUS(st) : 6);
  }
  close(sv[1]);
  {
    SocketPairExchange ex(sv[0], 0, commId);
    auto conn = connectShm(ex, cfg, 1, 7);
    const std::string state = shm::singleCopyState(*conn);
    EXPECT_EQ(conn->refMinBytes(), 0u) << state;
    EXPECT_NE(state.find("another pid namespace"), std::string::npos) << state;
    const void* in = recvBlocking(*conn, data.size());
    EXPECT_EQ(std::memcmp(in, data.data(), data.size()), 0);
    conn->recvRelease();
    exchangeBarrier(ex, 1);
  }
  close(sv[0]);
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
}

// A peer that dies with a reference outstanding: the receiver gets a RemoteError saying it exited.
TEST(ShmSingleCopy, PeerDeadBeforeTheReadIsRemoteError) {
  const Config cfg = singleCopyConfig();
  runForkedPair([&](int rank, PeerExchange& ex) {
    auto conn = connectShm(ex, cfg, 1 - rank, 7);
    ASSERT_EQ(shm::singleCopyState(*conn), "on");
    if (rank == 1) {
      std::vector<uint8_t> data(65536, 3);
      sendPiece(*conn, data.data(), data.size());
      exchangeBarrier(ex, 0);
      _exit(0);  // abruptly: no destructor, the reference unread
    }
    exchangeBarrier(ex, 1);
    // The child's exit status is collected by runForkedPair after this body; wait here for its pid to go.
    usleep(200000);
    std::vector<uint8_t> dst(65536);
    try {
      recvBlocking(*conn, dst.size(), {}, dst.data());
      ADD_FAILURE() << "read the memory of a dead process";
    } catch (const RemoteError& e) {
      EXPECT_NE(std::string(e.what()).find("rank 1"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("exited"), std::string::npos) << e.what();
    }
  });
}

}  // namespace
}  // namespace strata
