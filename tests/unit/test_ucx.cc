// Tests of the UCX transport: two ranks as two threads (an in-process PeerExchange), or as two processes (a
// socketpair PeerExchange) where a rank must really die. The tests every transport passes are the transport suite's
// (transport_suite.h, test_transport.cc), instantiated here for ucx; this file adds what only ucx has. Every data
// test runs over UCX's default transport choice (UCX_TLS unset: shared memory on this host), over UCX_TLS=tcp and
// over UCX_TLS=sm, each in a fresh UCX context. With UCX_TLS=tcp or sm, UCX has nothing else to fall back on, so a
// pass means that transport really carried the bytes.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
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
#include "transport/transport.h"
#include "transport_suite.h"
#include "util/config.h"
#include "util/error.h"
#ifdef STRATA_HAVE_UCX
#include "transport/ucx/ucx_api.h"
#include "transport/ucx/ucx_worker.h"
#endif

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kHangGuard = std::chrono::seconds(60);  // only turns a hang into a failure; never timing

uint64_t newCommId() {
  static std::atomic<uint64_t> n{0};
  static const uint64_t base = (static_cast<uint64_t>(std::random_device{}()) << 32) ^ static_cast<uint64_t>(getpid());
  return base + (++n << 16);
}

// ---- exchanges -----------------------------------------------------------------------------------------

// Ranks as threads of this process: mailboxes keyed by (from, to, tag).
struct Mailboxes {
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::tuple<int, int, uint32_t>, std::deque<std::vector<uint8_t>>> boxes;
  std::function<void(int from, uint32_t tag, const std::vector<uint8_t>&)> onSend;  // runs before delivery
  uint64_t commId = newCommId();
};

class ThreadExchange : public PeerExchange {
 public:
  ThreadExchange(Mailboxes& m, int rank, uint8_t secretByte = 5) : m_(m), rank_(rank) {
    for (size_t i = 0; i < secret_.size(); ++i) secret_[i] = static_cast<uint8_t>(secretByte * 3 + i);
  }
  int rank() const override { return rank_; }
  int size() const override { return 2; }
  void send(int peer, uint32_t tag, const void* data, size_t len) override {
    std::vector<uint8_t> msg(static_cast<const uint8_t*>(data), static_cast<const uint8_t*>(data) + len);
    if (m_.onSend) m_.onSend(rank_, tag, msg);
    std::lock_guard<std::mutex> lk(m_.mu);
    m_.boxes[{rank_, peer, tag}].push_back(std::move(msg));
    m_.cv.notify_all();
  }
  std::vector<uint8_t> recv(int peer, uint32_t tag) override {
    std::unique_lock<std::mutex> lk(m_.mu);
    auto& box = m_.boxes[{peer, rank_, tag}];
    if (!m_.cv.wait_for(lk, std::chrono::seconds(20), [&] { return !box.empty(); })) {
      throw TimeoutError(strprintf("test exchange: rank %d waited for rank %d tag %u", rank_, peer, tag));
    }
    auto msg = std::move(box.front());
    box.pop_front();
    return msg;
  }
  const std::array<uint8_t, 16>& secret() const override { return secret_; }
  std::string localAddress() const override { return "127.0.0.1"; }
  uint64_t commId() const override { return m_.commId; }

 private:
  Mailboxes& m_;
  int rank_;
  std::array<uint8_t, 16> secret_{};
};

// Ranks as processes: length-prefixed messages over a socketpair.
class PipeExchange : public PeerExchange {
 public:
  PipeExchange(int fd, int rank, uint64_t commId) : fd_(fd), rank_(rank), commId_(commId) { secret_.fill(9); }
  int rank() const override { return rank_; }
  int size() const override { return 2; }
  void send(int, uint32_t tag, const void* data, size_t len) override {
    uint32_t hdr[2] = {tag, static_cast<uint32_t>(len)};
    io(hdr, sizeof(hdr), true);
    io(const_cast<void*>(data), len, true);
  }
  std::vector<uint8_t> recv(int, uint32_t tag) override {
    while (stash_[tag].empty()) {
      uint32_t hdr[2];
      io(hdr, sizeof(hdr), false);
      std::vector<uint8_t> msg(hdr[1]);
      io(msg.data(), msg.size(), false);
      stash_[hdr[0]].push_back(std::move(msg));
    }
    auto msg = std::move(stash_[tag].front());
    stash_[tag].pop_front();
    return msg;
  }
  const std::array<uint8_t, 16>& secret() const override { return secret_; }
  std::string localAddress() const override { return "127.0.0.1"; }
  uint64_t commId() const override { return commId_; }

 private:
  void io(void* p, size_t n, bool out) {
    char* c = static_cast<char*>(p);
    while (n > 0) {
      if (!out) {
        pollfd pfd{fd_, POLLIN, 0};
        if (::poll(&pfd, 1, 20000) == 0) throw TimeoutError("test exchange: nothing from the other process");
      }
      ssize_t r = out ? ::write(fd_, c, n) : ::read(fd_, c, n);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) throw RemoteError("test exchange: the other process is gone");
      c += r;
      n -= static_cast<size_t>(r);
    }
  }
  int fd_, rank_;
  uint64_t commId_;
  std::array<uint8_t, 16> secret_{};
  std::map<uint32_t, std::deque<std::vector<uint8_t>>> stash_;
};

#ifdef STRATA_HAVE_UCX

// ---- helpers -------------------------------------------------------------------------------------------

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

void guard(Clock::time_point start, const char* what) {
  if (Clock::now() - start > kHangGuard) throw std::runtime_error(std::string("stuck: ") + what);
}

const void* recvWait(Connection& c, size_t bytes, const MsgStamp& expect = {}) {
  const auto start = Clock::now();
  while (true) {
    if (const void* p = c.tryRecvPeek(bytes, expect)) return p;
    c.progress();
    guard(start, "receiving");
    std::this_thread::yield();
  }
}

void sendWait(Connection& c, const void* data, size_t bytes, const MsgStamp& stamp = {}) {
  const auto start = Clock::now();
  while (true) {
    if (void* p = c.trySendReserve(bytes)) {
      std::memcpy(p, data, bytes);
      c.sendCommit(bytes, stamp);
      return;
    }
    c.progress();
    guard(start, "sending");
    std::this_thread::yield();
  }
}

void flushWait(Connection& c) {
  const auto start = Clock::now();
  while (!c.flushed()) {
    c.progress();
    guard(start, "flushing");
    std::this_thread::yield();
  }
}

void barrier(PeerExchange& ex, int peer) {
  uint8_t b = 1;
  ex.send(peer, 999, &b, 1);
  ex.recv(peer, 999);
}

// Whether libucp loads here at all (a build with UCX's headers may run where the library is missing).
bool ucxLoads(std::string* why) {
  try {
    ucx::api();
    return true;
  } catch (const Error& e) {
    *why = e.what();
    return false;
  }
}

// ---- parameterized over UCX_TLS and slot geometry ---------------------------------------------------------

using transport_suite::TransportCase;
using transport_suite::TransportTest;

// The cases of the transport suite and of the tests below: nslots 1 and pieces of 64 bytes or not a multiple of 64
// are below what the config table accepts (the fixture holds the test hook that lets them through).
const TransportCase kUcxCases[] = {
    {"ucx", 1, 4, 4096, nullptr},    {"ucx", 1, 3, 65536 + 3, nullptr}, {"ucx", 1, 4, 4096, "tcp"},
    {"ucx", 1, 2, 65536 + 3, "tcp"}, {"ucx", 1, 4, 4096, "sm"},         {"ucx", 1, 2, 65536 + 3, "sm"},
    {"ucx", 1, 1, 64, "posix,self"},
};

INSTANTIATE_TEST_SUITE_P(Ucx, TransportTest, testing::ValuesIn(kUcxCases), transport_suite::caseName);

// What only ucx has, over the same cases (the suite's fixture: UCX_TLS per case, skipped where libucp does not
// load). Named as the suite names them, less the "ucx_" every case shares: "default_slots4_piece4096".
class UcxTest : public TransportTest {};

std::string tlsCaseName(const testing::TestParamInfo<TransportCase>& info) {
  return transport_suite::caseName(info).substr(std::string("ucx_").size());
}

// A receiver process that is not running at all holds the sender to its nslots staging slots once messages
// are too large for UCX to buffer eagerly (rendezvous needs the receiver). When the receiver runs, it gets
// every message in order and the window moves on.
TEST_P(UcxTest, FullWindowHoldsTheSenderBack) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  const uint64_t commId = newCommId();
  Config cfg = config();
  cfg.pieceBytes = 256 * 1024;  // far above UCX's eager thresholds
  const int total = 4 * cfg.nslots + 3;
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // the receiver
    close(sv[0]);
    int rc = 1;
    try {
      PipeExchange ex(sv[1], 1, commId);
      auto conn = connectUcx(ex, cfg, 0, 1);
      barrier(ex, 0);
      ex.recv(0, 5);  // parked: no progress at all until the sender says so
      rc = 0;
      for (int k = 0; k < total; ++k) {
        auto* p = static_cast<const uint8_t*>(recvWait(*conn, cfg.pieceBytes));
        if (p[0] != static_cast<uint8_t>(k + 1) || p[cfg.pieceBytes - 1] != static_cast<uint8_t>(k + 1)) rc = 2;
        conn->recvRelease();
      }
      barrier(ex, 0);
    } catch (...) {
      rc = 3;
    }
    _exit(rc);
  }
  close(sv[1]);
  {
    PipeExchange ex(sv[0], 0, commId);
    auto conn = connectUcx(ex, cfg, 1, 1);
    barrier(ex, 1);
    int count = 0;
    // Try hard: plenty of progress while the receiver is parked.
    for (int attempt = 0; attempt < 2000 && count < total; ++attempt) {
      if (auto* p = static_cast<uint8_t*>(conn->trySendReserve(cfg.pieceBytes))) {
        std::memset(p, count + 1, cfg.pieceBytes);
        conn->sendCommit(cfg.pieceBytes, {});
        ++count;
      } else {
        conn->progress();
      }
    }
    EXPECT_EQ(count, cfg.nslots);
    EXPECT_FALSE(conn->flushed());
    uint8_t b = 1;
    ex.send(1, 5, &b, 1);
    for (int k = count; k < total; ++k) {
      std::vector<uint8_t> data(cfg.pieceBytes, static_cast<uint8_t>(k + 1));
      sendWait(*conn, data.data(), data.size());
    }
    flushWait(*conn);
    barrier(ex, 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "receiver status " << status;
  close(sv[0]);
}

// Ranks that are threads of one process share its worker, so the sender's progress also completes the
// receiver's posted receives: at most nslots staged plus nslots posted.
TEST_P(UcxTest, WindowBetweenThreadsIsBounded) {
  Mailboxes m;
  Config cfg = config();
  cfg.pieceBytes = 256 * 1024;
  std::atomic<int> burst{0};
  runPair([&](int rank) {
    ThreadExchange ex(m, rank);
    auto conn = connectUcx(ex, cfg, 1 - rank, 1);
    barrier(ex, 1 - rank);
    const int total = 4 * cfg.nslots;
    if (rank == 0) {
      int count = 0;
      for (int attempt = 0; attempt < 2000 && count < total; ++attempt) {
        if (auto* p = static_cast<uint8_t*>(conn->trySendReserve(cfg.pieceBytes))) {
          std::memset(p, count + 1, cfg.pieceBytes);
          conn->sendCommit(cfg.pieceBytes, {});
          ++count;
        } else {
          conn->progress();
        }
      }
      burst = count;
      uint8_t b = 1;
      ex.send(1, 5, &b, 1);
      for (int k = count; k < total; ++k) {
        std::vector<uint8_t> data(cfg.pieceBytes, static_cast<uint8_t>(k + 1));
        sendWait(*conn, data.data(), data.size());
      }
      flushWait(*conn);
    } else {
      ex.recv(0, 5);
      for (int k = 0; k < total; ++k) {
        auto* p = static_cast<const uint8_t*>(recvWait(*conn, cfg.pieceBytes));
        EXPECT_EQ(p[0], static_cast<uint8_t>(k + 1));
        conn->recvRelease();
      }
    }
    barrier(ex, 1 - rank);
  });
  EXPECT_GE(burst.load(), cfg.nslots);
  EXPECT_LE(burst.load(), 2 * cfg.nslots);
}

// A peer process that dies without closing: what it sent is still delivered, then the next receive, driven as
// the executor drives it (progress, and checkPeer while stalled), is a RemoteError naming it, not a hang.
TEST_P(UcxTest, DeadPeerProcessIsRemoteError) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  const uint64_t commId = newCommId();
  const Config cfg = config();
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(sv[0]);
    int rc = 1;
    try {
      PipeExchange ex(sv[1], 1, commId);
      auto conn = connectUcx(ex, cfg, 0, 1);
      uint32_t v = 77;
      sendWait(*conn, &v, 4);
      flushWait(*conn);
      barrier(ex, 0);        // the parent got it
      (void)conn.release();  // no destructor, no goodbye: the process just ends
      rc = 0;
    } catch (...) {
    }
    _exit(rc);
  }
  close(sv[1]);
  std::unique_ptr<Connection> conn;
  {
    PipeExchange ex(sv[0], 0, commId);
    ASSERT_NO_THROW(conn = connectUcx(ex, cfg, 1, 1));
    uint32_t got = 0;
    std::memcpy(&got, recvWait(*conn, 4), 4);
    EXPECT_EQ(got, 77u);
    conn->recvRelease();
    barrier(ex, 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  close(sv[0]);

  const auto start = Clock::now();
  auto nextCheck = start;
  try {
    while (true) {
      if (conn->tryRecvPeek(4, {})) {
        ADD_FAILURE() << "received from a dead peer";
        break;
      }
      conn->progress();
      if (Clock::now() >= nextCheck) {
        conn->checkPeer();
        nextCheck = Clock::now() + std::chrono::milliseconds(50);
      }
      guard(start, "waiting for the dead peer's error");
      std::this_thread::yield();
    }
  } catch (const RemoteError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1"), std::string::npos) << e.what();
  }
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(10));
  EXPECT_THROW(conn->checkPeer(), RemoteError);
}

INSTANTIATE_TEST_SUITE_P(Tls, UcxTest, testing::ValuesIn(kUcxCases), tlsCaseName);

// ---- setup -------------------------------------------------------------------------------------------------

class UcxSetup : public testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!ucxLoads(&why)) GTEST_SKIP() << why;
  }
};

// Ranks that disagree on the slot geometry both fail, with InvalidUsage naming the settings.
TEST_F(UcxSetup, MismatchedSettingsFailBothRanks) {
  Mailboxes m;
  std::string errors[2];
  std::thread threads[2];
  for (int r = 0; r < 2; ++r) {
    threads[r] = std::thread([&, r] {
      ThreadExchange ex(m, r);
      Config cfg;
      cfg.pieceBytes = r == 0 ? 4096 : 8192;
      cfg.timeoutMs = 20000;
      try {
        connectUcx(ex, cfg, 1 - r, 1);
        errors[r] = "connected";
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
}

// Two ranks with different secrets never connect: both fail quickly, each naming the wrong MAC it saw.
TEST_F(UcxSetup, WrongSecretFailsSetup) {
  Mailboxes m;
  std::string errors[2];
  std::thread threads[2];
  const auto start = Clock::now();
  for (int r = 0; r < 2; ++r) {
    threads[r] = std::thread([&, r] {
      ThreadExchange ex(m, r, r == 0 ? 1 : 2);
      Config cfg;
      cfg.timeoutMs = 20000;
      try {
        connectUcx(ex, cfg, 1 - r, 1);
        errors[r] = "connected";
      } catch (const RemoteError& e) {
        errors[r] = e.what();
      } catch (const std::exception& e) {
        errors[r] = std::string("wrong exception type: ") + e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) EXPECT_NE(errors[r].find("wrong MAC"), std::string::npos) << errors[r];
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(10));
}

// A stranger that learned a rank's worker address (not its receive key, which only the bootstrap carries)
// and sprays tagged messages at it gets nothing into the connection's stream.
TEST_F(UcxSetup, StrangerMessagesDoNotMatch) {
  Mailboxes m;
  std::mutex mu;
  std::vector<uint8_t> victimAddress;
  m.onSend = [&](int from, uint32_t tag, const std::vector<uint8_t>& msg) {
    // The setup message: a fixed header, then the worker address (its last addrLen bytes).
    std::lock_guard<std::mutex> lk(mu);
    if (from == 0 && tag == 1 && victimAddress.empty() && msg.size() > 184) {
      victimAddress.assign(msg.begin() + 184, msg.end());
    }
  };
  AnySlotGeometryForTesting anyGeometry;  // 64-byte pieces, below the config table's 256
  Config cfg;
  cfg.nslots = 2;
  cfg.pieceBytes = 64;
  cfg.timeoutMs = 20000;
  std::atomic<bool> sprayed{false};
  runPair([&](int rank) {
    ThreadExchange ex(m, rank);
    auto conn = connectUcx(ex, cfg, 1 - rank, 1);
    if (rank == 1) {
      // Spray from another endpoint of this process's worker, with tags all over the space.
      const ucx::Api& api = ucx::api();
      auto worker = ucx::Worker::acquire();
      std::vector<uint8_t> addr;
      {
        std::lock_guard<std::mutex> lk(mu);
        addr = victimAddress;
      }
      ASSERT_FALSE(addr.empty());
      std::unique_lock<std::mutex> wl(worker->mutex());
      ucp_ep_params_t ep{};
      ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
      ep.address = reinterpret_cast<const ucp_address_t*>(addr.data());
      ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
      ucp_ep_h h = nullptr;
      ASSERT_EQ(api.ep_create(worker->handle(), &ep, &h), UCS_OK);
      std::mt19937_64 rng(42);
      static uint64_t junk = 0xdeadbeef;
      ucp_request_param_t p{};
      for (int i = 0; i < 200; ++i) {
        const uint64_t tag = i < 100 ? static_cast<uint64_t>(i) : rng();
        void* r = api.tag_send_nbx(h, &junk, sizeof(junk), tag, &p);
        ASSERT_FALSE(UCS_PTR_IS_ERR(r));
        while (r && api.request_check_status(r) == UCS_INPROGRESS) worker->progress();
        if (r) api.request_free(r);
      }
      ucp_request_param_t cp{};
      cp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      cp.flags = UCP_EP_CLOSE_FLAG_FORCE;
      void* r = api.ep_close_nbx(h, &cp);
      if (r && !UCS_PTR_IS_ERR(r)) worker->retire(r, std::make_unique<ucx::EndpointState>());
      wl.unlock();
      sprayed = true;
      for (uint64_t v = 1; v <= 5; ++v) sendWait(*conn, &v, sizeof(v));
      flushWait(*conn);
    } else {
      for (uint64_t want = 1; want <= 5; ++want) {
        uint64_t got = 0;
        std::memcpy(&got, recvWait(*conn, sizeof(got)), sizeof(got));
        EXPECT_EQ(got, want);
        conn->recvRelease();
      }
      EXPECT_TRUE(sprayed.load());
    }
    barrier(ex, 1 - rank);
  });
}

TEST_F(UcxSetup, BadPeerIsInvalidArgument) {
  Mailboxes m;
  ThreadExchange ex(m, 0);
  Config cfg;
  EXPECT_THROW(connectUcx(ex, cfg, 0, 1), InvalidArgument);
  EXPECT_THROW(connectUcx(ex, cfg, 2, 1), InvalidArgument);
  cfg.nslots = 0;
  EXPECT_THROW(connectUcx(ex, cfg, 1, 1), InvalidArgument);
}

TEST(UcxBuild, WithoutUcxIsAClearError) { GTEST_SKIP() << "this build has UCX (STRATA_HAVE_UCX)"; }

#else  // !STRATA_HAVE_UCX

TEST(UcxBuild, WithoutUcxIsAClearError) {
  Mailboxes m;
  ThreadExchange ex(m, 0);
  Config cfg;
  try {
    connectUcx(ex, cfg, 1, 1);
    ADD_FAILURE() << "connectUcx worked in a build without UCX";
  } catch (const InvalidUsage& e) {
    EXPECT_STREQ(e.what(), "Strata was built without UCX; STRATA_NET=ucx/STRATA_TRANSPORT=ucx unavailable");
  }
}

#endif

}  // namespace
}  // namespace strata
