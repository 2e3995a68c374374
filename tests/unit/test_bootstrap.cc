// Bootstrap: SipHash, unique ids, rendezvous and the control plane (ranks as threads, plus fork()ed
// ranks for deaths), and discovery of launcher environments.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <future>
#include <latch>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap/bootstrap.h"
#include "bootstrap/socket_io.h"
#include "util/config.h"
#include "util/error.h"

namespace strata {
namespace {

/// A loopback port that was free a moment ago (bound, read back, released).
uint16_t freeLoopbackPort() {
  int probe = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(sa);
  if (probe < 0 || ::bind(probe, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0 ||
      getsockname(probe, reinterpret_cast<sockaddr*>(&sa), &len) != 0)
    ADD_FAILURE() << "no free loopback port";
  ::close(probe);
  return ntohs(sa.sin_port);
}

// Plain gtest (the unit binary does not link gmock): "haystack contains needle", printing both on failure.
::testing::AssertionResult contains(const std::string& haystack, const std::string& needle) {
  if (haystack.find(needle) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << haystack << "' does not contain '" << needle << "'";
}

Config testConfig(int64_t timeoutMs = 20000) {
  Config c;
  c.timeoutMs = timeoutMs;
  return c;
}

UniqueIdInfo startLocalRoot(int nranksHint, const Config& config = testConfig()) {
  return startRootService(config, "127.0.0.1", 0, randomSecret(), nranksHint);
}

/// Runs fn(rank) on n threads; rethrows the first exception (with its rank) after all have joined.
void runRanks(int n, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  std::mutex mu;
  std::string firstError;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(mu);
        if (firstError.empty()) firstError = "rank " + std::to_string(r) + ": " + e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  if (!firstError.empty()) FAIL() << firstError;
}

std::string strOf(const std::vector<uint8_t>& v) { return std::string(v.begin(), v.end()); }

// ---- Self-connect --------------------------------------------------------------------------------

// A socket bound to a port and connected to that same address connects to itself (TCP simultaneous
// open); that is what a rank's connect retry loop can stumble into when the root's port is in the
// ephemeral range, and it would then hold the port the root needs. The check must see it, and must not
// flag an ordinary connection.
TEST(SelfConnect, DetectedAndOrdinaryConnectionsAreNot) {
  using bootstrap_io::Fd;
  using bootstrap_io::isSelfConnected;
  Fd self(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  ASSERT_TRUE(self.valid());
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(self.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  socklen_t len = sizeof(a);
  ASSERT_EQ(getsockname(self.get(), reinterpret_cast<sockaddr*>(&a), &len), 0);
  ASSERT_EQ(::connect(self.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0) << strerror(errno);
  EXPECT_TRUE(isSelfConnected(self.get()));

  Fd listener(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in b{};
  b.sin_family = AF_INET;
  b.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(listener.get(), reinterpret_cast<sockaddr*>(&b), sizeof(b)), 0);
  ASSERT_EQ(::listen(listener.get(), 1), 0);
  len = sizeof(b);
  ASSERT_EQ(getsockname(listener.get(), reinterpret_cast<sockaddr*>(&b), &len), 0);
  Fd client(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  ASSERT_EQ(::connect(client.get(), reinterpret_cast<sockaddr*>(&b), sizeof(b)), 0);
  EXPECT_FALSE(isSelfConnected(client.get()));
  EXPECT_FALSE(isSelfConnected(listener.get()));  // not connected at all
}

// ---- SipHash ---------------------------------------------------------------------------------------

TEST(SipHash, ReferenceVectors) {
  // vectors_sip64 of the reference implementation (output bytes, least significant first): key 00..0f,
  // message 00 01 .. (len-1). Lengths cover every tail size and several block boundaries.
  const std::map<size_t, std::array<uint8_t, 8>> vectors = {
      {0, {0x31, 0x0e, 0x0e, 0xdd, 0x47, 0xdb, 0x6f, 0x72}},  {1, {0xfd, 0x67, 0xdc, 0x93, 0xc5, 0x39, 0xf8, 0x74}},
      {2, {0x5a, 0x4f, 0xa9, 0xd9, 0x09, 0x80, 0x6c, 0x0d}},  {3, {0x2d, 0x7e, 0xfb, 0xd7, 0x96, 0x66, 0x67, 0x85}},
      {4, {0xb7, 0x87, 0x71, 0x27, 0xe0, 0x94, 0x27, 0xcf}},  {5, {0x8d, 0xa6, 0x99, 0xcd, 0x64, 0x55, 0x76, 0x18}},
      {6, {0xce, 0xe3, 0xfe, 0x58, 0x6e, 0x46, 0xc9, 0xcb}},  {7, {0x37, 0xd1, 0x01, 0x8b, 0xf5, 0x00, 0x02, 0xab}},
      {8, {0x62, 0x24, 0x93, 0x9a, 0x79, 0xf5, 0xf5, 0x93}},  {9, {0xb0, 0xe4, 0xa9, 0x0b, 0xdf, 0x82, 0x00, 0x9e}},
      {15, {0xe5, 0x45, 0xbe, 0x49, 0x61, 0xca, 0x29, 0xa1}}, {16, {0xdb, 0x9b, 0xc2, 0x57, 0x7f, 0xcc, 0x2a, 0x3f}},
      {63, {0x72, 0x45, 0x06, 0xeb, 0x4c, 0x32, 0x8a, 0x95}},
  };
  std::array<uint8_t, 16> key{};
  for (size_t i = 0; i < 16; ++i) key[i] = static_cast<uint8_t>(i);
  uint8_t msg[64];
  for (size_t i = 0; i < 64; ++i) msg[i] = static_cast<uint8_t>(i);
  for (const auto& [len, out] : vectors) {
    uint64_t expected = 0;
    for (int i = 7; i >= 0; --i) expected = (expected << 8) | out[static_cast<size_t>(i)];
    EXPECT_EQ(sipHash24(key, msg, len), expected) << "message length " << len;
  }
  // The paper's worked example, as a 64-bit integer.
  EXPECT_EQ(sipHash24(key, msg, 15), 0xa129ca6149be45e5ULL);
}

TEST(SipHash, KeyMatters) {
  std::array<uint8_t, 16> a{}, b{};
  b[15] = 1;
  EXPECT_NE(sipHash24(a, "x", 1), sipHash24(b, "x", 1));
}

// ---- unique id -------------------------------------------------------------------------------------

UniqueIdInfo sampleInfo() {
  UniqueIdInfo info;
  info.family = AF_INET;
  info.addr[0] = 10;
  info.addr[1] = 1;
  info.addr[2] = 2;
  info.addr[3] = 3;
  info.port = 29500;
  for (size_t i = 0; i < 16; ++i) info.secret[i] = static_cast<uint8_t>(0xa0 + i);
  info.nonce = 0x0123456789abcdefULL;
  return info;
}

TEST(UniqueId, RoundTrip) {
  const UniqueIdInfo in = sampleInfo();
  const UniqueIdInfo out = decodeUniqueId(encodeUniqueId(in));
  EXPECT_EQ(out.magic, kUniqueIdMagic);
  EXPECT_EQ(out.family, in.family);
  EXPECT_EQ(0, std::memcmp(out.addr, in.addr, sizeof(in.addr)));
  EXPECT_EQ(out.port, in.port);
  EXPECT_EQ(out.secret, in.secret);
  EXPECT_EQ(out.nonce, in.nonce);
  EXPECT_FALSE(out.rootListening);
  UniqueIdInfo listening = in;
  listening.rootListening = true;
  EXPECT_TRUE(decodeUniqueId(encodeUniqueId(listening)).rootListening);

  UniqueIdInfo v6 = in;
  v6.family = AF_INET6;
  for (size_t i = 0; i < 16; ++i) v6.addr[i] = static_cast<uint8_t>(i * 7);
  const UniqueIdInfo out6 = decodeUniqueId(encodeUniqueId(v6));
  EXPECT_EQ(out6.family, AF_INET6);
  EXPECT_EQ(0, std::memcmp(out6.addr, v6.addr, 16));
}

TEST(UniqueId, RejectsGarbage) {
  strataUniqueId zeros;
  std::memset(&zeros, 0, sizeof(zeros));
  EXPECT_THROW(decodeUniqueId(zeros), InvalidArgument);

  strataUniqueId noise;
  for (size_t i = 0; i < sizeof(noise.internal); ++i) noise.internal[i] = static_cast<char>(i * 37 + 11);
  EXPECT_THROW(decodeUniqueId(noise), InvalidArgument);

  // Any single corrupted byte of a valid id is caught (checksum, magic, or reserved bytes).
  const strataUniqueId good = encodeUniqueId(sampleInfo());
  for (size_t i = 0; i < sizeof(good.internal); ++i) {
    strataUniqueId bad = good;
    bad.internal[i] = static_cast<char>(bad.internal[i] ^ 0x40);
    EXPECT_THROW(decodeUniqueId(bad), InvalidArgument) << "byte " << i;
  }
  try {
    decodeUniqueId(zeros);
  } catch (const InvalidArgument& e) {
    EXPECT_TRUE(contains(std::string(e.what()), "unique id"));
  }
}

// ---- rendezvous and control plane --------------------------------------------------------------------

class BootstrapRanks : public ::testing::TestWithParam<int> {};

TEST_P(BootstrapRanks, AllGatherBarrierSendRecvSplit) {
  const int n = GetParam();
  const UniqueIdInfo id = startLocalRoot(n % 2 ? n : 0);  // with and without an nranks hint
  std::vector<uint64_t> commIds(static_cast<size_t>(n));
  std::vector<uint64_t> splitIds(static_cast<size_t>(n));
  runRanks(n, [&](int r) {
    auto bs = Bootstrap::connect(testConfig(), id, r, n);
    ASSERT_EQ(bs->rank(), r);
    ASSERT_EQ(bs->size(), n);
    EXPECT_EQ(bs->localAddress(), "127.0.0.1");
    EXPECT_EQ(bs->secret(), id.secret);
    EXPECT_TRUE(bs->failure().empty());
    commIds[static_cast<size_t>(r)] = bs->commId();
    for (int p = 0; p < n; ++p) EXPECT_EQ(bs->peerAddress(p), "127.0.0.1");

    // allGather with a different length per rank (rank 0 contributes nothing).
    const std::string mine(static_cast<size_t>(r), static_cast<char>('a' + r));
    auto all = bs->allGather(mine.data(), mine.size());
    ASSERT_EQ(all.size(), static_cast<size_t>(n));
    for (int p = 0; p < n; ++p) EXPECT_EQ(strOf(all[static_cast<size_t>(p)]), std::string(p, 'a' + p));
    bs->barrier();

    // Ring exchange, two messages on one tag (FIFO), one on another tag, and one to itself.
    const int next = (r + 1) % n, prev = (r + n - 1) % n;
    for (int k = 0; k < 2; ++k) {
      const std::string msg = "from " + std::to_string(r) + " #" + std::to_string(k);
      bs->send(next, 5, msg.data(), msg.size());
    }
    const std::string other = "tag 6 from " + std::to_string(r);
    bs->send(next, 6, other.data(), other.size());
    bs->send(r, 7, "self", 4);
    EXPECT_EQ(strOf(bs->recv(prev, 6)), "tag 6 from " + std::to_string(prev));
    EXPECT_EQ(strOf(bs->recv(prev, 5)), "from " + std::to_string(prev) + " #0");
    EXPECT_EQ(strOf(bs->recv(prev, 5)), "from " + std::to_string(prev) + " #1");
    EXPECT_EQ(strOf(bs->recv(r, 7)), "self");

    // Split by parity, ordered by descending old rank; the last rank opts out when n > 2.
    const bool optOut = n > 2 && r == n - 1;
    auto sub = bs->split(optOut ? -1 : r % 2, -r);
    if (optOut) {
      EXPECT_EQ(sub, nullptr);
    } else {
      ASSERT_NE(sub, nullptr);
      std::vector<int> members;
      for (int p = n - 1; p >= 0; --p) {
        if (p % 2 == r % 2 && !(n > 2 && p == n - 1)) members.push_back(p);
      }
      ASSERT_EQ(sub->size(), static_cast<int>(members.size()));
      EXPECT_EQ(sub->worldRank(sub->rank()), r);
      for (int q = 0; q < sub->size(); ++q) EXPECT_EQ(sub->worldRank(q), members[static_cast<size_t>(q)]);
      EXPECT_NE(sub->commId(), bs->commId());
      splitIds[static_cast<size_t>(r)] = sub->commId();
      const uint32_t v = static_cast<uint32_t>(r);
      auto subAll = sub->allGather(&v, sizeof(v));
      for (int q = 0; q < sub->size(); ++q) {
        uint32_t got = 0;
        ASSERT_EQ(subAll[static_cast<size_t>(q)].size(), sizeof(got));
        std::memcpy(&got, subAll[static_cast<size_t>(q)].data(), sizeof(got));
        EXPECT_EQ(static_cast<int>(got), members[static_cast<size_t>(q)]);
      }
      sub->barrier();
    }
    bs->barrier();  // the parent view still works after (and independently of) the split
  });
  for (int r = 1; r < n; ++r) EXPECT_EQ(commIds[static_cast<size_t>(r)], commIds[0]);
  for (int r = 0; r < n; ++r) {
    for (int p = 0; p < n; ++p) {
      if (r == p || (n > 2 && (r == n - 1 || p == n - 1))) continue;
      if (r % 2 == p % 2) EXPECT_EQ(splitIds[static_cast<size_t>(r)], splitIds[static_cast<size_t>(p)]);
      else EXPECT_NE(splitIds[static_cast<size_t>(r)], splitIds[static_cast<size_t>(p)]);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Sizes, BootstrapRanks, ::testing::Values(1, 2, 3, 5));

TEST(Bootstrap, DistinctIdsGiveDistinctCommIds) {
  const UniqueIdInfo a = startLocalRoot(1), b = startLocalRoot(1);
  auto ba = Bootstrap::connect(testConfig(), a, 0, 1);
  auto bb = Bootstrap::connect(testConfig(), b, 0, 1);
  EXPECT_NE(ba->commId(), bb->commId());
}

// An address on loopback where nobody listens (a port bound, then closed).
UniqueIdInfo idOfAGoneRoot(bool rootListening) {
  bootstrap_io::Fd s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::bind(s.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  socklen_t len = sizeof(a);
  EXPECT_EQ(getsockname(s.get(), reinterpret_cast<sockaddr*>(&a), &len), 0);
  UniqueIdInfo id;
  id.magic = kUniqueIdMagic;
  id.family = AF_INET;
  std::memcpy(id.addr, &a.sin_addr, 4);
  id.port = ntohs(a.sin_port);
  id.secret = randomSecret();
  id.rootListening = rootListening;
  return id;
}

// Issue 30: a rank handed an id whose root has gone (the last generation's, read from a store that outlived it)
// fails at once naming the root, instead of retrying "connection refused" until the deadline (60 s here).
TEST(Bootstrap, RootGoneFromAListeningIdFailsFast) {
  EXPECT_TRUE(startLocalRoot(1).rootListening);
  const UniqueIdInfo gone = idOfAGoneRoot(true);
  try {
    Bootstrap::connect(testConfig(60000), gone, 1, 2);
    ADD_FAILURE() << "connected to a root that is gone";
  } catch (const RemoteError& e) {
    EXPECT_TRUE(contains(e.what(), "refused"));
    EXPECT_TRUE(contains(e.what(), "127.0.0.1:" + std::to_string(gone.port)));
  }
  // An id from the environment may come before its root listens: refusals are retried until the deadline.
  EXPECT_THROW(Bootstrap::connect(testConfig(1500), idOfAGoneRoot(false), 1, 2), TimeoutError);
}

TEST(Bootstrap, InvalidArguments) {
  const UniqueIdInfo id = sampleInfo();
  EXPECT_THROW(Bootstrap::connect(testConfig(), id, 2, 2), InvalidArgument);
  EXPECT_THROW(Bootstrap::connect(testConfig(), id, -1, 2), InvalidArgument);
  EXPECT_THROW(Bootstrap::connect(testConfig(), id, 0, 0), InvalidArgument);

  Config badIf = testConfig();
  badIf.socketIfname = "strata-no-such-if0";
  try {
    Bootstrap::connect(badIf, startLocalRoot(1), 0, 1);
    FAIL() << "an unknown interface name was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_TRUE(contains(std::string(e.what()), "strata-no-such-if0"));
    EXPECT_TRUE(contains(std::string(e.what()), "lo"));  // lists what exists
  }

  auto bs = Bootstrap::connect(testConfig(), startLocalRoot(1), 0, 1);
  EXPECT_THROW(bs->send(1, 0, "x", 1), InvalidArgument);
  EXPECT_THROW(bs->recv(-1, 0), InvalidArgument);
  EXPECT_THROW(bs->send(0, 0, nullptr, 4), InvalidArgument);
}

TEST(Bootstrap, SocketIfnameSelectsAdvertisedAddress) {
  Config c = testConfig();
  c.socketIfname = "lo";
  auto bs = Bootstrap::connect(c, startLocalRoot(1), 0, 1);
  EXPECT_EQ(bs->localAddress(), "127.0.0.1");
}

TEST(Bootstrap, DefaultBindAddressIsConnectable) {
  // Empty bind address: the service picks the advertised address itself; a rank must reach it.
  const UniqueIdInfo id = startRootService(testConfig(), "", 0, randomSecret(), 2);
  runRanks(2, [&](int r) {
    auto bs = Bootstrap::connect(testConfig(), decodeUniqueId(encodeUniqueId(id)), r, 2);
    bs->barrier();
  });
}

TEST(Bootstrap, WrongSecretIsRefusedAndDoesNotCount) {
  const UniqueIdInfo id = startLocalRoot(2);
  UniqueIdInfo tampered = id;
  tampered.secret[3] ^= 0x5a;

  std::thread rank0([&] {
    auto bs = Bootstrap::connect(testConfig(), id, 0, 2);
    const uint32_t v = 100;
    auto all = bs->allGather(&v, sizeof(v));
    EXPECT_EQ(all.size(), 2u);
    EXPECT_EQ(all[1].size(), sizeof(v));
  });
  // The impostor claims rank 1 while rank 0 is waiting; it must fail quickly and not complete the rendezvous.
  try {
    Bootstrap::connect(testConfig(3000), tampered, 1, 2);
    ADD_FAILURE() << "a connection with the wrong secret was accepted";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(std::string(e.what()), "secret"));
  }
  // A raw stranger that answers the challenge with garbage is closed too.
  {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(id.port);
    std::memcpy(&sa.sin_addr, id.addr, 4);
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)), 0);
    const char junk[] = "\x02\x00\x00\x00\x10\x00\x00\x00 not a valid hello";
    ASSERT_GT(::send(fd, junk, sizeof(junk), MSG_NOSIGNAL), 0);
    // Read until the root closes: challenge bytes first, then EOF (bounded by poll's timeout).
    char buf[256];
    bool closed = false;
    for (int i = 0; i < 100 && !closed; ++i) {
      pollfd p{fd, POLLIN, 0};
      ASSERT_EQ(::poll(&p, 1, 10000), 1) << "the root kept a garbage connection open";
      ssize_t got = ::recv(fd, buf, sizeof(buf), 0);
      closed = got <= 0;
    }
    EXPECT_TRUE(closed);
    ::close(fd);
  }
  runRanks(1, [&](int) {
    auto bs = Bootstrap::connect(testConfig(), id, 1, 2);
    const uint32_t v = 101;
    auto all = bs->allGather(&v, sizeof(v));
    EXPECT_EQ(all.size(), 2u);
  });
  rank0.join();
}

TEST(Bootstrap, NranksMismatchIsReported) {
  const UniqueIdInfo id = startLocalRoot(0);
  std::atomic<int> errors{0};
  std::string msgs;
  std::mutex mu;
  // Rank 0 says 2 ranks, rank 1 says 3: whichever arrives second breaks the rendezvous for both.
  runRanks(2, [&](int r) {
    try {
      Bootstrap::connect(testConfig(), id, r, r == 0 ? 2 : 3);
    } catch (const RemoteError& e) {
      ++errors;
      std::lock_guard<std::mutex> lock(mu);
      msgs += e.what();
    }
  });
  EXPECT_EQ(errors.load(), 2);
  EXPECT_TRUE(contains(msgs, "nranks mismatch"));
}

TEST(Bootstrap, DuplicateRankIsReported) {
  const UniqueIdInfo id = startLocalRoot(3);
  std::atomic<int> errors{0};
  std::string msgs;
  std::mutex mu;
  runRanks(2, [&](int) {
    try {
      Bootstrap::connect(testConfig(), id, 1, 3);
    } catch (const RemoteError& e) {
      ++errors;
      std::lock_guard<std::mutex> lock(mu);
      msgs += e.what();
    }
  });
  EXPECT_EQ(errors.load(), 2);
  EXPECT_TRUE(contains(msgs, "duplicate rank"));
}

TEST(Bootstrap, RecvTimeoutNamesPeerAndTag) {
  const UniqueIdInfo id = startLocalRoot(2);
  std::promise<void> rank0Done;
  std::shared_future<void> rank0DoneFuture = rank0Done.get_future().share();
  runRanks(2, [&](int r) {
    auto bs = Bootstrap::connect(testConfig(1500), id, r, 2);
    if (r == 1) rank0DoneFuture.wait();  // stays connected, sending nothing, until rank 0 has timed out
    if (r == 0) {
      try {
        bs->recv(1, 77);
        ADD_FAILURE() << "recv returned a message nobody sent";
      } catch (const TimeoutError& e) {
        EXPECT_TRUE(contains(std::string(e.what()), "rank 0"));
        EXPECT_TRUE(contains(std::string(e.what()), "peer 1"));
        EXPECT_TRUE(contains(std::string(e.what()), "tag 77"));
      }
      rank0Done.set_value();
    }
    bs->barrier();  // a timeout is not a failure: the view still works
    EXPECT_TRUE(bs->failure().empty());
  });
}

// A forked child runs `body` and _exit()s; never returns into the test framework.
pid_t forkChild(const std::function<int()>& body) {
  pid_t pid = fork();
  if (pid == 0) {
    int rc = 99;
    try {
      rc = body();
    } catch (...) {
      rc = 98;
    }
    _exit(rc);
  }
  return pid;
}

bool readAll(int fd, void* buf, size_t n, int timeoutMs) {
  auto* p = static_cast<char*>(buf);
  size_t done = 0;
  while (done < n) {
    pollfd pfd{fd, POLLIN, 0};
    if (::poll(&pfd, 1, timeoutMs) != 1) return false;
    ssize_t r = ::read(fd, p + done, n - done);
    if (r <= 0) return false;
    done += static_cast<size_t>(r);
  }
  return true;
}

TEST(Bootstrap, DeadRankIsReportedToSurvivors) {
  // Fork before starting any thread in this test, so the child starts from a quiet process.
  int pipefd[2];
  ASSERT_EQ(pipe2(pipefd, O_CLOEXEC), 0);
  pid_t child = forkChild([&] {
    ::close(pipefd[1]);
    strataUniqueId raw;
    if (!readAll(pipefd[0], &raw, sizeof(raw), 20000)) return 2;
    auto bs = Bootstrap::connect(testConfig(), decodeUniqueId(raw), 2, 3);
    _exit(0);  // dies without goodbye
  });
  ASSERT_GT(child, 0);
  ::close(pipefd[0]);
  const UniqueIdInfo id = startLocalRoot(3);
  const strataUniqueId raw = encodeUniqueId(id);
  ASSERT_EQ(::write(pipefd[1], &raw, sizeof(raw)), static_cast<ssize_t>(sizeof(raw)));
  ::close(pipefd[1]);

  std::atomic<int> handlerCalls{0};
  runRanks(2, [&](int r) {
    auto bs = Bootstrap::connect(testConfig(20000), id, r, 3);
    bs->setFailureHandler([&](const std::string& why) {
      if (why.find("rank 2") != std::string::npos) ++handlerCalls;
    });
    try {
      bs->recv(2, 9);
      ADD_FAILURE() << "recv from a dead rank returned";
    } catch (const RemoteError& e) {
      EXPECT_TRUE(contains(std::string(e.what()), "rank 2"));
      EXPECT_TRUE(contains(std::string(e.what()), "died"));
      EXPECT_TRUE(contains(std::string(e.what()), "pid " + std::to_string(child)));
    }
    EXPECT_TRUE(contains(bs->failure(), "rank 2"));
    EXPECT_THROW(bs->recv(1 - r, 10), RemoteError);  // every later wait fails fast too
  });
  EXPECT_EQ(handlerCalls.load(), 2);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
}

TEST(Bootstrap, ReportFailureReachesOthers) {
  const UniqueIdInfo id = startLocalRoot(3);
  std::atomic<int> handlerCalls{0};
  // The reporter waits until the others are past the barrier: a failure aborts waits in progress,
  // including a barrier's, and this test is about the recv below.
  std::latch othersReady(2);
  runRanks(3, [&](int r) {
    auto bs = Bootstrap::connect(testConfig(20000), id, r, 3);
    bs->setFailureHandler([&](const std::string& why) {
      if (why.find("boom on rank 1") != std::string::npos) ++handlerCalls;
    });
    bs->barrier();
    if (r != 1) othersReady.count_down();
    if (r == 1) {
      othersReady.wait();
      bs->reportFailure("boom on rank 1");
      EXPECT_EQ(bs->failure(), "boom on rank 1");
      return;
    }
    try {
      bs->recv(1, 3);
      ADD_FAILURE() << "recv returned after a reported failure";
    } catch (const RemoteError& e) {
      EXPECT_TRUE(contains(std::string(e.what()), "boom on rank 1"));
      EXPECT_TRUE(contains(std::string(e.what()), "rank 1"));
    }
    // A handler registered after the failure still hears about it, at once.
    bool late = false;
    bs->setFailureHandler([&](const std::string& why) { late = why.find("boom on rank 1") != std::string::npos; });
    EXPECT_TRUE(late);
  });
  EXPECT_EQ(handlerCalls.load(), 2);  // ranks 0 and 2, not the reporter itself
}

TEST(Bootstrap, LostRootIsAFailure) {
  int pipefd[2];
  ASSERT_EQ(pipe2(pipefd, O_CLOEXEC), 0);
  pid_t child = forkChild([&] {
    ::close(pipefd[0]);
    const strataUniqueId raw = encodeUniqueId(startLocalRoot(1));
    if (::write(pipefd[1], &raw, sizeof(raw)) != static_cast<ssize_t>(sizeof(raw))) return 2;
    pause();  // until killed
    return 0;
  });
  ASSERT_GT(child, 0);
  ::close(pipefd[1]);
  strataUniqueId raw;
  ASSERT_TRUE(readAll(pipefd[0], &raw, sizeof(raw), 20000));
  ::close(pipefd[0]);
  auto bs = Bootstrap::connect(testConfig(20000), decodeUniqueId(raw), 0, 1);
  ::kill(child, SIGKILL);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_THROW(bs->recv(0, 1), RemoteError);
  EXPECT_TRUE(contains(bs->failure(), "bootstrap root unreachable"));
}

// The root lives in rank 0's process. When that rank destroys its bootstrap on purpose and the process
// then ends with _exit() (a fork()ed worker does; the exit-time grace period never runs), the others lose
// the root, but the job did not fail: no failure handler may run (they abort communicators), while what
// still needs the root fails with a reason that says what happened.
TEST(Bootstrap, RootProcessLeavingOnPurposeIsNotAFailure) {
  int pipefd[2];
  ASSERT_EQ(pipe2(pipefd, O_CLOEXEC), 0);
  pid_t child = forkChild([&] {
    ::close(pipefd[0]);
    const UniqueIdInfo id = startLocalRoot(3);
    const strataUniqueId raw = encodeUniqueId(id);
    if (::write(pipefd[1], &raw, sizeof(raw)) != static_cast<ssize_t>(sizeof(raw))) return 2;
    {
      auto bs = Bootstrap::connect(testConfig(20000), id, 0, 3);
      bs->barrier();
    }  // goodbye
    _exit(0);
  });
  ASSERT_GT(child, 0);
  ::close(pipefd[1]);
  strataUniqueId raw;
  ASSERT_TRUE(readAll(pipefd[0], &raw, sizeof(raw), 20000));
  ::close(pipefd[0]);
  const UniqueIdInfo id = decodeUniqueId(raw);

  std::atomic<int> handlerCalls{0};
  runRanks(2, [&](int t) {
    const int r = t + 1;
    auto bs = Bootstrap::connect(testConfig(20000), id, r, 3);
    bs->setFailureHandler([&](const std::string&) { ++handlerCalls; });
    bs->barrier();
    for (int k = 0; k < 1000 && bs->failure().empty(); ++k) usleep(10000);
    EXPECT_TRUE(contains(bs->failure(), "bootstrap root gone"));
    EXPECT_TRUE(contains(bs->failure(), "destroyed its communicators"));
    EXPECT_TRUE(contains(bs->failure(), "pid " + std::to_string(child)));
    try {
      bs->recv(3 - r, 4);
      ADD_FAILURE() << "recv returned after the root went away";
    } catch (const RemoteError& e) {
      EXPECT_TRUE(contains(std::string(e.what()), "bootstrap root gone"));
    }
    EXPECT_THROW(bs->send(3 - r, 4, "x", 1), RemoteError);
  });
  EXPECT_EQ(handlerCalls.load(), 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
}

TEST(Bootstrap, ConnectRetriesUntilTheRootListens) {
  // Reserve a port, release it, and start the root there only after the rank began connecting.
  const uint16_t port = freeLoopbackPort();

  UniqueIdInfo id;
  id.family = AF_INET;
  const in_addr loopback{htonl(INADDR_LOOPBACK)};
  std::memcpy(id.addr, &loopback, 4);
  id.port = port;
  id.secret = randomSecret();
  std::thread rank([&] {
    auto bs = Bootstrap::connect(testConfig(), id, 0, 1);
    bs->barrier();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  startRootService(testConfig(), "127.0.0.1", port, id.secret, 1);
  rank.join();
}

TEST(Bootstrap, ConnectFromEnvEndToEnd) {
  // Threads cannot have different environments, so build the EnvLaunch each rank would discover.
  const uint16_t port = freeLoopbackPort();
  const int n = 3;
  runRanks(n, [&](int r) {
    EnvLaunch env;
    env.rank = r;
    env.size = n;
    env.rootAddr = "127.0.0.1";
    env.rootPort = port;
    env.secret = {1, 2, 3};
    env.source = "test";
    EXPECT_EQ(uniqueIdForEnv(env).nonce, uniqueIdForEnv(env).nonce);
    auto bs = connectFromEnv(testConfig(), env);
    const int v = r * 10;
    auto all = bs->allGather(&v, sizeof(v));
    for (int p = 0; p < n; ++p) {
      int got;
      std::memcpy(&got, all[static_cast<size_t>(p)].data(), sizeof(got));
      EXPECT_EQ(got, p * 10);
    }
  });
  EnvLaunch bad;
  bad.rootAddr = "no-such-host.invalid";
  bad.rootPort = 1234;
  EXPECT_THROW(uniqueIdForEnv(bad), InvalidArgument);
}

// ---- environment discovery -------------------------------------------------------------------------

/// Clears every variable discovery reads, sets the given ones, and restores everything afterwards.
class ScopedLaunchEnv {
 public:
  explicit ScopedLaunchEnv(const std::map<std::string, std::string>& vars) {
    static const char* kAll[] = {"RANK",
                                 "WORLD_SIZE",
                                 "LOCAL_RANK",
                                 "LOCAL_WORLD_SIZE",
                                 "MASTER_ADDR",
                                 "MASTER_PORT",
                                 "STRATA_SECRET",
                                 "TORCHELASTIC_RUN_ID",
                                 "TORCHELASTIC_USE_AGENT_STORE",
                                 "OMPI_COMM_WORLD_RANK",
                                 "OMPI_COMM_WORLD_SIZE",
                                 "OMPI_COMM_WORLD_LOCAL_RANK",
                                 "OMPI_COMM_WORLD_LOCAL_SIZE",
                                 "OMPI_MCA_ess_base_jobid",
                                 "PMIX_NAMESPACE",
                                 "SLURM_PROCID",
                                 "SLURM_NTASKS",
                                 "SLURM_NPROCS",
                                 "SLURM_LOCALID",
                                 "SLURM_NTASKS_PER_NODE",
                                 "SLURM_TASKS_PER_NODE",
                                 "SLURM_NODEID",
                                 "SLURM_STEP_NODELIST",
                                 "SLURM_JOB_NODELIST",
                                 "SLURM_JOB_ID",
                                 "SLURM_JOBID",
                                 "SLURM_STEP_ID",
                                 "SLURM_STEPID"};
    for (const char* name : kAll) {
      if (const char* v = std::getenv(name)) saved_[name] = v;
      else saved_[name] = std::nullopt;
      unsetenv(name);
    }
    for (const auto& [k, v] : vars) setenv(k.c_str(), v.c_str(), 1);
  }
  ~ScopedLaunchEnv() {
    for (const auto& [k, v] : saved_) {
      if (v) setenv(k.c_str(), v->c_str(), 1);
      else unsetenv(k.c_str());
    }
  }

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

TEST(EnvLaunch, Torchrun) {
  ScopedLaunchEnv env({{"RANK", "3"},
                       {"WORLD_SIZE", "8"},
                       {"LOCAL_RANK", "1"},
                       {"LOCAL_WORLD_SIZE", "4"},
                       {"MASTER_ADDR", "10.1.2.3"},
                       {"MASTER_PORT", "29500"},
                       {"TORCHELASTIC_RUN_ID", "job7"},
                       // Open MPI variables too: RANK/WORLD_SIZE take precedence.
                       {"OMPI_COMM_WORLD_RANK", "0"},
                       {"OMPI_COMM_WORLD_SIZE", "1"}});
  const EnvLaunch e = discoverEnvLaunch();
  EXPECT_EQ(e.source, "torchrun");
  EXPECT_EQ(e.rank, 3);
  EXPECT_EQ(e.size, 8);
  EXPECT_EQ(e.localRank, 1);
  EXPECT_EQ(e.localSize, 4);
  EXPECT_EQ(e.rootAddr, "10.1.2.3");
  EXPECT_EQ(e.rootPort, 29500);
  // Derived secret: deterministic, job-specific, not all zero.
  EXPECT_EQ(discoverEnvLaunch().secret, e.secret);
  EXPECT_NE(e.secret, (std::array<uint8_t, 16>{}));
  setenv("TORCHELASTIC_RUN_ID", "job8", 1);
  EXPECT_NE(discoverEnvLaunch().secret, e.secret);
  // Under the agent store, the agent owns MASTER_PORT.
  setenv("TORCHELASTIC_USE_AGENT_STORE", "True", 1);
  EXPECT_EQ(discoverEnvLaunch().rootPort, 29501);
}

TEST(EnvLaunch, StrataRunSecret) {
  ScopedLaunchEnv env({{"RANK", "0"},
                       {"WORLD_SIZE", "2"},
                       {"MASTER_ADDR", "127.0.0.1"},
                       {"MASTER_PORT", "40000"},
                       {"STRATA_SECRET", "000102030405060708090a0B0c0d0e0f"}});
  const EnvLaunch e = discoverEnvLaunch();
  EXPECT_EQ(e.source, "strata-run");
  for (size_t i = 0; i < 16; ++i) EXPECT_EQ(e.secret[i], i);
  setenv("STRATA_SECRET", "0001020304", 1);
  EXPECT_THROW(discoverEnvLaunch(), InvalidArgument);
  setenv("STRATA_SECRET", "zz0102030405060708090a0b0c0d0e0f", 1);
  EXPECT_THROW(discoverEnvLaunch(), InvalidArgument);
}

// Without STRATA_SECRET the secret is derived from the job's identity, which anyone who knows the job id can
// compute, while rank 0's root listens on every interface: rank 0 says so on stderr, even when logging is off.
TEST(EnvLaunch, DerivedSecretIsFlaggedAndWarnedAbout) {
  {
    ScopedLaunchEnv env({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "1"}});
    EXPECT_TRUE(discoverEnvLaunch().secretDerived);
    setenv("STRATA_SECRET", "000102030405060708090a0b0c0d0e0f", 1);
    EXPECT_FALSE(discoverEnvLaunch().secretDerived);
  }
  for (bool derived : {true, false}) {
    const uint16_t port = freeLoopbackPort();
    EnvLaunch env;
    env.rank = 0;
    env.size = 1;
    env.rootAddr = "127.0.0.1";
    env.rootPort = port;
    env.secret = {4, 5, 6};
    env.source = "torchrun";
    env.secretDerived = derived;
    testing::internal::CaptureStderr();
    { auto bs = connectFromEnv(testConfig(), env); }
    const std::string err = testing::internal::GetCapturedStderr();
    EXPECT_EQ(contains(err, "STRATA_SECRET is not set"), derived) << err;
  }
}

// One process started without any launcher (python train.py, strata-train --dp 1 --tp 1) is a world of one.
TEST(EnvLaunch, NoLauncherIsAWorldOfOne) {
  ScopedLaunchEnv env({});
  const EnvLaunch e = discoverEnvLaunch();
  EXPECT_EQ(e.source, "single process");
  EXPECT_EQ(e.rank, 0);
  EXPECT_EQ(e.size, 1);
  auto bs = connectFromEnv(testConfig(), e);
  EXPECT_EQ(bs->rank(), 0);
  EXPECT_EQ(bs->size(), 1);
  const int v = 42;
  auto all = bs->allGather(&v, sizeof(v));
  ASSERT_EQ(all.size(), 1u);
  // A half-set launch is still an error, not a world of one.
  setenv("WORLD_SIZE", "2", 1);
  EXPECT_THROW(discoverEnvLaunch(), InvalidArgument);
}

TEST(EnvLaunch, TorchrunErrors) {
  {
    ScopedLaunchEnv env({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "29500"}});
    try {
      discoverEnvLaunch();
      FAIL() << "missing MASTER_ADDR accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_TRUE(contains(std::string(e.what()), "MASTER_ADDR"));
    }
  }
  {
    ScopedLaunchEnv env({{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "29500"}});
    EXPECT_THROW(discoverEnvLaunch(), InvalidArgument);
  }
  {
    ScopedLaunchEnv env({{"RANK", "x"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "29500"}});
    EXPECT_THROW(discoverEnvLaunch(), InvalidArgument);
  }
  {
    ScopedLaunchEnv env({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "70000"}});
    EXPECT_THROW(discoverEnvLaunch(), InvalidArgument);
  }
}

// A port derived from a job id (no MASTER_PORT) stays below Linux's default ephemeral range (32768-60999): there,
// any process's outgoing connection may hold it when the root listens (a CI run failed "cannot listen on
// 0.0.0.0:33817" under mpiexec while other tests' connections churned through the range).
TEST(EnvLaunch, DerivedPortsStayOutOfTheEphemeralRange) {
  for (int job = 1; job <= 300; ++job) {
    ScopedLaunchEnv env({{"OMPI_COMM_WORLD_RANK", "0"},
                         {"OMPI_COMM_WORLD_SIZE", "2"},
                         {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                         {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                         {"OMPI_MCA_ess_base_jobid", std::to_string(job * 7919)}});
    const EnvLaunch e = discoverEnvLaunch();
    ASSERT_GE(e.rootPort, 20000) << "job " << job * 7919;
    ASSERT_LE(e.rootPort, 32767) << "job " << job * 7919;
  }
}

TEST(EnvLaunch, OpenMpi) {
  {
    ScopedLaunchEnv env({{"OMPI_COMM_WORLD_RANK", "1"},
                         {"OMPI_COMM_WORLD_SIZE", "4"},
                         {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                         {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"},
                         {"OMPI_MCA_ess_base_jobid", "123456789"}});
    const EnvLaunch e = discoverEnvLaunch();
    EXPECT_EQ(e.source, "openmpi");
    EXPECT_EQ(e.rank, 1);
    EXPECT_EQ(e.size, 4);
    EXPECT_EQ(e.localRank, 1);
    EXPECT_EQ(e.localSize, 4);
    EXPECT_EQ(e.rootAddr, "127.0.0.1");  // one host
    EXPECT_GE(e.rootPort, 20000);
    EXPECT_LE(e.rootPort, 32767);
    // Another rank of the same job computes the same port and secret.
    setenv("OMPI_COMM_WORLD_RANK", "3", 1);
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "3", 1);
    const EnvLaunch other = discoverEnvLaunch();
    EXPECT_EQ(other.rootPort, e.rootPort);
    EXPECT_EQ(other.secret, e.secret);
    setenv("MASTER_PORT", "31000", 1);
    EXPECT_EQ(discoverEnvLaunch().rootPort, 31000);
  }
  {
    ScopedLaunchEnv env({{"OMPI_COMM_WORLD_RANK", "0"},
                         {"OMPI_COMM_WORLD_SIZE", "8"},
                         {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                         {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"},
                         {"PMIX_NAMESPACE", "prterun-host-1234@1"}});
    try {
      discoverEnvLaunch();
      FAIL() << "multi-host Open MPI without MASTER_ADDR accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_TRUE(contains(std::string(e.what()), "MASTER_ADDR"));
    }
    setenv("MASTER_ADDR", "node7", 1);
    const EnvLaunch e = discoverEnvLaunch();
    EXPECT_EQ(e.rootAddr, "node7");
    EXPECT_GE(e.rootPort, 20000);
    EXPECT_LE(e.rootPort, 59999);
  }
}

TEST(EnvLaunch, Slurm) {
  ScopedLaunchEnv env({{"SLURM_PROCID", "5"},
                       {"SLURM_NTASKS", "7"},
                       {"SLURM_LOCALID", "0"},
                       {"SLURM_TASKS_PER_NODE", "2(x3),1"},
                       {"SLURM_NODEID", "3"},
                       {"SLURM_STEP_NODELIST", "node[01-04,07],gpu3"},
                       {"SLURM_JOB_NODELIST", "other[1-9]"},
                       {"SLURM_JOB_ID", "4242"},
                       {"SLURM_STEP_ID", "0"}});
  const EnvLaunch e = discoverEnvLaunch();
  EXPECT_EQ(e.source, "slurm");
  EXPECT_EQ(e.rank, 5);
  EXPECT_EQ(e.size, 7);
  EXPECT_EQ(e.localRank, 0);
  EXPECT_EQ(e.localSize, 1);
  EXPECT_EQ(e.rootAddr, "node01");  // the step's list wins over the job's
  EXPECT_GE(e.rootPort, 20000);
  EXPECT_LE(e.rootPort, 59999);
  const uint16_t port = e.rootPort;
  setenv("SLURM_STEP_ID", "1", 1);  // another step of the job: another port (almost surely) and secret
  EXPECT_NE(discoverEnvLaunch().secret, e.secret);
  setenv("SLURM_STEP_ID", "0", 1);
  EXPECT_EQ(discoverEnvLaunch().rootPort, port);
  unsetenv("SLURM_STEP_NODELIST");
  EXPECT_EQ(discoverEnvLaunch().rootAddr, "other1");
  setenv("MASTER_ADDR", "10.0.0.9", 1);
  setenv("MASTER_PORT", "23456", 1);
  EXPECT_EQ(discoverEnvLaunch().rootAddr, "10.0.0.9");
  EXPECT_EQ(discoverEnvLaunch().rootPort, 23456);
}

TEST(EnvLaunch, SlurmHelpers) {
  EXPECT_EQ(firstHostOfNodelist("node[01-04,07],gpu3"), "node01");
  EXPECT_EQ(firstHostOfNodelist("gpu3"), "gpu3");
  EXPECT_EQ(firstHostOfNodelist("a1,b2"), "a1");
  EXPECT_EQ(firstHostOfNodelist("rack[2-3]-n[005,9]"), "rack2-n005");
  EXPECT_EQ(firstHostOfNodelist("n[7]"), "n7");
  EXPECT_THROW(firstHostOfNodelist(""), InvalidArgument);
  EXPECT_THROW(firstHostOfNodelist("node[01-04"), InvalidArgument);
  EXPECT_THROW(firstHostOfNodelist("node[x]"), InvalidArgument);

  EXPECT_EQ(tasksOnNode("4", 0), 4);
  EXPECT_EQ(tasksOnNode("2(x3),1", 0), 2);
  EXPECT_EQ(tasksOnNode("2(x3),1", 2), 2);
  EXPECT_EQ(tasksOnNode("2(x3),1", 3), 1);
  EXPECT_THROW(tasksOnNode("2(x3),1", 4), InvalidArgument);
  EXPECT_THROW(tasksOnNode("two", 0), InvalidArgument);
}

}  // namespace
}  // namespace strata
