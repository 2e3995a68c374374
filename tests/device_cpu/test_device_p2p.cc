// Send/recv groups in the device executor (device/dev_plan.h lowerP2P), run by the device protocol on CPU threads:
// every message arrives whole, in the order NCCL matches them, whatever each rank's group holds and in which order;
// a message of other bytes than its receive expects fails the call (it is neither cut short nor waited for until
// the deadline). ctest label device_cpu; CI also runs it under ThreadSanitizer.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "device/cpu_exec.h"
#include "device/dev_plan.h"
#include "util/error.h"

namespace strata {
namespace {

using devproto::ProtoConfig;

// Small pieces: a message of a few KiB crosses many slots and wraps the FIFO (4 x 256 bytes); LL up to 64 bytes.
constexpr ProtoConfig kSmall{256, 4, 64};
// All three protocols: LL up to 64 B, LL128 up to 512 B, Simple beyond.
constexpr ProtoConfig kMixed{256, 4, 64, 512};

// One message of an exchange: `from` sends `bytes` to `to`.
struct Msg {
  int from = 0, to = 0;
  uint64_t bytes = 0;
};

// A rank's calls: the sends and receives of the exchange that are its own, in an issue order of its own that keeps
// the order of the messages on each connection (the n-th send to a peer meets that peer's n-th receive).
struct RankCalls {
  std::vector<DevP2PCall> calls;
  std::vector<size_t> msg;  // the message of each call
};

// The calls in `order` (indices into rc).
RankCalls reordered(const RankCalls& rc, const std::vector<size_t>& order) {
  RankCalls out;
  for (size_t i : order) {
    out.calls.push_back(rc.calls[i]);
    out.msg.push_back(rc.msg[i]);
  }
  return out;
}

// adversarial: each rank issues its sends farthest peer first and its receives nearest peer first (one message per
// connection), the order in which lanes that kept issue order would wait in a cycle.
std::vector<RankCalls> callsOf(int n, const std::vector<Msg>& msgs, std::mt19937_64& rng, bool adversarial = false) {
  std::vector<RankCalls> out(static_cast<size_t>(n));
  for (size_t m = 0; m < msgs.size(); ++m) {
    const Msg& g = msgs[m];
    out[static_cast<size_t>(g.from)].calls.push_back(DevP2PCall{true, g.to, g.bytes});
    out[static_cast<size_t>(g.from)].msg.push_back(m);
    out[static_cast<size_t>(g.to)].calls.push_back(DevP2PCall{false, g.from, g.bytes});
    out[static_cast<size_t>(g.to)].msg.push_back(m);
  }
  if (adversarial) {
    for (int r = 0; r < n; ++r) {
      RankCalls& rc = out[static_cast<size_t>(r)];
      std::vector<size_t> order(rc.calls.size());
      for (size_t i = 0; i < order.size(); ++i) order[i] = i;
      auto key = [&](size_t i) {
        const DevP2PCall& c = rc.calls[i];
        return c.send ? -((c.peer - r + n) % n) : (r - c.peer + n) % n;
      };
      std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return key(a) < key(b); });
      rc = reordered(rc, order);
    }
    return out;
  }
  for (RankCalls& rc : out) {
    // Shuffle, then put each connection's calls back in their order at the positions the shuffle gave that
    // connection.
    std::vector<size_t> order(rc.calls.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::shuffle(order.begin(), order.end(), rng);
    std::map<std::pair<int, bool>, std::vector<size_t>> positions, members;
    for (size_t pos = 0; pos < order.size(); ++pos) {
      const DevP2PCall& c = rc.calls[order[pos]];
      positions[{c.peer, c.send}].push_back(pos);
      members[{c.peer, c.send}].push_back(order[pos]);
    }
    std::vector<size_t> placed(order.size());
    for (auto& [key, pos] : positions) {
      auto& mem = members[key];
      std::sort(mem.begin(), mem.end());
      for (size_t k = 0; k < pos.size(); ++k) placed[pos[k]] = mem[k];
    }
    rc = reordered(rc, placed);
  }
  return out;
}

strataDataType_t unitType(size_t unit) {
  return unit == 8 ? strataUint64 : unit == 4 ? strataUint32 : unit == 2 ? strataFloat16 : strataUint8;
}

struct Exchange {
  int nranks = 2;
  std::vector<Msg> msgs;
  int maxChannels = 1;
  size_t bytesPerChannel = 64 << 10;
  uint64_t timeoutNs = 120'000'000'000ull;  // a protocol that hangs fails
  bool adversarial = false;                 // callsOf's issue order
  std::string str() const {
    std::string s = "n=" + std::to_string(nranks) + " channels<=" + std::to_string(maxChannels) + " per " +
                    std::to_string(bytesPerChannel) + ":";
    for (const Msg& m : msgs)
      s += " " + std::to_string(m.from) + "->" + std::to_string(m.to) + ":" + std::to_string(m.bytes);
    return s;
  }
};

// Runs an exchange: every rank lowers its own calls with an element unit of its own (the widest that divides its
// calls' bytes and addresses, sometimes narrower), on its own thread. Returns each rank's code; `recv[r][k]` is
// what rank r's k-th call received (empty for a send).
std::vector<uint32_t> runExchange(CpuDeviceWorld& dw, const Exchange& x, std::mt19937_64& rng,
                                  std::vector<RankCalls>* callsOut, std::vector<std::vector<std::vector<char>>>* recv,
                                  std::vector<std::vector<std::vector<char>>>* sent) {
  const int n = x.nranks;
  const std::vector<RankCalls> calls = callsOf(n, x.msgs, rng, x.adversarial);
  std::vector<DevPlan> plans;
  std::vector<std::vector<void*>> tables(static_cast<size_t>(n));
  std::vector<size_t> units(static_cast<size_t>(n));
  // Buffers: each call's bytes at an offset 0..8 into its own storage (with a guard byte after), filled with bytes
  // of its message.
  std::vector<std::vector<std::vector<char>>> store(static_cast<size_t>(n));
  recv->assign(static_cast<size_t>(n), {});
  sent->assign(static_cast<size_t>(n), {});
  for (int r = 0; r < n; ++r) {
    const RankCalls& rc = calls[static_cast<size_t>(r)];
    size_t unit = 8;
    std::vector<size_t> offsets;
    for (const DevP2PCall& c : rc.calls) {
      const size_t off = rng() % 3 == 0 ? rng() % 9 : 0;
      offsets.push_back(off);
      for (uint64_t v : {c.bytes, static_cast<uint64_t>(off)})
        while (unit > 1 && v % unit != 0) unit /= 2;
    }
    if (rng() % 4 == 0) unit = std::max<size_t>(1, unit / 2);  // narrower than it could be
    units[static_cast<size_t>(r)] = unit;
    auto& st = store[static_cast<size_t>(r)];
    auto& tb = tables[static_cast<size_t>(r)];
    tb.assign(rc.calls.size() * kBuffersPerColl, nullptr);
    for (size_t k = 0; k < rc.calls.size(); ++k) {
      const DevP2PCall& c = rc.calls[k];
      // 16-byte aligned storage (a vector of uint64_t pairs), viewed as bytes from `off`.
      st.emplace_back(c.bytes + offsets[k] + 1 + 16, 0);
      char* base = st.back().data();
      char* aligned = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(base) + 15) / 16 * 16);
      char* p = aligned + offsets[k];
      if (c.send) {
        const size_t m = rc.msg[k];
        for (uint64_t i = 0; i < c.bytes; ++i) p[i] = static_cast<char>((m * 131 + i * 7 + 1) & 0xff);
        tb[k * kBuffersPerColl + kBufSend] = p;
      } else {
        tb[k * kBuffersPerColl + kBufRecv] = p;
      }
    }
    plans.push_back(lowerP2P(r, n, rc.calls, unit, x.maxChannels, x.bytesPerChannel));
    EXPECT_LE(plans.back().lanes(), kMaxDevLanes) << x.str() << ": rank " << r;
  }
  std::vector<uint32_t> codes(static_cast<size_t>(n), 0);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      CpuCall call;
      call.bufTable = tables[static_cast<size_t>(r)].data();
      call.dtype = unitType(units[static_cast<size_t>(r)]);
      call.timeoutNs = x.timeoutNs;
      codes[static_cast<size_t>(r)] = runRankOnCpu(dw, r, plans[static_cast<size_t>(r)], call);
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) {
    const RankCalls& rc = calls[static_cast<size_t>(r)];
    for (size_t k = 0; k < rc.calls.size(); ++k) {
      const DevP2PCall& c = rc.calls[k];
      const char* p = static_cast<const char*>(
          tables[static_cast<size_t>(r)][k * kBuffersPerColl + (c.send ? kBufSend : kBufRecv)]);
      // The byte after the buffer too: a guard nothing may write.
      (c.send ? (*sent)[static_cast<size_t>(r)] : (*recv)[static_cast<size_t>(r)]).emplace_back(p, p + c.bytes + 1);
      (c.send ? (*recv)[static_cast<size_t>(r)] : (*sent)[static_cast<size_t>(r)]).emplace_back();
    }
  }
  *callsOut = calls;
  return codes;
}

void checkExchange(CpuDeviceWorld& dw, const Exchange& x, std::mt19937_64& rng) {
  std::vector<RankCalls> calls;
  std::vector<std::vector<std::vector<char>>> recv, sent;
  const auto codes = runExchange(dw, x, rng, &calls, &recv, &sent);
  for (int r = 0; r < x.nranks; ++r)
    ASSERT_EQ(codes[static_cast<size_t>(r)], 0u) << x.str() << ": rank " << r << " failed";
  for (int r = 0; r < x.nranks; ++r) {
    const RankCalls& rc = calls[static_cast<size_t>(r)];
    for (size_t k = 0; k < rc.calls.size(); ++k) {
      const DevP2PCall& c = rc.calls[k];
      const size_t m = rc.msg[k];
      const auto& got = c.send ? sent[static_cast<size_t>(r)][k] : recv[static_cast<size_t>(r)][k];
      for (uint64_t i = 0; i < c.bytes; ++i) {
        if (got[i] != static_cast<char>((m * 131 + i * 7 + 1) & 0xff)) {
          FAIL() << x.str() << ": rank " << r << " call " << k << " (" << (c.send ? "send to " : "recv from ") << c.peer
                 << ", " << c.bytes << " bytes) byte " << i << " is wrong";
        }
      }
      EXPECT_EQ(got[c.bytes], 0) << x.str() << ": rank " << r << " call " << k << " wrote past its buffer";
    }
  }
}

uint64_t randomBytes(std::mt19937_64& rng, const ProtoConfig& cfg) {
  const uint64_t fifo = static_cast<uint64_t>(cfg.nslots) * cfg.pieceBytes;
  switch (rng() % 6) {
    case 0: return rng() % 3;                   // 0, 1, 2
    case 1: return 1 + rng() % cfg.llMaxBytes;  // LL
    case 2: return 8 * (1 + rng() % 40);        // whole words, LL, LL128 or Simple
    case 3: return fifo + 1 + rng() % 700;      // more than the FIFO holds
    default: return rng() % 600;
  }
}

// ---- every message arrives -----------------------------------------------------------------------------------------

// Random groups at n = 1..8: messages between random pairs (self included) of 0, 1, odd, LL, LL128, Simple and more
// than the FIFO's bytes, several on one connection, in a random issue order per rank, split into channels or not. Every
// message arrives whole and in NCCL's matching order, and nothing is written past a receive buffer.
TEST(DeviceP2P, GroupsDeliverEveryMessage) {
  std::mt19937_64 rng(777);
  std::vector<std::unique_ptr<CpuDeviceWorld>> worlds;
  for (int n = 1; n <= 8; ++n) worlds.push_back(std::make_unique<CpuDeviceWorld>(n, kMixed, 4));
  for (int i = 0; i < 300; ++i) {
    Exchange x;
    x.nranks = 1 + static_cast<int>(rng() % 8);
    x.maxChannels = 1 + static_cast<int>(rng() % 4);
    x.bytesPerChannel = rng() % 2 ? 256 : 64 << 10;
    const int msgs = static_cast<int>(rng() % 12);
    for (int m = 0; m < msgs; ++m) {
      Msg g;
      g.from = static_cast<int>(rng() % static_cast<uint64_t>(x.nranks));
      g.to = rng() % 5 == 0 ? g.from : static_cast<int>(rng() % static_cast<uint64_t>(x.nranks));
      g.bytes = randomBytes(rng, kMixed);
      x.msgs.push_back(g);
    }
    checkExchange(*worlds[static_cast<size_t>(x.nranks - 1)], x, rng);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

// All-to-all by sends and receives (how torch's NCCL backend runs all_to_all): every rank sends to and receives
// from every rank, each message larger than the FIFO, at n = 2..8, with channels.
TEST(DeviceP2P, AllToAllBySendRecv) {
  std::mt19937_64 rng(4242);
  for (int n = 2; n <= 8; ++n) {
    CpuDeviceWorld dw(n, kSmall, 4);
    Exchange x;
    x.nranks = n;
    x.maxChannels = 4;
    x.bytesPerChannel = 512;
    for (int a = 0; a < n; ++a)
      for (int b = 0; b < n; ++b) x.msgs.push_back(Msg{a, b, 2000 + 8 * static_cast<uint64_t>(a * n + b)});
    checkExchange(dw, x, rng);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

// More than 32 ranks: peers share lanes (distance mod 31), each lane in order of distance. Messages at distances 1,
// 2, 32 and 33 (so two distances per lane), each larger than the FIFO, issued farthest send first and nearest
// receive first on every rank: lanes in issue order would wait in a cycle here (the deadline would fail the call).
TEST(DeviceP2P, SharedLanesBeyond32Ranks) {
  const int n = 34;
  std::mt19937_64 rng(99);
  CpuDeviceWorld dw(n, kSmall, 1);
  Exchange x;
  x.nranks = n;
  x.adversarial = true;
  x.timeoutNs = 20'000'000'000ull;
  for (int a = 0; a < n; ++a)
    for (int d : {32, 1, 33, 2}) x.msgs.push_back(Msg{a, (a + d) % n, 1500 + static_cast<uint64_t>(d)});
  checkExchange(dw, x, rng);
  // Every rank's plan: two send lanes and two receive lanes, distances ascending in each.
  const auto calls = callsOf(n, x.msgs, rng);
  const DevPlan p = lowerP2P(0, n, calls[0].calls, 1, 1, 64 << 10);
  EXPECT_EQ(p.lanes(), 4);
}

// ---- what is refused, what fails -------------------------------------------------------------------------------

// A receive that expects other bytes than its message has: the receiver's call fails, naming the peer and both
// sizes, within the deadline; a sender whose message the FIFO cannot hold times out rather than hang.
TEST(DeviceP2P, SizeMismatchFailsTheReceive) {
  for (const auto& [sent, expected] :
       std::vector<std::pair<uint64_t, uint64_t>>{{100, 200}, {200, 100}, {5000, 100}, {8, 16}, {3000, 3001}}) {
    // A fresh world per pair: after a failure the connection's steps no longer agree (as a failed communicator is
    // not used again).
    CpuDeviceWorld dw(2, kSmall, 1);
    std::vector<std::vector<char>> bufs{std::vector<char>(sent), std::vector<char>(expected)};
    std::vector<void*> t0{bufs[0].data(), nullptr, nullptr}, t1{nullptr, bufs[1].data(), nullptr};
    const DevPlan p0 = lowerP2P(0, 2, {DevP2PCall{true, 1, sent}}, 1, 1, 64 << 10);
    const DevPlan p1 = lowerP2P(1, 2, {DevP2PCall{false, 0, expected}}, 1, 1, 64 << 10);
    uint32_t c0 = 0, c1 = 0;
    const auto start = std::chrono::steady_clock::now();
    std::thread r0([&] {
      CpuCall call;
      call.bufTable = t0.data();
      call.dtype = strataUint8;
      call.timeoutNs = 300'000'000;
      c0 = runRankOnCpu(dw, 0, p0, call);
    });
    CpuCall call;
    call.bufTable = t1.data();
    call.dtype = strataUint8;
    call.timeoutNs = 300'000'000;
    c1 = runRankOnCpu(dw, 1, p1, call);
    r0.join();
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_LT(took, 2.0);
    ASSERT_EQ(c1, devproto::kFailMismatch) << sent << " sent, " << expected << " expected";
    EXPECT_EQ(dw.failure(1)->peer, 0);
    EXPECT_EQ(dw.failure(1)->expected, expected);
    EXPECT_EQ(dw.failure(1)->got, sent);
    // The sender finishes if the FIFO holds its message, else its deadline ends it.
    EXPECT_TRUE(c0 == devproto::kFailNone || c0 == devproto::kFailTimedOut) << c0;
  }
}

TEST(DeviceP2P, RefusesWhatItCannotRun) {
  // A peer out of range.
  EXPECT_THROW(lowerP2P(0, 2, {DevP2PCall{true, 2, 8}}, 1, 1, 1024), InvalidArgument);
  EXPECT_THROW(lowerP2P(0, 2, {DevP2PCall{false, -1, 8}}, 1, 1, 1024), InvalidArgument);
  // Sends to self and receives from self that do not pair up.
  EXPECT_THROW(lowerP2P(1, 2, {DevP2PCall{true, 1, 8}}, 1, 1, 1024), InvalidUsage);
  EXPECT_THROW(lowerP2P(1, 2, {DevP2PCall{true, 1, 8}, DevP2PCall{false, 1, 16}}, 1, 1, 1024), InvalidUsage);
  // Zero-byte calls are skipped: nothing to run.
  EXPECT_EQ(lowerP2P(0, 2, {DevP2PCall{true, 1, 0}, DevP2PCall{false, 1, 0}}, 1, 1, 1024).lanes(), 0);
}

// The plan's shape: channels per message from its bytes (the same at both ends), lanes within kMaxDevLanes at every
// n up to 64 for a full exchange.
TEST(DeviceP2P, ChannelsAndLanesFitTheKernel) {
  EXPECT_EQ(p2pChannels(2, 1 << 20, 8, 64 << 10), 8);
  EXPECT_EQ(p2pChannels(2, 100, 8, 64 << 10), 1);
  EXPECT_EQ(p2pChannels(8, 1 << 20, 8, 64 << 10), 4);  // 14 lanes per channel: 4 channels fit in 63
  EXPECT_EQ(p2pChannels(34, 1 << 20, 8, 64 << 10), 1);
  for (int n = 2; n <= 64; ++n) {
    std::vector<DevP2PCall> calls;
    for (int p = 0; p < n; ++p) {
      calls.push_back(DevP2PCall{true, p, 1 << 20});
      calls.push_back(DevP2PCall{false, p, 1 << 20});
    }
    const DevPlan plan = lowerP2P(0, n, calls, 8, 32, 64 << 10);
    EXPECT_LE(plan.lanes(), kMaxDevLanes) << n;
    EXPECT_EQ(plan.channels, p2pChannels(n, 1 << 20, 32, 64 << 10)) << n;
  }
}

}  // namespace
}  // namespace strata
