// The device protocol (src/device/proto.h) on CPU threads and processes: the code the GPU kernels run, executed
// by the CPU policy over shared memory, checked bit for bit against the host path (the reference interpreter runs
// the same plans with the host's PlanRunner and reduction kernels). ctest label device_cpu; CI also runs it under
// ThreadSanitizer (scripts/sanitize.sh).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "../common/msccl_xml.h"
#include "collectives/algorithms.h"
#include "collectives/plan_program.h"
#include "core/interpreter.h"
#include "device/cpu_exec.h"
#include "device/dev_plan.h"
#include "kernels/reduce.h"
#include "util/dtype.h"
#include "util/error.h"

namespace strata {
namespace {

using devproto::ProtoConfig;

// Small pieces so that counts of a few hundred elements cross many slots and wrap the FIFO; LL for ops up to 64 B.
constexpr ProtoConfig kSmall{256, 4, 64};
// Simple only (no LL), one-slot FIFO-sized pieces.
constexpr ProtoConfig kSimpleOnly{128, 2, 0};
// LL for every op up to its whole piece.
constexpr ProtoConfig kAllLL{128, 3, 128};
// LL up to 64 B, LL128 beyond for every op (pieces of 256 B: lines of 120 bytes, the piece's last one partial).
constexpr ProtoConfig kLL128{256, 4, 64, 1u << 30};
// All three protocols: LL up to 64 B, LL128 up to 512 B, Simple beyond.
constexpr ProtoConfig kMixed{256, 4, 64, 512};
// LL128 from the first byte (no LL), pieces of 512 B.
constexpr ProtoConfig kAllLL128{512, 3, 0, 1u << 30};

const strataDataType_t kAllTypes[] = {strataInt8,    strataUint8,    strataInt32,      strataUint32,
                                      strataInt64,   strataUint64,   strataFloat16,    strataFloat32,
                                      strataFloat64, strataBfloat16, strataFloat8e4m3, strataFloat8e5m2};
const ReduceKind kAllOps[] = {ReduceKind::kSum, ReduceKind::kProd, ReduceKind::kMax, ReduceKind::kMin};
const CollKind kKinds[] = {CollKind::kAllReduce, CollKind::kReduceScatter, CollKind::kAllGather,
                           CollKind::kBroadcast, CollKind::kReduce,        CollKind::kAllToAll};

struct Case {
  CollKind kind = CollKind::kAllReduce;
  std::string algorithm;
  int nranks = 2;
  size_t count = 0;
  int root = 0;
  bool inPlace = false;
  strataDataType_t dtype = strataFloat32;
  ReduceKind op = ReduceKind::kSum;
  double preMul = 1.0;   // PreMulSum (float types) or its integer factor
  uint64_t postDiv = 1;  // integer Avg
  uint32_t threads = 1;  // per lane: >1 runs each lane as a group, as a thread block
  int channels = 1;      // channels (the executor's algorithms only; the others run one)
  bool mixed = false;    // odd ranks take the other placement: in place is each rank's own choice
  int hostSize = 0;      // > 0: "hosts" of this many consecutive ranks (CollArgs::hostOf), for hierarchical plans
  int misalign = -1;     // >= 0: rank r's user buffers start at these bytes mod 16 (sendMis, recvMis); -1: malloc's
  const PlanProgram* program = nullptr;  // a loaded plan program in place of the algorithm (its own channels)
  uint32_t sendMis(int r) const {
    return static_cast<uint32_t>(misalign + r * static_cast<int>(dtypeSize(dtype))) % 16;
  }
  uint32_t recvMis(int r) const {
    return static_cast<uint32_t>(misalign + 3 * (r + 1) * static_cast<int>(dtypeSize(dtype))) % 16;
  }
  bool inPlaceAt(int r) const { return inPlace != (mixed && r % 2 == 1); }
  std::string str() const {
    return std::string(collName(kind)) + "/" + algorithm + " n=" + std::to_string(nranks) +
           " count=" + std::to_string(count) + " root=" + std::to_string(root) + (inPlace ? " in-place" : "") +
           " dtype=" + std::to_string(dtype) + " op=" + std::to_string(static_cast<int>(op)) +
           (preMul != 1.0 ? " premul=" + std::to_string(preMul) : "") +
           (postDiv != 1 ? " postdiv=" + std::to_string(postDiv) : "") +
           (threads > 1 ? " threads/lane=" + std::to_string(threads) : "") +
           (channels > 1 ? " channels=" + std::to_string(channels) : "") + (mixed ? " mixed-placement" : "") +
           (misalign >= 0 ? " misalign=" + std::to_string(misalign) : "") +
           (hostSize > 0 ? " hosts-of=" + std::to_string(hostSize) : "");
  }
};

size_t sendElems(const Case& c, int r) {
  const size_t n = static_cast<size_t>(c.nranks);
  switch (c.kind) {
    case CollKind::kReduceScatter:
    case CollKind::kAllToAll: return c.count * n;
    case CollKind::kBroadcast: return r == c.root ? c.count : 0;
    default: return c.count;
  }
}
size_t recvElems(const Case& c, int r) {
  const size_t n = static_cast<size_t>(c.nranks);
  switch (c.kind) {
    case CollKind::kAllGather:
    case CollKind::kAllToAll: return c.count * n;
    case CollKind::kReduce: return r == c.root ? c.count : 0;
    default: return c.count;
  }
}
size_t inPlaceSendOffset(const Case& c, int r) {
  return c.kind == CollKind::kAllGather ? static_cast<size_t>(r) * c.count : 0;
}
size_t inPlaceRecvOffset(const Case& c, int r) {
  return c.kind == CollKind::kReduceScatter ? static_cast<size_t>(r) * c.count : 0;
}

// One rank's buffers: the user's memory (send and receive, or one area in place) and scratch.
struct RankMem {
  std::vector<char> send, recv, area, scratch;
  void* sendPtr = nullptr;
  void* recvPtr = nullptr;
};

// Finite inputs of every dtype: random values on a grid the narrow formats round to something finite.
void fillInputs(const Case& c, int r, void* buf, size_t elems, uint64_t seed) {
  std::mt19937_64 rng(seed * 1000003u + static_cast<uint64_t>(r));
  for (size_t i = 0; i < elems; ++i) {
    double v;
    if (dtypeIsFloat(c.dtype)) {
      v = static_cast<double>(static_cast<int64_t>(rng() % 49) - 24) / 8.0;  // -3 .. 3 in eighths
    } else {
      v = static_cast<double>(static_cast<int64_t>(rng() % 201) - 100);
      if (c.dtype == strataUint8 || c.dtype == strataUint32 || c.dtype == strataUint64) v = std::abs(v);
    }
    storeFromDouble(buf, i, c.dtype, v);
  }
}

// Makes every rank's buffers and plan for case c; the same inputs for the device run and the reference run.
struct World {
  std::vector<Plan> plans;
  std::vector<RankMem> mem;
};

bool makeWorld(const Case& c, const ProtoConfig& cfg, uint64_t seed, bool outOfPlacePlan, World* w) {
  const size_t es = dtypeSize(c.dtype);
  for (int r = 0; r < c.nranks; ++r) {
    CollArgs args;
    args.kind = c.kind;
    args.nranks = c.nranks;
    args.rank = r;
    args.count = c.count;
    args.root = c.root;
    args.inPlace = c.inPlaceAt(r) && !outOfPlacePlan;
    if (c.hostSize > 0)
      for (int q = 0; q < c.nranks; ++q) args.hostOf.push_back(q / c.hostSize);
    // The executor's chunk rule: half the connection's capacity (in whole pieces of either protocol).
    args.chunkElems = std::max<size_t>(1, static_cast<size_t>(cfg.nslots) * cfg.pieceBytes / 2 / es);
    try {
      w->plans.push_back(c.program ? planOf(*c.program, args) : makePlan(args, c.algorithm));
    } catch (const InvalidArgument&) {
      return false;  // not a combination this algorithm serves
    }
  }
  w->mem.resize(static_cast<size_t>(c.nranks));
  for (int r = 0; r < c.nranks; ++r) {
    RankMem& m = w->mem[static_cast<size_t>(r)];
    const size_t sn = sendElems(c, r), rn = recvElems(c, r);
    // With c.misalign, each buffer has 16 bytes of room before it and starts at its chosen offset mod 16.
    const size_t room = c.misalign >= 0 ? 16 : 0;
    auto at = [&](std::vector<char>& v, uint32_t mis) {
      if (c.misalign < 0) return v.data();
      const size_t pad = (16 - reinterpret_cast<uintptr_t>(v.data()) % 16) % 16;
      return v.data() + pad + mis;
    };
    if (c.inPlaceAt(r)) {
      m.area.assign(std::max(sn + inPlaceSendOffset(c, r), rn + inPlaceRecvOffset(c, r)) * es + 1 + room, 0);
      char* base = at(m.area, c.recvMis(r));
      m.sendPtr = base + inPlaceSendOffset(c, r) * es;
      m.recvPtr = base + inPlaceRecvOffset(c, r) * es;
    } else {
      m.send.assign(sn * es + 1 + room, 0);
      m.recv.assign(rn * es + 1 + room, 0);
      m.sendPtr = at(m.send, c.sendMis(r));
      m.recvPtr = at(m.recv, c.recvMis(r));
    }
    fillInputs(c, r, m.sendPtr, sn, seed);
    m.scratch.assign(w->plans[static_cast<size_t>(r)].scratchElems * es + 1, 0);
  }
  return true;
}

std::vector<void*> buffersOf(const Case& c, RankMem& m, int r) {
  void* sendBuf = m.sendPtr;
  void* recvBuf = m.recvPtr;
  if (!c.inPlaceAt(r) && c.kind == CollKind::kBroadcast && r != c.root) sendBuf = nullptr;
  if (!c.inPlaceAt(r) && c.kind == CollKind::kReduce && r != c.root) recvBuf = nullptr;
  return {sendBuf, recvBuf, m.scratch.data()};
}

// Runs every rank of `plans` on the CPU device world, ranks as threads. Returns each rank's code.
// The executor's lowering of rank r's plan for case c: up to c.channels channels, in place as the plan is.
DevPlan lowerFor(const Case& c, const Plan& p, int r) {
  LowerOptions o;
  o.channels = !c.program && channelSafe(c.kind, c.algorithm) ? c.channels : 1;
  o.inPlace = c.inPlaceAt(r) && c.preMul == 1.0;  // a pre-multiplied call runs the out-of-place plan from a copy
  o.sendAt = static_cast<int64_t>(inPlaceSendOffset(c, r)) - static_cast<int64_t>(inPlaceRecvOffset(c, r));
  return lowerPlan(p, o);
}

std::vector<uint32_t> runDevice(CpuDeviceWorld& dw, const Case& c, World& w, uint64_t timeoutNs = 0,
                                int absentRank = -1) {
  std::vector<uint32_t> codes(static_cast<size_t>(c.nranks), 0);
  std::vector<DevPlan> dplans;
  for (int r = 0; r < c.nranks; ++r) dplans.push_back(lowerFor(c, w.plans[static_cast<size_t>(r)], r));
  std::vector<std::thread> threads;
  for (int r = 0; r < c.nranks; ++r) {
    if (r == absentRank) continue;
    threads.emplace_back([&, r] {
      const size_t ur = static_cast<size_t>(r);
      CpuCall call;
      const auto b = buffersOf(c, w.mem[ur], r);
      for (int i = 0; i < 3; ++i) call.bufs[i] = b[static_cast<size_t>(i)];
      call.dtype = c.dtype;
      call.op = c.op;
      call.preMul = dtypeIsFloat(c.dtype) ? c.preMul : 1.0;
      call.preMulInt = dtypeIsFloat(c.dtype) ? 1 : static_cast<int64_t>(c.preMul);
      call.timeoutNs = timeoutNs;
      call.threadsPerLane = c.threads;
      call.postDiv = c.postDiv;
      call.recvElems = recvElems(c, r);
      codes[ur] = runRankOnCpu(dw, r, dplans[ur], call);
    });
  }
  for (auto& t : threads) t.join();
  return codes;
}

// The host path on the same inputs: the reference interpreter (PlanRunner and the host kernels); a pre-multiplied
// call as the host executor runs it (scaled private copies, out-of-place plan).
void runReference(const Case& c, World& w, const ProtoConfig& cfg) {
  std::vector<std::vector<void*>> bufs;
  std::vector<std::vector<char>> scaled(static_cast<size_t>(c.nranks));
  for (int r = 0; r < c.nranks; ++r) {
    const size_t ur = static_cast<size_t>(r);
    auto b = buffersOf(c, w.mem[ur], r);
    if (c.preMul != 1.0 && b[0]) {
      const size_t sn = sendElems(c, r);
      scaled[ur].assign(sn * dtypeSize(c.dtype) + 1, 0);
      if (dtypeIsFloat(c.dtype)) scaleBy(scaled[ur].data(), b[0], sn, c.dtype, c.preMul);
      else multiplyBy(scaled[ur].data(), b[0], sn, c.dtype, static_cast<int64_t>(c.preMul));
      b[0] = scaled[ur].data();
    }
    bufs.push_back(b);
  }
  interpretPlans(w.plans, bufs, c.dtype, c.op, InterpreterOptions{cfg.pieceBytes, static_cast<int>(cfg.nslots)});
  if (c.postDiv != 1) {
    for (int r = 0; r < c.nranks; ++r) {
      const size_t rn = recvElems(c, r);
      if (rn)
        divideBy(w.mem[static_cast<size_t>(r)].recvPtr, w.mem[static_cast<size_t>(r)].recvPtr, rn, c.dtype, c.postDiv);
    }
  }
}

// Runs case c through the device protocol and the host path; expects the receive buffers equal bit for bit and
// the send buffers untouched out of place.
void checkCase(CpuDeviceWorld& dw, const Case& c, uint64_t seed) {
  const bool scaled = c.preMul != 1.0;
  World dev, ref;
  if (!makeWorld(c, dw.config(), seed, scaled, &dev)) return;
  ASSERT_TRUE(makeWorld(c, dw.config(), seed, scaled, &ref));
  std::vector<std::vector<char>> sendBefore;
  for (int r = 0; r < c.nranks; ++r) {
    const auto& m = dev.mem[static_cast<size_t>(r)];
    const char* s = static_cast<const char*>(m.sendPtr);
    sendBefore.emplace_back(s, s + sendElems(c, r) * dtypeSize(c.dtype));
  }
  if (std::getenv("DEVPROTO_TRACE")) fprintf(stderr, "case %s\n", c.str().c_str());
  const auto codes = runDevice(dw, c, dev, 120000000000ull);  // a deadline: a protocol that hangs fails
  for (int r = 0; r < c.nranks; ++r)
    ASSERT_EQ(codes[static_cast<size_t>(r)], 0u) << c.str() << ": rank " << r << " failed";
  runReference(c, ref, dw.config());
  const size_t es = dtypeSize(c.dtype);
  for (int r = 0; r < c.nranks; ++r) {
    const size_t ur = static_cast<size_t>(r);
    const size_t rn = recvElems(c, r);
    const char* got = static_cast<const char*>(dev.mem[ur].recvPtr);
    const char* want = static_cast<const char*>(ref.mem[ur].recvPtr);
    for (size_t i = 0; i < rn; ++i) {
      if (std::memcmp(got + i * es, want + i * es, es) != 0) {
        FAIL() << c.str() << ": rank " << r << " element " << i << ": device " << loadAsDouble(got, i, c.dtype)
               << ", host " << loadAsDouble(want, i, c.dtype);
      }
    }
    if (!c.inPlaceAt(r)) {
      // (memcmp of 0 bytes still needs valid pointers: an empty vector's data() may be null.)
      EXPECT_TRUE(sendBefore[ur].empty() ||
                  std::memcmp(sendBefore[ur].data(), dev.mem[ur].sendPtr, sendBefore[ur].size()) == 0)
          << c.str() << ": rank " << r << " changed its send buffer";
      // The bytes around each buffer are guards.
      EXPECT_EQ(dev.mem[ur].recv.back(), 0) << c.str() << ": rank " << r << " wrote past recvbuff";
      const char* rp = static_cast<const char*>(dev.mem[ur].recvPtr);
      for (const char* g = dev.mem[ur].recv.data(); g < rp; ++g)
        ASSERT_EQ(*g, 0) << c.str() << ": rank " << r << " wrote before recvbuff";
      const char* after = rp + rn * es;
      for (const char* g = after; g < dev.mem[ur].recv.data() + dev.mem[ur].recv.size(); ++g)
        ASSERT_EQ(*g, 0) << c.str() << ": rank " << r << " wrote past recvbuff";
    }
  }
}

std::vector<size_t> countsFor(int n, const ProtoConfig& cfg, strataDataType_t dt) {
  // 0, 1, odd, and more than the FIFO holds (nslots * pieceBytes bytes per connection).
  const size_t fifoElems = static_cast<size_t>(cfg.nslots) * cfg.pieceBytes / dtypeSize(dt);
  return {0, 1, static_cast<size_t>(7 * n + 3), fifoElems + static_cast<size_t>(n) + 5};
}

// ---- every collective and algorithm, n = 1..8 ---------------------------------------------------------------------

// Every collective, every algorithm, n = 1..8, counts 0 / 1 / odd / larger than the FIFO, in and out of place;
// dtypes and ops cycle through the sweep so every pair appears.
TEST(DeviceProto, EveryCollectiveMatchesHostPath) {
  size_t k = 0;
  for (const ProtoConfig& cfg : {kSmall, kSimpleOnly, kLL128}) {
    for (int n = 1; n <= 8; ++n) {
      CpuDeviceWorld dw(n, cfg);  // one world per n: step counters carry over from call to call
      for (CollKind kind : kKinds) {
        for (const std::string& algo : algorithmsFor(kind)) {
          for (bool inPlace : {false, true}) {
            for (size_t count : countsFor(n, cfg, strataFloat64)) {
              Case c;
              c.kind = kind;
              c.algorithm = algo;
              c.nranks = n;
              c.count = count;
              c.inPlace = inPlace;
              c.root = (kind == CollKind::kBroadcast || kind == CollKind::kReduce) ? static_cast<int>(k % n) : 0;
              c.dtype = kAllTypes[k % std::size(kAllTypes)];
              c.op = kAllOps[(k / std::size(kAllTypes)) % std::size(kAllOps)];
              ++k;
              checkCase(dw, c, k);
              if (::testing::Test::HasFatalFailure()) return;
            }
          }
        }
      }
    }
  }
}

// Every dtype x op for the reducing collectives, every protocol.
TEST(DeviceProto, EveryDtypeAndOp) {
  for (const ProtoConfig& cfg : {kSmall, kAllLL, kAllLL128}) {
    CpuDeviceWorld dw(3, cfg);
    for (CollKind kind : {CollKind::kAllReduce, CollKind::kReduceScatter, CollKind::kReduce}) {
      for (strataDataType_t dt : kAllTypes) {
        for (ReduceKind op : kAllOps) {
          for (size_t count : {size_t{5}, size_t{300}}) {
            Case c;
            c.kind = kind;
            c.algorithm = algorithmsFor(kind).front();
            c.nranks = 3;
            c.count = count;
            c.root = 1;
            c.dtype = dt;
            c.op = op;
            checkCase(dw, c, count + static_cast<size_t>(dt) * 7 + static_cast<size_t>(op));
            if (::testing::Test::HasFatalFailure()) return;
          }
        }
      }
    }
  }
}

// The 16-byte vectors of the data loops at every offset mod 16 of the user's buffers (every offset the dtype allows,
// different on every rank and between send and receive buffers, so that slots and buffers disagree), every dtype x
// op, n = 1..8, in and out of place, lanes of 1 and 3 threads, counts that leave heads, bodies of several passes and
// tails in every piece: bit for bit the host path, nothing written before or after a buffer.
void everyAlignment(const ProtoConfig& kCfg) {
  std::vector<std::unique_ptr<CpuDeviceWorld>> worlds;
  for (int n = 1; n <= 8; ++n) worlds.push_back(std::make_unique<CpuDeviceWorld>(n, kCfg));
  size_t k = 0;
  for (strataDataType_t dt : kAllTypes) {
    const size_t es = dtypeSize(dt);
    for (ReduceKind op : kAllOps) {
      for (int mis = 0; mis < 16; mis += static_cast<int>(es)) {
        for (bool inPlace : {false, true}) {
          Case c;
          c.kind = kKinds[k % std::size(kKinds)];
          c.nranks = 1 + static_cast<int>(k % 8);
          c.algorithm = algorithmsFor(c.kind)[(k / 8) % algorithmsFor(c.kind).size()];
          // Two pieces and a part, plus an odd number of elements.
          c.count = (2 * kCfg.pieceBytes + 48 + 16 * (k % 5)) / es + 1 + 2 * (k % 3);
          c.root = static_cast<int>(k % static_cast<size_t>(c.nranks));
          c.inPlace = inPlace;
          c.dtype = dt;
          c.op = op;
          c.misalign = mis;
          c.threads = k % 2 ? 3 : 1;
          ++k;
          checkCase(*worlds[static_cast<size_t>(c.nranks - 1)], c, k);
          if (::testing::Test::HasFatalFailure()) return;
        }
      }
    }
  }
  EXPECT_GT(k, 700u);
}

TEST(DeviceProto, VectorsAtEveryAlignment) {
  everyAlignment(ProtoConfig{512, 4, 64});  // LL up to 64 B, Simple pieces of 32 vectors beyond
}

// LL128's lines at every offset mod 16 of the user's buffers, as above: a line's 8-byte words meet the user's
// buffers aligned or not (8-byte accesses, or element by element), pieces of 512 B end in a partial line.
TEST(DeviceProto, LL128AtEveryAlignment) {
  everyAlignment(ProtoConfig{512, 4, 64, 1u << 30});  // LL up to 64 B, LL128 beyond
}

// Cross-lane waits: the pipelined hierarchical plans (lanes of one rank waiting on each other's progress: the rail
// lane on the host lane's reduce-scatter of a piece, the host lane on the rail lane's all-reduce of it), on "hosts"
// of 2 and 3 ranks, every dtype, n up to 8, in and out of place, lanes of 1 and 3 threads, counts of several pieces:
// bit for bit the host path (its interpreter honours the same waits).
TEST(DeviceProto, CrossLaneWaitsRunTheHierarchicalPlans) {
  constexpr ProtoConfig kCfg{256, 4, 64};
  size_t k = 0, withWaits = 0;
  for (int n : {4, 5, 6, 8}) {
    CpuDeviceWorld dw(n, kCfg);
    for (int hostSize : {2, 3}) {
      if (hostSize >= n) continue;
      for (CollKind kind : {CollKind::kAllReduce, CollKind::kReduceScatter, CollKind::kAllGather}) {
        for (bool inPlace : {false, true}) {
          for (size_t count : {size_t{1}, size_t{97}, size_t{2000}}) {
            Case c;
            c.kind = kind;
            c.algorithm = "hier";
            c.nranks = n;
            c.hostSize = hostSize;
            c.count = count;
            c.inPlace = inPlace;
            c.dtype = kAllTypes[k % std::size(kAllTypes)];
            c.op = kAllOps[(k / 2) % std::size(kAllOps)];
            c.threads = k % 2 ? 3 : 1;
            ++k;
            World w;
            if (makeWorld(c, kCfg, k, false, &w))
              for (int r = 0; r < n; ++r) withWaits += lowerFor(c, w.plans[static_cast<size_t>(r)], r).hasWaits();
            checkCase(dw, c, k);
            if (::testing::Test::HasFatalFailure()) return;
          }
        }
      }
    }
  }
  EXPECT_GT(withWaits, 100u) << "the hierarchical plans must have cross-lane waits for this test to mean anything";
}

// Loaded MSCCL programs (plan_program.h) on the device protocol: their thread blocks on channels of their own (two
// and three FIFOs per neighbour), nops that only wait, scratch, loops and the tail's built-in lane; bit for bit the
// host path's results.
TEST(DeviceProto, LoadedProgramsRunOnTheirOwnChannels) {
  using namespace msccl_test;
  constexpr ProtoConfig kCfg{256, 4, 64};
  const std::vector<std::pair<XAlgo, CollKind>> files = {
      {ringAllReduce(4, 2, 2), CollKind::kAllReduce},        {ringAllReduce(3, 2, 1), CollKind::kAllReduce},
      {allPairsAllReduce(4, 1, true), CollKind::kAllReduce}, {allPairsAllReduce(5, 2, false), CollKind::kAllReduce},
      {ringAllGather(4, 3, 1, true), CollKind::kAllGather},  {ringAllGather(3, 2, 2, false), CollKind::kAllGather}};
  size_t k = 0, channelled = 0;
  for (const auto& [file, kind] : files) {
    auto program = parseMscclXml(xml(file), file.name + ".xml");
    CpuDeviceWorld dw(program->nranks, kCfg, 4);
    for (size_t count : {size_t{1}, size_t{7}, size_t{97}, size_t{2000}}) {
      Case c;
      c.kind = kind;
      c.algorithm = program->name;
      c.program = program.get();
      c.nranks = program->nranks;
      c.count = count;
      c.inPlace = program->inPlace;
      c.dtype = kAllTypes[k % std::size(kAllTypes)];
      c.op = kAllOps[(k / 2) % std::size(kAllOps)];
      c.threads = k % 2 ? 3 : 1;
      ++k;
      World w;
      ASSERT_TRUE(makeWorld(c, kCfg, k, false, &w));
      for (int r = 0; r < c.nranks; ++r) channelled += lowerFor(c, w.plans[static_cast<size_t>(r)], r).channels > 1;
      checkCase(dw, c, k);
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
  EXPECT_GT(channelled, 40u) << "the programs must lower onto several channels for this test to mean anything";
}

// A cross-lane wait that is never satisfied ends at the deadline like every other wait, naming the lane it waited
// for; one whose lane is out of range is refused as a bad plan, not read out of bounds.
TEST(DeviceProto, CrossLaneWaitsEndAtTheDeadline) {
  CpuDeviceWorld dw(1, kSmall);
  std::vector<float> buf(64, 1.0f), out(64, 0.0f);
  for (int32_t afterLane : {0, 7}) {
    DevPlan p;
    p.lanesPerChannel = 2;
    devproto::DevOp copy{};
    copy.kind = static_cast<uint8_t>(OpKind::kCopy);
    copy.srcBuf = kBufSend;
    copy.dstBuf = kBufRecv;
    copy.count = 64;
    devproto::DevOp waiting = copy;
    waiting.afterLane = afterLane;
    waiting.afterOps = 2;  // lane 0 has one op: never reached
    p.ops = {copy, waiting};
    p.laneBegin = {0, 1, 2};
    CpuCall call;
    call.bufs[0] = buf.data();
    call.bufs[1] = out.data();
    call.dtype = strataFloat32;
    call.op = ReduceKind::kSum;
    call.timeoutNs = 200000000;  // 0.2 s
    const auto t0 = std::chrono::steady_clock::now();
    const uint32_t code = runRankOnCpu(dw, 0, p, call);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const devproto::Failure f = *dw.failure(0);
    if (afterLane == 0) {
      EXPECT_EQ(code, devproto::kFailTimedOut);
      EXPECT_EQ(f.waitingFor, 4u);
      EXPECT_EQ(f.peer, 0);
      EXPECT_EQ(f.lane, 1);
      EXPECT_LT(s, 5.0);
    } else {
      EXPECT_EQ(code, devproto::kFailBadPlan);
    }
  }
}

// Lanes as groups of 2-4 threads, as thread blocks on the GPU: the leader waits for Simple slots and broadcasts its
// verdict, every thread waits for its own LL lines, the group moves the data between barriers.
TEST(DeviceProto, LanesAsThreadGroups) {
  size_t k = 0;
  for (const ProtoConfig& cfg : {kSmall, kAllLL, kAllLL128}) {
    for (int n = 1; n <= 5; ++n) {
      CpuDeviceWorld dw(n, cfg);
      for (CollKind kind : kKinds) {
        for (const std::string& algo : algorithmsFor(kind)) {
          for (size_t count : {size_t{1}, static_cast<size_t>(7 * n + 3), size_t{301}}) {
            Case c;
            c.kind = kind;
            c.algorithm = algo;
            c.nranks = n;
            c.count = count;
            c.inPlace = k % 2 == 1;
            c.root = (kind == CollKind::kBroadcast || kind == CollKind::kReduce) ? static_cast<int>(k % n) : 0;
            c.dtype = kAllTypes[k % std::size(kAllTypes)];
            c.op = kAllOps[(k / 3) % std::size(kAllOps)];
            c.threads = 2 + static_cast<uint32_t>(k % 3);
            ++k;
            checkCase(dw, c, k);
            if (::testing::Test::HasFatalFailure()) return;
          }
        }
      }
    }
  }
}

// PreMulSum (and float Avg, which is PreMulSum by 1/n) in the executor: elements read from the send buffer are
// multiplied as the host's private pre-scaled copy is.
TEST(DeviceProto, PreMulSumInTheExecutor) {
  CpuDeviceWorld dw(4, kSmall);
  for (strataDataType_t dt : kAllTypes) {
    for (size_t count : {size_t{3}, size_t{200}}) {
      Case c;
      c.kind = CollKind::kAllReduce;
      c.algorithm = "ring";
      c.nranks = 4;
      c.count = count;
      c.dtype = dt;
      c.preMul = dtypeIsFloat(dt) ? 0.25 : 3.0;
      checkCase(dw, c, count * 31 + static_cast<size_t>(dt));
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

// Avg: float types pre-multiply by 1/n in the executor; integer types sum, then the last lane to finish divides by n.
TEST(DeviceProto, AvgInTheExecutor) {
  for (int n : {3, 5}) {
    CpuDeviceWorld dw(n, kSmall);
    size_t k = 0;
    for (CollKind kind : {CollKind::kAllReduce, CollKind::kReduceScatter, CollKind::kReduce}) {
      for (const std::string& algo : algorithmsFor(kind)) {
        for (strataDataType_t dt : kAllTypes) {
          Case c;
          c.kind = kind;
          c.algorithm = algo;
          c.nranks = n;
          c.count = k % 2 ? 257 : 6;
          c.root = n - 1;
          c.dtype = dt;
          c.threads = k % 3 == 0 ? 3 : 1;
          if (dtypeIsFloat(dt)) c.preMul = 1.0 / n;
          else c.postDiv = static_cast<uint64_t>(n);
          ++k;
          checkCase(dw, c, k);
          if (::testing::Test::HasFatalFailure()) return;
        }
      }
    }
  }
}

// ---- channels ----------------------------------------------------------------------------------------------------

// Every collective and algorithm with 2..4 channels where the algorithm is channel-safe (each channel with FIFOs and
// steps of its own), n = 1..6, in and out of place and mixed (odd ranks the other way), counts 0 / 1 / odd / a chunk
// and a few / larger than the FIFO, PreMulSum included: bit for bit the host path.
TEST(DeviceProto, ChannelsSplitPlansExactly) {
  size_t k = 0;
  int split = 0;
  for (int n = 1; n <= 6; ++n) {
    CpuDeviceWorld dw(n, kSmall, 4);
    for (CollKind kind : kKinds) {
      for (const std::string& algo : algorithmsFor(kind)) {
        for (int placement = 0; placement < 3; ++placement) {
          std::vector<size_t> counts = countsFor(n, kSmall, strataFloat32);
          counts.push_back(static_cast<size_t>(kSmall.nslots) * kSmall.pieceBytes / 2 / 4 + 3);  // a chunk and 3
          for (size_t count : counts) {
            Case c;
            c.kind = kind;
            c.algorithm = algo;
            c.nranks = n;
            c.count = count;
            c.inPlace = placement == 1;
            c.mixed = placement == 2;
            c.channels = 2 + static_cast<int>(k % 3);
            c.root = (kind == CollKind::kBroadcast || kind == CollKind::kReduce) ? static_cast<int>(k % n) : 0;
            c.dtype = kAllTypes[k % std::size(kAllTypes)];
            c.op = kAllOps[(k / 3) % std::size(kAllOps)];
            if (k % 5 == 4 && dtypeIsFloat(c.dtype) && c.op == ReduceKind::kSum) c.preMul = 0.5;
            c.threads = k % 4 == 3 ? 2 : 1;
            ++k;
            checkCase(dw, c, k);
            if (::testing::Test::HasFatalFailure()) return;
            World w;
            if (n > 1 && makeWorld(c, dw.config(), k, c.preMul != 1.0, &w))
              split += lowerFor(c, w.plans[0], 0).channels > 1 ? 1 : 0;
          }
        }
      }
    }
  }
  EXPECT_GT(split, 100);
}

// The channel-safe algorithms split on every rank, in place and not (out of place also for pre-multiplied calls),
// every root, n = 1..33, with many chunks: every rank can take the same channel count without seeing its peers'
// plans or placement.
TEST(DeviceProto, ChannelSafeAlgorithmsSplitOnEveryRank) {
  int checked = 0;
  for (int n = 1; n <= 33; ++n) {
    for (CollKind kind : kKinds) {
      for (const std::string& algo : algorithmsFor(kind)) {
        if (!channelSafe(kind, algo)) continue;
        for (int root : {0, n - 1}) {
          for (int r = 0; r < n; ++r) {
            for (bool inPlace : {false, true}) {
              CollArgs args;
              args.kind = kind;
              args.nranks = n;
              args.rank = r;
              args.count = 3 * 7 + 5;
              args.root = root;
              args.inPlace = inPlace;
              args.chunkElems = 7;
              Case c;
              c.kind = kind;
              c.nranks = n;
              c.count = args.count;
              LowerOptions o;
              o.channels = 3;
              o.inPlace = inPlace;
              o.sendAt = static_cast<int64_t>(inPlaceSendOffset(c, r)) - static_cast<int64_t>(inPlaceRecvOffset(c, r));
              ASSERT_TRUE(channelSplittable(makePlan(args, algo), o))
                  << collName(kind) << "/" << algo << " n " << n << " rank " << r << " root " << root
                  << (inPlace ? " in place" : "");
              ++checked;
            }
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 1000);
  // And the choice: one channel per bytesPerChannel of the call, capped, 1 for the other algorithms.
  EXPECT_EQ(channelsFor(CollKind::kAllReduce, "ring", 8, 256 << 20, 8, 64 << 10), 8);
  EXPECT_EQ(channelsFor(CollKind::kAllReduce, "ring", 8, 200 << 10, 8, 64 << 10), 3);
  EXPECT_EQ(channelsFor(CollKind::kAllReduce, "ring", 8, 8, 8, 64 << 10), 1);
  EXPECT_EQ(channelsFor(CollKind::kAllReduce, "rhd", 8, 256 << 20, 8, 64 << 10), 1);
  EXPECT_EQ(channelsFor(CollKind::kAllToAll, "pairwise", 8, 256 << 20, 32, 64 << 10), 4);  // 15 lanes x 4 <= 64
}

// The rule lowerPlan splits by: overlapping memory touched through identical regions splits (each channel takes
// the same part of both); an op that reads part of what another wrote, or a region aliased in place at another
// offset, does not.
TEST(DeviceProto, ChannelSplitNeedsIdenticalRegions) {
  auto plan = [](std::vector<Op> ops) {
    Plan p;
    p.rank = 0;
    p.nranks = 2;
    p.algorithm = "test";
    p.scratchElems = 64;
    p.lanes.push_back(std::move(ops));
    return p;
  };
  auto region = [](int buf, size_t off, size_t count) { return Region{buf, off, count}; };
  auto op = [](OpKind kind, Region src, Region dst, int recvPeer = -1, int sendPeer = -1) {
    Op o;
    o.kind = kind;
    o.src = src;
    o.dst = dst;
    o.recvPeer = recvPeer;
    o.sendPeer = sendPeer;
    return o;
  };
  LowerOptions o;
  o.channels = 4;
  // Receive into scratch, then send the same region on: splits.
  const Plan same = plan(
      {op(OpKind::kRecv, {}, region(kBufScratch, 0, 32), 1), op(OpKind::kSend, region(kBufScratch, 0, 32), {}, -1, 1)});
  EXPECT_TRUE(channelSplittable(same, o));
  EXPECT_EQ(lowerPlan(same, o).channels, 4);
  EXPECT_EQ(lowerPlan(same, o).lanes(), 4);
  // Send half of what was received: channel c's half is not channel c's part of the whole.
  const Plan half = plan({op(OpKind::kRecv, {}, region(kBufScratch, 0, 32), 1),
                          op(OpKind::kSend, region(kBufScratch, 16, 16), {}, -1, 1)});
  EXPECT_FALSE(channelSplittable(half, o));
  EXPECT_THROW(lowerPlan(half, o), InternalError);  // a caller's bug: channels come from channelSafe algorithms
  // Two reads of overlapping memory: no dependency, splits.
  const Plan reads = plan({op(OpKind::kSend, region(kBufSend, 0, 32), {}, -1, 1),
                           op(OpKind::kCopy, region(kBufSend, 8, 8), region(kBufRecv, 0, 8))});
  EXPECT_TRUE(channelSplittable(reads, o));
  // In place the send buffer is inside the receive buffer: a write of recv [8, 16) and a read of send [0, 8) are the
  // same memory when the send buffer starts at element 8, so they must be identical regions (they are).
  const Plan aliased =
      plan({op(OpKind::kRecv, {}, region(kBufRecv, 8, 8), 1), op(OpKind::kSend, region(kBufSend, 0, 8), {}, -1, 1)});
  LowerOptions in = o;
  in.inPlace = true;
  in.sendAt = 8;
  EXPECT_TRUE(channelSplittable(aliased, in));
  in.sendAt = 4;  // overlapping at another offset: not splittable
  EXPECT_FALSE(channelSplittable(aliased, in));
  o.inPlace = false;  // out of place the two buffers are separate memory
  EXPECT_TRUE(channelSplittable(aliased, o));
  // Channels beyond the limit are refused with the reason.
  o.channels = kMaxDevChannels + 1;
  EXPECT_THROW(lowerPlan(same, o), InvalidArgument);
}

// ---- random calls ---------------------------------------------------------------------------------------------------

// STRATA_DEVICE_RANDOM_CALLS random calls (default 10000) over persistent worlds of 1..8 ranks: random collective,
// algorithm, count (across the three protocols and FIFO wrap), dtype, op, root and placement, each checked against
// the host path. Under ThreadSanitizer this is the protocol's race check.
TEST(DeviceProto, RandomCallsMatchHostPath) {
  const char* env = std::getenv("STRATA_DEVICE_RANDOM_CALLS");
  const int calls = env ? std::atoi(env) : 10000;
  std::mt19937_64 rng(12345);
  std::vector<std::unique_ptr<CpuDeviceWorld>> worlds;
  for (int n = 1; n <= 8; ++n) worlds.push_back(std::make_unique<CpuDeviceWorld>(n, kMixed, 4));
  for (int i = 0; i < calls; ++i) {
    Case c;
    c.nranks = 1 + static_cast<int>(rng() % 8);
    c.kind = kKinds[rng() % std::size(kKinds)];
    const auto algos = algorithmsFor(c.kind);
    c.algorithm = algos[rng() % algos.size()];
    c.count = rng() % 4 == 0 ? rng() % 3 : rng() % 200;
    c.inPlace = rng() % 2;
    c.root = static_cast<int>(rng() % static_cast<uint64_t>(c.nranks));
    c.dtype = kAllTypes[rng() % std::size(kAllTypes)];
    c.op = kAllOps[rng() % std::size(kAllOps)];
    c.threads = rng() % 4 == 0 ? 2 + static_cast<uint32_t>(rng() % 3) : 1;
    c.channels = rng() % 3 == 0 ? 2 + static_cast<int>(rng() % 3) : 1;
    c.mixed = rng() % 4 == 0;  // in place is each rank's own choice
    checkCase(*worlds[static_cast<size_t>(c.nranks - 1)], c, static_cast<uint64_t>(i));
    if (::testing::Test::HasFatalFailure()) return;
  }
}

// ---- abort, deadline, dead peers --------------------------------------------------------------------------------

Case bigAllReduce(int n) {
  Case c;
  c.kind = CollKind::kAllReduce;
  c.algorithm = "ring";
  c.nranks = n;
  c.count = 5000;
  c.dtype = strataFloat32;
  return c;
}

double secondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// A peer that never joins: the abort word (what strataCommAbort or the host's peer watch writes) ends every other
// rank's waits, and the failure names the peer each was waiting for.
TEST(DeviceProto, AbortEndsEveryWait) {
  const int n = 4, absent = 2;
  CpuDeviceWorld dw(n, kSmall);
  Case c = bigAllReduce(n);
  World w;
  ASSERT_TRUE(makeWorld(c, dw.config(), 1, false, &w));
  const auto t0 = std::chrono::steady_clock::now();
  std::thread aborter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    for (int r = 0; r < n; ++r) std::atomic_ref<uint32_t>(*dw.abortWord(r)).store(1);
  });
  c.threads = 3;
  const auto codes = runDevice(dw, c, w, 0, absent);
  aborter.join();
  const double took = secondsSince(t0);
  EXPECT_LT(took, 2.0) << "abort took " << took << " s";
  for (int r = 0; r < n; ++r) {
    if (r == absent) continue;
    EXPECT_EQ(codes[static_cast<size_t>(r)], devproto::kFailAborted) << "rank " << r;
    const devproto::Failure* f = dw.failure(r);
    EXPECT_GE(f->peer, 0) << "rank " << r;
    EXPECT_LT(f->peer, n) << "rank " << r;
  }
  // The ring's neighbours of the absent rank waited for it.
  EXPECT_EQ(dw.failure((absent + 1) % n)->peer, absent);
}

// No abort: the deadline ends the waits, reported as a timeout, in Simple and in LL128 (whose threads wait for
// their lines together, a warp's vote on the GPU); the absent rank's ring successor was waiting for its data.
TEST(DeviceProto, DeadlineEndsEveryWait) {
  for (const ProtoConfig& cfg : {kSmall, kAllLL128}) {
    for (uint32_t threads : {1u, 3u}) {
      const int n = 3, absent = 0;
      CpuDeviceWorld dw(n, cfg);
      Case c = bigAllReduce(n);
      c.threads = threads;
      World w;
      ASSERT_TRUE(makeWorld(c, dw.config(), 2, false, &w));
      const auto t0 = std::chrono::steady_clock::now();
      const auto codes = runDevice(dw, c, w, 300'000'000, absent);
      const double took = secondsSince(t0);
      EXPECT_LT(took, 2.0) << "deadline took " << took << " s";
      for (int r = 1; r < n; ++r) EXPECT_EQ(codes[static_cast<size_t>(r)], devproto::kFailTimedOut) << "rank " << r;
      const devproto::Failure* f = dw.failure(absent + 1);
      EXPECT_EQ(f->peer, absent);
      EXPECT_EQ(f->waitingFor, cfg.ll128MaxBytes != 0 ? 5u : 1u) << "LL128 data, else Simple data";
    }
  }
}

// Ranks as processes sharing the world's memory (shared memory in place of CUDA IPC): each forked rank runs its
// plan; results come back through a shared mapping and match the host path. Then a rank is killed mid-call and the
// parent, as the host's peer watch does, raises the abort word: the survivors end within 2 s.
TEST(DeviceProto, ProcessesShareTheProtocol) {
  const int n = 4;
  CpuDeviceWorld dw(n, kSmall);
  Case c = bigAllReduce(n);
  c.dtype = strataInt64;
  World dev, ref;
  ASSERT_TRUE(makeWorld(c, dw.config(), 3, false, &dev));
  ASSERT_TRUE(makeWorld(c, dw.config(), 3, false, &ref));
  const size_t bytes = c.count * dtypeSize(c.dtype);
  void* shared = mmap(nullptr, bytes * n + 64, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(shared, MAP_FAILED);
  auto* codesOut = reinterpret_cast<uint32_t*>(static_cast<char*>(shared) + bytes * n);
  std::vector<DevPlan> dplans;
  for (const Plan& p : dev.plans) dplans.push_back(lowerPlan(p));

  auto spawn = [&](int r, bool stall) {
    const pid_t pid = fork();
    if (pid == 0) {
      if (stall) pause();  // a rank that hangs before its part: killed by the test
      const size_t ur = static_cast<size_t>(r);
      CpuCall call;
      const auto b = buffersOf(c, dev.mem[ur], r);
      for (int i = 0; i < 3; ++i) call.bufs[i] = b[static_cast<size_t>(i)];
      call.dtype = c.dtype;
      codesOut[r] = runRankOnCpu(dw, r, dplans[ur], call);
      std::memcpy(static_cast<char*>(shared) + bytes * ur, dev.mem[ur].recvPtr, bytes);
      _exit(0);
    }
    return pid;
  };

  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) pids.push_back(spawn(r, false));
  for (pid_t p : pids) {
    int status = 0;
    ASSERT_EQ(waitpid(p, &status, 0), p);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  runReference(c, ref, dw.config());
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(codesOut[r], 0u);
    EXPECT_EQ(0, std::memcmp(static_cast<char*>(shared) + bytes * static_cast<size_t>(r),
                             ref.mem[static_cast<size_t>(r)].recvPtr, bytes))
        << "rank " << r << " differs from the host path";
  }

  // Peer death: a fresh world; rank 1 stalls and is killed, the parent raises every survivor's abort word.
  CpuDeviceWorld dw2(n, kSmall);
  World w2;
  ASSERT_TRUE(makeWorld(c, dw2.config(), 4, false, &w2));
  dplans.clear();
  for (const Plan& p : w2.plans) dplans.push_back(lowerPlan(p));
  auto spawn2 = [&](int r) {
    const pid_t pid = fork();
    if (pid == 0) {
      if (r == 1) pause();
      const size_t ur = static_cast<size_t>(r);
      CpuCall call;
      const auto b = buffersOf(c, w2.mem[ur], r);
      for (int i = 0; i < 3; ++i) call.bufs[i] = b[static_cast<size_t>(i)];
      call.dtype = c.dtype;
      codesOut[r] = runRankOnCpu(dw2, r, dplans[ur], call);
      _exit(0);
    }
    return pid;
  };
  pids.clear();
  for (int r = 0; r < n; ++r) pids.push_back(spawn2(r));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  kill(pids[1], SIGKILL);
  int status = 0;
  ASSERT_EQ(waitpid(pids[1], &status, 0), pids[1]);
  const auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < n; ++r) std::atomic_ref<uint32_t>(*dw2.abortWord(r)).store(1);
  for (int r = 0; r < n; ++r) {
    if (r == 1) continue;
    ASSERT_EQ(waitpid(pids[static_cast<size_t>(r)], &status, 0), pids[static_cast<size_t>(r)]);
    EXPECT_EQ(codesOut[r], devproto::kFailAborted) << "rank " << r;
  }
  EXPECT_LT(secondsSince(t0), 2.0);
  munmap(shared, bytes * n + 64);
}

TEST(DeviceProto, RefusesWhatItCannotRun) {
  EXPECT_THROW(CpuDeviceWorld(0, kSmall), InvalidArgument);
  EXPECT_THROW(CpuDeviceWorld(2, ProtoConfig{100, 2, 0}), InvalidArgument);    // not a multiple of 16
  EXPECT_THROW(CpuDeviceWorld(2, ProtoConfig{128, 2, 256}), InvalidArgument);  // LL larger than a piece
  CpuDeviceWorld dw(2, kSmall);
  CollArgs args;
  args.nranks = 2;
  args.rank = 0;
  args.count = 10;
  const DevPlan p = lowerPlan(makePlan(args, "ring"));
  EXPECT_THROW(runRankOnCpu(dw, 1, p, CpuCall{}), InvalidArgument);  // rank 0's plan run as rank 1
}

}  // namespace
}  // namespace strata
