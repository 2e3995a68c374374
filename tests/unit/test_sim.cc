// strata-sim's engine (src/collectives/sim.h) against closed forms. On an idealised cluster (a link per pair of
// ranks, no engine cost, messages that each fit one piece) the simulated time of the real plans must equal the
// alpha-beta cost of the algorithm: ring, recursive halving/doubling and the hierarchical all-reduce in full,
// the double binary tree in its bandwidth term. A link that k flows share gives each 1/k. The symmetric
// simulation (only ranks 0..s-1) must give the full simulation's result. Cluster files name the wrong field.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "collectives/algorithms.h"
#include "collectives/generators.h"
#include "collectives/selector.h"
#include "collectives/sim.h"
#include "test_util.h"
#include "util/error.h"

namespace strata {
namespace {

constexpr double kAlpha = 5;  // us per message hop
constexpr double kIntraGBps = 100, kNetGBps = 10;

// Every ordered pair its own link; no engine cost; one piece per message for the sizes below (pieceBytes set
// per test).
SimCluster idealCluster(int ranksPerHost, size_t pieceBytes) {
  SimCluster c;
  c.name = "ideal";
  c.ranksPerHost = ranksPerHost;
  c.intra = SimCluster::Intra::kPairwise;
  c.intraGBps = kIntraGBps;
  c.intraLatencyUs = kAlpha;
  c.nics = ranksPerHost;  // a NIC per rank: rails never share one
  c.nicGBps = kNetGBps;
  c.netLatencyUs = 3 * kAlpha;
  c.pieceBytes = pieceBytes;
  c.messageUs = 0;
  c.reduceGBps = 1e9;
  c.copyGBps = 1e9;
  return c;
}

double us(double bytes, double gbps) { return bytes / (gbps * 1e3); }

SimResult sim(const SimCluster& c, CollKind kind, const std::string& algo, size_t bytes, int hosts,
              bool symmetry = true) {
  SimCall call;
  call.kind = kind;
  call.bytes = bytes;
  call.algorithm = algo;
  call.hosts = hosts;
  call.symmetry = symmetry;
  return simulate(c, call);
}

TEST(Sim, RingMatchesAlphaBeta) {
  for (int n : {2, 3, 5, 8, 16}) {
    const size_t seg = 64 * 1024, bytes = seg * static_cast<size_t>(n);
    const SimCluster c = idealCluster(n, seg);
    const double expect = 2.0 * (n - 1) * (kAlpha + us(static_cast<double>(seg), kIntraGBps));
    EXPECT_NEAR(sim(c, CollKind::kAllReduce, "ring", bytes, 1).us, expect, expect * 0.01) << "n=" << n;
    // Reduce-scatter and all-gather: n - 1 steps of one block.
    const double half = (n - 1) * (kAlpha + us(static_cast<double>(seg), kIntraGBps));
    EXPECT_NEAR(sim(c, CollKind::kReduceScatter, "ring", bytes, 1).us, half, half * 0.01) << "n=" << n;
    EXPECT_NEAR(sim(c, CollKind::kAllGather, "ring", bytes, 1).us, half, half * 0.01) << "n=" << n;
  }
}

TEST(Sim, RecursiveHalvingDoublingMatchesAlphaBeta) {
  for (int n : {2, 4, 8, 16}) {
    const size_t bytes = size_t{1} << 22;
    const SimCluster c = idealCluster(n, bytes);  // every message one piece
    const double k = std::log2(n);
    const double expect = 2 * k * kAlpha + 2.0 * (n - 1) / n * us(static_cast<double>(bytes), kIntraGBps);
    EXPECT_NEAR(sim(c, CollKind::kAllReduce, "rhd", bytes, 1).us, expect, expect * 0.01) << "n=" << n;
    const double half = k * kAlpha + (n - 1.0) / n * us(static_cast<double>(bytes), kIntraGBps);
    EXPECT_NEAR(sim(c, CollKind::kReduceScatter, "rhd", bytes, 1).us, half, half * 0.01) << "n=" << n;
    EXPECT_NEAR(sim(c, CollKind::kAllGather, "rhd", bytes, 1).us, half, half * 0.01) << "n=" << n;
  }
}

TEST(Sim, HierarchicalAllReduceMatchesAlphaBeta) {
  // Unpipelined (one piece: a rank's rail share fits one chunk): an intra-host ring reduce-scatter of L blocks, a
  // ring all-reduce of the rank's block over its rail of H hosts, an intra-host ring all-gather.
  for (auto [H, L] : {std::pair{2, 2}, {2, 4}, {3, 2}, {4, 4}}) {
    const size_t block = 256 * 1024, bytes = block * static_cast<size_t>(L);
    const SimCluster c = idealCluster(L, block);
    ASSERT_EQ(hierAllReducePieces(bytes, L, H, c.chunkBytes()), 1u);
    const double intra = (L - 1) * (kAlpha + us(static_cast<double>(block), kIntraGBps));
    const double rail = 2.0 * (H - 1) * (3 * kAlpha + us(static_cast<double>(block) / H, kNetGBps));
    const double expect = 2 * intra + rail;
    EXPECT_NEAR(sim(c, CollKind::kAllReduce, "hier", bytes, H).us, expect, expect * 0.01) << H << "x" << L;
  }
}

// The alpha-beta cost of a set of plans along their critical path, computed without the engine: every op starts
// when its lane's previous op has started, its message has arrived and its dependency is met (no engine cost); a
// message enters its link when the op starts and the link has sent the one before, and arrives alpha + m / B
// later. On the idealised cluster
// (a link per pair, no engine cost, one piece per op, slots without limit) nothing else can delay a message, so
// the engine must find this time for any algorithm.
double criticalPathUs(const std::vector<Plan>& plans, size_t elemSize, double alpha, double gbps) {
  const size_t n = plans.size();
  std::map<std::pair<int, int>, std::vector<double>> arrivals;  // (from, to) -> arrival time of each message
  std::map<std::pair<int, int>, size_t> consumed;
  std::map<std::pair<int, int>, double> linkFree;  // (from, to) -> when its link has sent its last message
  std::vector<std::vector<size_t>> next(n);
  std::vector<std::vector<double>> laneEnd(n);
  std::vector<std::vector<std::vector<double>>> doneAt(n);
  for (size_t r = 0; r < n; ++r) {
    next[r].assign(plans[r].lanes.size(), 0);
    laneEnd[r].assign(plans[r].lanes.size(), 0);
    for (const auto& lane : plans[r].lanes) doneAt[r].push_back(std::vector<double>(lane.size(), -1));
  }
  double total = 0;
  for (bool moved = true; moved;) {
    moved = false;
    for (size_t r = 0; r < n; ++r)
      for (size_t l = 0; l < plans[r].lanes.size(); ++l)
        while (next[r][l] < plans[r].lanes[l].size()) {
          const Op& op = plans[r].lanes[l][next[r][l]];
          double start = laneEnd[r][l];
          if (op.afterLane >= 0 && op.afterOps > 0) {
            const double d = doneAt[r][static_cast<size_t>(op.afterLane)][op.afterOps - 1];
            if (d < 0) break;
            start = std::max(start, d);
          }
          if (op.receives()) {
            const auto key = std::make_pair(op.recvPeer, static_cast<int>(r));
            const size_t m = consumed[key];
            if (m >= arrivals[key].size()) break;
            start = std::max(start, arrivals[key][m]);
            consumed[key] = m + 1;
          }
          if (op.sends()) {
            const double transfer = us(static_cast<double>(op.count() * elemSize), gbps);
            const auto key = std::make_pair(static_cast<int>(r), op.sendPeer);
            const double begin = std::max(start, linkFree[key]);
            linkFree[key] = begin + transfer;
            arrivals[key].push_back(begin + transfer + alpha);
            total = std::max(total, begin + transfer + alpha);
          }
          laneEnd[r][l] = start;
          doneAt[r][l][next[r][l]++] = start;
          total = std::max(total, start);
          moved = true;
        }
  }
  for (size_t r = 0; r < n; ++r)
    for (size_t l = 0; l < plans[r].lanes.size(); ++l)
      if (next[r][l] < plans[r].lanes[l].size()) ADD_FAILURE() << "the plans deadlock at rank " << r << " lane " << l;
  return total;
}

TEST(Sim, EveryAlgorithmOnOneHostMatchesItsCriticalPath) {
  // The double binary tree above all: it has no textbook closed form as Strata cuts it (one lane, both trees, a
  // chunk going up while the one before comes down), so its alpha-beta cost is the critical path of its plans.
  for (CollKind kind : {CollKind::kAllReduce, CollKind::kReduceScatter, CollKind::kAllGather})
    for (const std::string& algo : algorithmsFor(kind))
      for (int n : {2, 3, 5, 8, 13}) {
        if (algo == "hier") continue;
        const size_t bytes = size_t{4} << 20;
        SimCluster c = idealCluster(n, bytes);  // every op one piece
        c.nslots = 1 << 20;
        SimCall call;
        call.kind = kind;
        call.bytes = bytes;
        call.algorithm = algo;
        call.hosts = 1;
        const size_t chunkElems = c.chunkBytes() / 4 / 64;  // several chunks: pipelines
        const size_t count = kind == CollKind::kAllReduce ? bytes / 4 : bytes / 4 / static_cast<size_t>(n);
        const std::vector<Plan> plans = test::plansOf(kind, algo, n, count, chunkElems, {});
        const double expect = criticalPathUs(plans, 4, kAlpha, kIntraGBps);
        const double got = simulatePlans(c, plans, 4, {}).us;
        EXPECT_NEAR(got, expect, expect * 0.01) << collName(kind) << " " << algo << " n=" << n;
      }
}

// k ranks each send `bytes` to rank 0 over one shared resource: rank 0's port in (a switch), or the NIC of the
// receiving host.
std::vector<Plan> fanIn(int k, size_t elems) {
  std::vector<Plan> plans(static_cast<size_t>(k) + 1);
  for (int r = 0; r <= k; ++r) {
    plans[static_cast<size_t>(r)].rank = r;
    plans[static_cast<size_t>(r)].nranks = k + 1;
  }
  for (int r = 1; r <= k; ++r) {
    plans[static_cast<size_t>(r)].lanes.push_back({gen::sendOp(0, gen::region(kBufSend, 0, elems))});
    plans[0].lanes.push_back({gen::recvOp(r, gen::region(kBufRecv, elems * static_cast<size_t>(r - 1), elems))});
  }
  return plans;
}

TEST(Sim, ALinkSharedByKFlowsGivesEachOneKth) {
  for (int k : {1, 2, 3, 4, 7}) {
    SimCluster c = idealCluster(k + 1, 64 * 1024);
    c.intra = SimCluster::Intra::kSwitch;  // every flow into rank 0 crosses its one port in
    c.intraLatencyUs = 0;
    c.nslots = 1024;
    const size_t elems = size_t{8} << 20;  // 32 MiB per flow, in 512 pieces
    const SimResult r = simulatePlans(c, fanIn(k, elems), 4, {});
    const double alone = us(static_cast<double>(elems * 4), kIntraGBps);
    // Each flow gets 1/k of the port throughout: all finish together, k times later than one flow alone.
    ASSERT_EQ(r.laneUs[0].size(), static_cast<size_t>(k));
    for (int f = 0; f < k; ++f)
      EXPECT_NEAR(r.laneUs[0][static_cast<size_t>(f)], k * alone, k * alone * 0.01) << "k=" << k << " flow " << f;
  }
}

TEST(Sim, ANicSharedByKFlowsGivesEachOneKth) {
  // k ranks of host 1 send to k ranks of host 0 through one NIC per host.
  for (int k : {1, 2, 4}) {
    SimCluster c = idealCluster(k, 16 * 1024);
    c.nics = 1;
    c.netLatencyUs = 0;
    c.nslots = 1024;
    const size_t elems = size_t{1} << 20;
    const int n = 2 * k;
    std::vector<Plan> plans(static_cast<size_t>(n));
    std::vector<int> hostOf;
    for (int r = 0; r < n; ++r) {
      plans[static_cast<size_t>(r)].rank = r;
      plans[static_cast<size_t>(r)].nranks = n;
      hostOf.push_back(r < k ? 0 : 1);
    }
    for (int i = 0; i < k; ++i) {
      plans[static_cast<size_t>(k + i)].lanes.push_back({gen::sendOp(i, gen::region(kBufSend, 0, elems))});
      plans[static_cast<size_t>(i)].lanes.push_back({gen::recvOp(k + i, gen::region(kBufRecv, 0, elems))});
    }
    const SimResult r = simulatePlans(c, plans, 4, hostOf);
    const double alone = us(static_cast<double>(elems * 4), kNetGBps);
    for (int i = 0; i < k; ++i)
      EXPECT_NEAR(r.laneUs[static_cast<size_t>(i)][0], k * alone, k * alone * 0.01) << "k=" << k << " flow " << i;
  }
}

SimCluster railCluster() {
  SimCluster c;
  c.name = "rails";
  c.ranksPerHost = 4;
  c.intra = SimCluster::Intra::kSwitch;
  c.intraGBps = 100;
  c.intraLatencyUs = 1;
  c.nics = 2;
  c.nicGBps = 12.5;
  c.netLatencyUs = 3;
  c.hostsPerLeaf = 2;
  c.oversubscription = 2;
  c.switchLatencyUs = 0.5;
  c.pieceBytes = 32 * 1024;
  c.messageUs = 0.3;
  c.reduceGBps = 40;
  c.copyGBps = 60;
  return c;
}

// The symmetric simulation gives the full one's times: equivalent pieces that reach one shared resource at the
// same instant share it equally (sim_engine.cc, flushBatch), so the order the engine meets them in does not matter.
// (Served first come first served instead, the two differed by up to 1.3% here.)
constexpr double kSymmetryTolerance = 1e-9;

TEST(Sim, SymmetryGivesTheFullSimulationsResult) {
  const SimCluster c = railCluster();
  for (const char* algo : {"ring", "hier", "rhd", "tree"})
    for (int hosts : {1, 4, 8})
      for (size_t bytes : {size_t{256} << 10, size_t{16} << 20}) {
        if (std::string(algo) == "hier" && hosts == 1) continue;
        const SimResult sym = sim(c, CollKind::kAllReduce, algo, bytes, hosts, true);
        const SimResult full = sim(c, CollKind::kAllReduce, algo, bytes, hosts, false);
        EXPECT_EQ(full.simulatedRanks, full.ranks);
        EXPECT_NEAR(sym.us, full.us, full.us * kSymmetryTolerance)
            << algo << " on " << hosts << " hosts, " << bytes << " B";
        if (std::string(algo) == "ring" || std::string(algo) == "hier") {
          EXPECT_LT(sym.simulatedRanks, sym.ranks) << algo << " on " << hosts << " hosts";
        }
      }
  for (CollKind kind : {CollKind::kReduceScatter, CollKind::kAllGather})
    for (const char* algo : {"ring", "hier"}) {
      const SimResult sym = sim(c, kind, algo, size_t{8} << 20, 8, true);
      const SimResult full = sim(c, kind, algo, size_t{8} << 20, 8, false);
      EXPECT_NEAR(sym.us, full.us, full.us * kSymmetryTolerance) << collName(kind) << " " << algo;
    }
}

TEST(Sim, SymmetryIsExactWithoutSharedUplinks) {
  SimCluster c = railCluster();
  c.hostsPerLeaf = 0;
  for (const char* algo : {"ring", "hier"})
    for (int hosts : {2, 4, 8}) {
      const SimResult sym = sim(c, CollKind::kAllReduce, algo, size_t{4} << 20, hosts, true);
      const SimResult full = sim(c, CollKind::kAllReduce, algo, size_t{4} << 20, hosts, false);
      EXPECT_LT(sym.simulatedRanks, full.simulatedRanks);
      EXPECT_NEAR(sym.us, full.us, full.us * 1e-12) << algo << " on " << hosts << " hosts";
    }
}

TEST(Sim, OneHostOfSharedMemory) {
  // One host: the period is one rank, shorter than the host (a division by zero once).
  SimCluster c = railCluster();
  c.intra = SimCluster::Intra::kShm;
  c.memoryGBps = 20;
  c.memoryCurve = {{1 << 20, 80}, {16 << 20, 40}};
  c.cores = 2;
  for (const char* algo : {"ring", "twoshot", "rhd", "tree", "oneshot"})
    for (size_t bytes : {size_t{1} << 20, size_t{64} << 20}) {
      const SimResult sym = sim(c, CollKind::kAllReduce, algo, bytes, 1, true);
      const SimResult full = sim(c, CollKind::kAllReduce, algo, bytes, 1, false);
      EXPECT_NEAR(sym.us, full.us, full.us * 1e-9) << algo << " " << bytes;
    }
  // Memory beyond the caches bounds a large all-reduce: halving its rate slows the call.
  const double fast = sim(c, CollKind::kAllReduce, "ring", size_t{256} << 20, 1).us;
  c.memoryGBps = 10;
  EXPECT_GT(sim(c, CollKind::kAllReduce, "ring", size_t{256} << 20, 1).us, 1.5 * fast);
}

TEST(SimCluster, MemoryCurveInterpolatesOnLogScales) {
  SimCluster c;
  c.memoryGBps = 10;
  c.memoryCurve = {{1 << 20, 100}, {4 << 20, 25}};
  EXPECT_DOUBLE_EQ(c.memoryGBpsAt(1024), 100);
  EXPECT_DOUBLE_EQ(c.memoryGBpsAt(1 << 20), 100);
  EXPECT_NEAR(c.memoryGBpsAt(2 << 20), 50, 1e-9);  // halfway in log2(bytes), halfway in log(rate)
  EXPECT_NEAR(c.memoryGBpsAt(4 << 20), 25, 1e-9);
  EXPECT_NEAR(c.memoryGBpsAt(16 << 20), 10, 1e-9);  // memoryGBps from 4x the last point
  EXPECT_DOUBLE_EQ(c.memoryGBpsAt(1e12), 10);
  c.memoryCurve.clear();
  EXPECT_DOUBLE_EQ(c.memoryGBpsAt(1024), 10);
}

TEST(Sim, OversubscribedUplinksSlowCrossLeafTraffic) {
  // Eight hosts, two per leaf: the ring's leaf crossings share uplinks that carry half the hosts' NIC rate.
  SimCluster c = railCluster();
  const double blocking = sim(c, CollKind::kAllReduce, "ring", size_t{64} << 20, 8).us;
  c.oversubscription = 1;
  const double nonBlocking = sim(c, CollKind::kAllReduce, "ring", size_t{64} << 20, 8).us;
  c.hostsPerLeaf = 0;
  const double oneSwitch = sim(c, CollKind::kAllReduce, "ring", size_t{64} << 20, 8).us;
  EXPECT_GE(blocking, nonBlocking);
  EXPECT_GE(nonBlocking, oneSwitch);  // the spine's extra switch hops
}

TEST(Sim, RefusesWhatItCannotSimulate) {
  const SimCluster c = railCluster();
  EXPECT_THROW(sim(c, CollKind::kAllReduce, "hier", 1 << 20, 1), InvalidArgument);
  EXPECT_THROW(sim(c, CollKind::kAllReduce, "nosuch", 1 << 20, 2), InvalidArgument);
  SimCluster small = c;
  small.maxHosts = 4;
  EXPECT_THROW(sim(small, CollKind::kAllReduce, "ring", 1 << 20, 8), InvalidArgument);
  // A tree has no symmetry to use: 65,536 ranks would be simulated one by one, which is refused, not left to run
  // for hours.
  try {
    sim(c, CollKind::kAllReduce, "tree", 1 << 20, 16384);
    ADD_FAILURE() << "a tree on 65536 ranks was simulated";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("limited to 32768 ranks"), std::string::npos) << e.what();
  }
}

TEST(Sim, TheSelectorPicksFromSimulatedTimesUnderStrataTuneSim) {
  TuningInputs in;
  in.nranks = 8;
  in.hostOf = {0, 0, 0, 0, 1, 1, 1, 1};
  in.intra = {0.5, 10};
  in.inter = {20, 1.25};
  Selector model({}, in, 0), simulated({}, in, 0);
  simulated.useSimulator(128 * 1024, 8);
  EXPECT_FALSE(model.simulating());
  EXPECT_TRUE(simulated.simulating());
  const SimCluster cluster = clusterFromTuning(in, 128 * 1024, 8);
  for (size_t bytes : {size_t{4096}, size_t{1} << 20, size_t{64} << 20}) {
    SimCall call;
    call.kind = CollKind::kAllReduce;
    call.bytes = bytes;
    call.hosts = 2;
    call.ranksPerHost = 4;
    const std::vector<SimResult> all = simulateAll(cluster, call);
    const Prediction p = simulated.choose(CollKind::kAllReduce, bytes);
    EXPECT_EQ(p.algorithm, all.front().algorithm) << bytes;
    EXPECT_DOUBLE_EQ(p.us, all.front().us) << bytes;
    for (const SimResult& r : all)
      EXPECT_DOUBLE_EQ(simulated.predictedUs(CollKind::kAllReduce, bytes, r.algorithm), r.us) << r.algorithm;
    EXPECT_NE(model.choose(CollKind::kAllReduce, bytes).us, p.us) << "the model's figure, not the simulator's";
  }
  // A forced algorithm still wins, with its simulated time.
  Selector forced({{"allreduce", "tree"}}, in, 0);
  forced.useSimulator(128 * 1024, 8);
  EXPECT_EQ(forced.choose(CollKind::kAllReduce, 1 << 20).algorithm, "tree");
  EXPECT_GT(forced.choose(CollKind::kAllReduce, 1 << 20).us, 0);
}

// ---- cluster files ----

const char* kGood = R"({
  "name": "two boxes",
  "hosts": 2,
  "host": {"ranks": 4,
           "intra": {"kind": "switch", "bandwidthGBps": 100, "latencyUs": 1},
           "nics": {"count": 2, "gbps": 100, "latencyUs": 3}},
  "executor": {"kind": "host", "messageUs": 0.3, "reduceGBps": 20, "copyGBps": 20}
})";

std::string errorOf(const std::string& text) {
  try {
    clusterFromJson(text, "test.json");
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

std::string replaced(std::string s, const std::string& from, const std::string& to) {
  const size_t at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return s.replace(at, from.size(), to);
}

TEST(SimCluster, ReadsAFileAndWritesItBack) {
  const SimCluster c = clusterFromJson(kGood, "test.json");
  EXPECT_EQ(c.name, "two boxes");
  EXPECT_EQ(c.ranksPerHost, 4);
  EXPECT_EQ(c.nics, 2);
  EXPECT_DOUBLE_EQ(c.nicGBps, 12.5);
  const SimCluster again = clusterFromJson(clusterToJson(c), "again");
  EXPECT_EQ(clusterToJson(again), clusterToJson(c));
}

TEST(SimCluster, ErrorsNameTheField) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {replaced(kGood, R"("bandwidthGBps": 100)", R"("bandwidthGBps": "fast")"),
       "host.intra.bandwidthGBps: expected a number"},
      {replaced(kGood, R"("bandwidthGBps": 100, )", ""), "host.intra.bandwidthGBps: missing"},
      {replaced(kGood, R"("gbps": 100)", R"("gbps": 0)"), "host.nics.gbps: 0 must be greater than 0"},
      {replaced(kGood, R"("ranks": 4)", R"("ranks": 0)"), "host.ranks: 0 is less than 1"},
      {replaced(kGood, R"("ranks": 4)", R"("ranks": 2.5)"), "host.ranks: 2.5 is not an integer"},
      {replaced(kGood, R"("kind": "switch")", R"("kind": "nvlink")"), "host.intra.kind: 'nvlink' is not one of"},
      {replaced(kGood, R"("latencyUs": 1})", R"("latencyUs": 1, "efficency": 0.9})"),
       "host.intra.efficency: unknown field"},
      {replaced(kGood, R"("latencyUs": 1})", R"("latencyUs": 1, "efficiency": 1.5})"),
       "host.intra.efficiency: 1.5 is not a share"},
      {replaced(kGood, R"("kind": "host")", R"("kind": "gpu")"), "executor.kind: 'gpu' is not one of host, device"},
      {replaced(kGood, R"("messageUs": 0.3, )", ""), "executor.messageUs: missing"},
      {replaced(kGood, R"("hosts": 2)", R"("hosts": 2, "maxHosts": 1)"), "hosts: 2 is more than maxHosts"},
      {replaced(kGood, R"("name": "two boxes",)", ""), "name: missing"},
      {replaced(kGood, R"("latencyUs": 1})", R"("latencyUs": 1, "memoryGBps": 10, "memoryCurve": [[2, 5], [1, 4]]})"),
       "host.intra.memoryCurve[1]: working sets must ascend"},
      {replaced(kGood, R"("latencyUs": 1})", R"("latencyUs": 1, "memoryGBps": 10, "memoryCurve": [[2, 5, 1]]})"),
       "host.intra.memoryCurve[0]: expected [working-set bytes, GB/s]"},
      {replaced(kGood, R"("latencyUs": 1})", R"("latencyUs": 1, "memoryCurve": [[2, 5]]})"),
       "host.intra.memoryGBps: missing"},
      {replaced(kGood, R"("latencyUs": 1})", R"("latencyUs": 1, "slotMemoryShare": 2})"),
       "host.intra.slotMemoryShare: 2 is not a share in [0, 1]"},
      {"{\"name\": ", "test.json: line 1"},
  };
  for (const auto& [text, want] : cases) {
    const std::string err = errorOf(text);
    EXPECT_NE(err.find(want), std::string::npos) << "want '" << want << "' in: " << err;
    EXPECT_EQ(err.rfind("test.json", 0), 0u) << err;
  }
}

TEST(SimCluster, ShippedClusterFilesRead) {
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(std::string(STRATA_SOURCE_DIR) + "/clusters")) {
    if (entry.path().extension() != ".json") continue;
    const SimCluster c = loadCluster(entry.path().string());
    EXPECT_FALSE(c.name.empty()) << entry.path();
    EXPECT_FALSE(c.notes.empty()) << entry.path() << ": a shipped cluster says where its figures come from";
    ++files;
  }
  EXPECT_GE(files, 6);
}

}  // namespace
}  // namespace strata
