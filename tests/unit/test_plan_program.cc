// Algorithm files (collectives/plan_program.h) and their proof (core/plan_proof.h): MSCCL XML written by a small
// generator (tests/common/msccl_xml.h: ring, all-pairs and hierarchical all-reduce, ring and all-pairs all-gather,
// several channels and chunk multiplicities), every
// built-in algorithm dumped to a Strata plan file and loaded back (identical plans), and hand-broken files, each
// refused with the reason and the gpu, tb and step.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "../common/msccl_xml.h"
#include "collectives/algorithms.h"
#include "collectives/plan_program.h"
#include "collectives/selector.h"
#include "collectives/sim.h"
#include "core/plan_proof.h"
#include "core/plan_registry.h"
#include "util/error.h"

namespace strata {
namespace {

using namespace msccl_test;

std::shared_ptr<const PlanProgram> load(const XAlgo& a) { return parseMscclXml(xml(a), a.name + ".xml"); }

// The message of the refusal of `text`, by loading and proving it; "" if it passes.
std::string refusal(const std::string& text) {
  try {
    auto p = parseProgram(text, "broken.xml");
    proveProgram(*p);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

// ---- generated MSCCL files are proven ---------------------------------------------------------------------------

TEST(PlanProgram, RingAllReduceFilesAreProven) {
  for (int n : {2, 3, 4, 5, 8})
    for (int channels : {1, 2})
      for (int m : {1, 2}) {
        SCOPED_TRACE(strprintf("n %d channels %d m %d", n, channels, m));
        auto p = load(ringAllReduce(n, channels, m));
        EXPECT_EQ(p->channels(), channels);
        EXPECT_NO_THROW(proveProgram(*p));
      }
  EXPECT_NO_THROW(proveProgram(*load(ringAllReduce(16, 1, 1))));
}

TEST(PlanProgram, AllPairsAllReduceFilesAreProvenWithDependenciesAndNops) {
  for (int n : {2, 3, 4, 8})
    for (bool nops : {false, true}) {
      SCOPED_TRACE(strprintf("n %d nops %d", n, nops));
      auto p = load(allPairsAllReduce(n, 2, nops));
      EXPECT_NO_THROW(proveProgram(*p));
    }
}

TEST(PlanProgram, RingAllGatherFilesAreProvenInAndOutOfPlace) {
  for (int n : {2, 3, 8})
    for (int channels : {1, 3})
      for (bool inplace : {false, true}) {
        SCOPED_TRACE(strprintf("n %d channels %d inplace %d", n, channels, inplace));
        auto p = load(ringAllGather(n, channels, 1, inplace));
        EXPECT_EQ(p->inPlace, inplace);
        EXPECT_EQ(p->outOfPlace, !inplace);
        EXPECT_NO_THROW(proveProgram(*p));
      }
}

TEST(PlanProgram, AllPairsAllGatherAndHierarchicalAllReduceFilesAreProven) {
  for (int n : {2, 3, 5, 8, 16}) {
    SCOPED_TRACE(strprintf("allgather n %d", n));
    EXPECT_NO_THROW(proveProgram(*load(allPairsAllGather(n))));
  }
  for (auto [groups, size] : {std::pair{2, 2}, {2, 3}, {3, 2}, {2, 4}, {4, 2}, {4, 4}}) {
    SCOPED_TRACE(strprintf("hierarchical %d x %d", groups, size));
    auto p = load(hierarchicalAllReduce(groups, size));
    EXPECT_EQ(p->channels(), 2);
    EXPECT_NO_THROW(proveProgram(*p));
  }
}

TEST(PlanProgram, LoopsAndTailCoverEveryCount) {
  auto p = load(ringAllReduce(4, 2, 1));  // 8 chunks per block
  for (size_t count : {size_t{1}, size_t{7}, size_t{8}, size_t{9}, size_t{8 * 1000 + 5}}) {
    SCOPED_TRACE(count);
    for (int r = 0; r < 4; ++r) {
      CollArgs args = makeCollArgs(CollKind::kAllReduce, 4, r, count, 300);
      Plan plan = planOf(*p, args);
      EXPECT_NO_THROW(validatePlan(plan));
      size_t covered = 0;
      (void)covered;
      // Ops of the program's lanes use channels 0 and 1, the tail's (count % 8 elements) channel 2.
      const bool tail = count % 8 != 0;
      EXPECT_EQ(planChannels(plan), tail ? 3 : 2);
    }
  }
}

// ---- every built-in, dumped and loaded back, gives its own plans --------------------------------------------------

TEST(PlanProgram, EveryBuiltInDumpsAndReloadsToIdenticalPlans) {
  int checked = 0;
  for (const AlgorithmRecord* rec : allAlgorithms()) {
    if (rec->kind == CollKind::kSend || rec->kind == CollKind::kRecv || rec->kind == CollKind::kBarrier) continue;
    for (int n : {2, 3, 4, 8}) {
      const bool perRank = rec->kind == CollKind::kAllGather || rec->kind == CollKind::kReduceScatter ||
                           rec->kind == CollKind::kAllToAll;
      const size_t count = perRank ? 2 : static_cast<size_t>(2 * n);
      SCOPED_TRACE(strprintf("%s %s n %d", collName(rec->kind), rec->name, n));
      const PlanProgram dumped = dumpProgram(rec->kind, rec->name, n, count);
      auto loaded = parseStrataPlan(writeStrataPlan(dumped), "dump.json");
      EXPECT_EQ(writeStrataPlan(*loaded), writeStrataPlan(dumped));
      const size_t blocks = perRank ? static_cast<size_t>(n) : 1;
      for (int r = 0; r < n; ++r) {
        CollArgs args = makeCollArgs(rec->kind, n, r, count, count * blocks);
        const Plan builtIn = makePlan(args, rec->name);
        const Plan reloaded = planOf(*loaded, args);
        ASSERT_EQ(reloaded.toString(), builtIn.toString()) << "rank " << r;
      }
      ++checked;
    }
  }
  EXPECT_GT(checked, 40);
}

// ---- broken files are refused, saying where and why -------------------------------------------------------------

std::string ringText() { return xml(ringAllReduce(4, 1, 1)); }

std::string replaceOnce(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

TEST(PlanProgramRefuses, UnknownStepType) {
  const std::string m = refusal(replaceOnce(ringText(), "type=\"rrs\"", "type=\"rrx\""));
  EXPECT_NE(m.find("gpu 0 tb 0 step 1"), std::string::npos) << m;
  EXPECT_NE(m.find("unknown type \"rrx\""), std::string::npos) << m;
}

TEST(PlanProgramRefuses, PeerOutOfRange) {
  const std::string m = refusal(replaceOnce(ringText(), "send=\"1\"", "send=\"9\""));
  EXPECT_NE(m.find("gpu 0 tb 0"), std::string::npos) << m;
  EXPECT_NE(m.find("send=9 is not in -1..3"), std::string::npos) << m;
}

TEST(PlanProgramRefuses, SendWithoutItsReceive) {
  XAlgo a = ringAllReduce(4, 1, 1);
  a.gpus[2].tbs[0].steps.pop_back();  // gpu 2 never takes the last message of gpu 1
  const std::string m = refusal(xml(a));
  EXPECT_NE(m.find("gpu 1 tb 0 step 5"), std::string::npos) << m;
  EXPECT_NE(m.find("which rank 2 never receives"), std::string::npos) << m;
}

TEST(PlanProgramRefuses, UnequalCounts) {
  XAlgo a = ringAllReduce(4, 1, 2);
  a.gpus[3].tbs[0].steps[1].cnt = 1;  // gpu 3's first receive takes 1 chunk of the 2 gpu 2 sends
  const std::string m = refusal(xml(a));
  EXPECT_NE(m.find("gpu 2 tb 0 step 0 sends 2 chunk(s) to rank 3"), std::string::npos) << m;
  EXPECT_NE(m.find("gpu 3 tb 0 step 1) takes 1"), std::string::npos) << m;
}

TEST(PlanProgramRefuses, ChunkOutsideItsBuffer) {
  XAlgo a = ringAllReduce(4, 1, 1);
  a.gpus[1].tbs[0].steps[2].srcoff = 4;
  const std::string m = refusal(xml(a));
  EXPECT_NE(m.find("gpu 1 tb 0 step 2"), std::string::npos) << m;
  EXPECT_NE(m.find("outside the input buffer's 4 chunk(s)"), std::string::npos) << m;
}

TEST(PlanProgramRefuses, DependencyOnAMissingStepOrWithoutHasdep) {
  XAlgo a = allPairsAllReduce(3, 1, false);
  a.gpus[0].tbs[2].steps[1].deps = 7;
  std::string m = refusal(xml(a));
  EXPECT_NE(m.find("gpu 0 tb 2 step 1"), std::string::npos) << m;
  EXPECT_NE(m.find("depends on step 7 of gpu 0 tb 0, which has 4 step(s)"), std::string::npos) << m;
  a = allPairsAllReduce(3, 1, false);
  a.gpus[1].tbs[0].steps[1].hasdep = false;
  m = refusal(xml(a));
  EXPECT_NE(m.find("lacks hasdep"), std::string::npos) << m;
}

TEST(PlanProgramRefuses, DependencyCycle) {
  XAlgo a = allPairsAllReduce(3, 1, false);
  // The local tb's first reduce waits for tb 0's receive; make tb 0 wait for the local tb's last step first.
  XStep& first = a.gpus[0].tbs[0].steps[0];
  first.depid = 2;
  first.deps = 2;
  markDeps(a);
  const std::string m = refusal(xml(a));
  EXPECT_NE(m.find("form a cycle"), std::string::npos) << m;
  EXPECT_NE(m.find("gpu 0 tb 0 step 0 waits for gpu 0 tb 2 step 2"), std::string::npos) << m;
}

TEST(PlanProgramRefuses, DeadlockWithEveryLanesPosition) {
  // Two ranks that both receive first.
  XAlgo a;
  a.name = "both_receive_first";
  a.coll = "allgather";
  a.nchunks = 2;
  for (int r = 0; r < 2; ++r) {
    XGpu& g = a.gpus.emplace_back();
    g.ichunks = 1;
    g.ochunks = 2;
    XTb& tb = g.tbs.emplace_back();
    tb.send = tb.recv = 1 - r;
    tb.steps.push_back({"r", "i", -1, "o", 1 - r, 1});
    tb.steps.push_back({"s", "i", 0, "o", -1, 1});
    tb.steps.push_back({"cpy", "i", 0, "o", r, 1});
  }
  const std::string m = refusal(xml(a));
  EXPECT_NE(m.find("deadlock"), std::string::npos) << m;
  EXPECT_NE(m.find("gpu 0 tb 0 step 0 (loop 0) (recv) waits to receive from rank 1"), std::string::npos) << m;
  EXPECT_NE(m.find("gpu 1 tb 0 step 0 (loop 0) (recv) waits to receive from rank 0"), std::string::npos) << m;
}

TEST(PlanProgramRefuses, WrongResultWithTheFirstWrongChunk) {
  XAlgo a = ringAllReduce(4, 1, 1);
  a.gpus[2].tbs[0].steps[1].srcoff = 0;  // gpu 2 reduces the wrong segment into what it forwards
  const std::string m = refusal(xml(a));
  EXPECT_NE(m.find("wrong result: rank 0's output chunk 1"), std::string::npos) << m;
  EXPECT_NE(m.find("allreduce gives"), std::string::npos) << m;
}

TEST(PlanProgramRefuses, MalformedXmlAndUnknownCollective) {
  EXPECT_NE(refusal("<algo name=\"x\"").find("not well-formed XML"), std::string::npos);
  EXPECT_NE(refusal(replaceOnce(ringText(), "coll=\"allreduce\"", "coll=\"custom\"")).find("custom collective"),
            std::string::npos);
  EXPECT_NE(refusal(replaceOnce(ringText(), "ngpus=\"4\"", "ngpus=\"5\"")).find("gpu 4 is missing"), std::string::npos);
}

TEST(PlanProgramRefuses, TwoLanesOnOneConnection) {
  XAlgo a = ringAllReduce(4, 2, 1);
  a.gpus[0].tbs[1].chan = 0;
  const std::string m = refusal(xml(a));
  EXPECT_NE(m.find("gpu 0 tb 0 and gpu 0 tb 1 both send to rank 1 on channel 0"), std::string::npos) << m;
}

// ---- the IR's channels ------------------------------------------------------------------------------------------

TEST(PlanChannels, LanesOnDifferentChannelsMayShareAPeerButNotOneChannel) {
  Plan plan;
  plan.nranks = 2;
  Op a;
  a.kind = OpKind::kSend;
  a.sendPeer = 1;
  a.src = Region{kBufSend, 0, 4};
  Op b = a;
  b.channel = 1;
  plan.lanes = {{a}, {b}};
  EXPECT_NO_THROW(validatePlan(plan));
  EXPECT_EQ(planChannels(plan), 2);
  plan.lanes[1][0].channel = 0;
  try {
    validatePlan(plan);
    ADD_FAILURE() << "two lanes on one connection accepted";
  } catch (const InternalError& e) {
    EXPECT_NE(std::string(e.what()).find("both send to rank 1 on channel 0"), std::string::npos) << e.what();
  }
  Op nop;
  nop.kind = OpKind::kNop;
  nop.afterLane = 0;
  nop.afterOps = 1;
  plan.lanes[1] = {nop};
  EXPECT_NO_THROW(validatePlan(plan));
}

}  // namespace
}  // namespace strata

// ---- STRATA_PLANS: loading, naming and the selector ---------------------------------------------------------------

namespace strata {
namespace {

using namespace msccl_test;

struct TempDir {
  std::string path;
  TempDir() {
    char buf[] = "/tmp/strata-plans-XXXXXX";
    path = mkdtemp(buf);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string write(const std::string& name, const std::string& text) const {
    const std::string file = path + "/" + name;
    std::ofstream(file) << text;
    return file;
  }
};

std::string loadError(const std::string& spec) {
  try {
    loadPlanPrograms(spec, 128 * 1024, 8);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

TEST(PlanRegistry, LoadsFilesAndFoldersInNameOrderAndRefusesClashes) {
  TempDir dir;
  dir.write("b_ring.xml", xml(ringAllReduce(4, 1, 1)));
  dir.write("a_pairs.xml", xml(allPairsAllReduce(4, 1, true)));
  dir.write("notes.txt", "not a plan");
  const auto loaded = loadPlanPrograms(dir.path, 128 * 1024, 8);
  ASSERT_EQ(loaded.size(), 2u);
  EXPECT_EQ(loaded[0].program->name, "allpairs_allreduce_n4_m1_nop");
  EXPECT_EQ(loaded[1].program->name, "ring_allreduce_n4_c1_m1");
  EXPECT_GT(loaded[1].figures.criticalSteps, 1);
  EXPECT_EQ(programsDigest(loaded), loaded[0].digest + "," + loaded[1].digest);
  // The same file twice: two algorithms of one name.
  const std::string ring = dir.path + "/b_ring.xml";
  EXPECT_NE(loadError(ring + "," + ring).find("both name a allreduce algorithm 'ring_allreduce_n4_c1_m1'"),
            std::string::npos);
  // A built-in's name.
  XAlgo named = ringAllReduce(4, 1, 1);
  named.name = "ring";
  const std::string clash = dir.write("clash.xml", xml(named));
  EXPECT_NE(loadError(clash).find("its name 'ring' is a built-in allreduce algorithm's"), std::string::npos);
  EXPECT_NE(loadError(dir.path + "/missing.xml").find("missing.xml: cannot be read"), std::string::npos);
  // A file that fails its proof names itself and why.
  XAlgo wrong = ringAllReduce(4, 1, 1);
  wrong.gpus[2].tbs[0].steps[1].srcoff = 0;
  const std::string bad = dir.write("wrong.xml", xml(wrong));
  EXPECT_NE(loadError(bad).find("STRATA_PLANS: " + bad + ": int8, out of place"), std::string::npos) << loadError(bad);
}

TEST(PlanRegistry, SelectorUsesAForcedProgramWhereItServesAndTheBuiltInsElsewhere) {
  TempDir dir;
  dir.write("ring.xml", xml(ringAllReduce(4, 2, 1)));          // out of place only
  dir.write("pairs.xml", xml(allPairsAllReduce(4, 1, true)));  // in place only: never chosen while ring is forced
  TuningInputs tuning;
  tuning.nranks = 4;
  Selector sel({{"allreduce", "ring_allreduce_n4_c2_m1"}}, tuning, 0);
  EXPECT_THROW(Selector::checkForced({{"allreduce", "ring_allreduce_n4_c2_m1"}}, true), InvalidArgument);
  const auto programs = loadPlanPrograms(dir.path, 128 * 1024, 8);
  EXPECT_NO_THROW(Selector::checkForced({{"allreduce", "ring_allreduce_n4_c2_m1"}}, true, programs));
  sel.setPrograms(programs);
  EXPECT_EQ(sel.choose(CollKind::kAllReduce, 4096, false).algorithm, "ring_allreduce_n4_c2_m1");
  const std::string inPlace = sel.choose(CollKind::kAllReduce, 4096, true).algorithm;
  EXPECT_TRUE(findAlgorithm(CollKind::kAllReduce, inPlace)) << inPlace;
  // Its plan is the program's, on two channels, with the tail (4096 / 4 bytes is not a multiple of 8 chunks: 1024
  // elements are) on none: 1024 % 8 == 0.
  CollArgs args = makeCollArgs(CollKind::kAllReduce, 4, 1, 1024, 1 << 16);
  const Plan plan = sel.makePlan(args, "ring_allreduce_n4_c2_m1");
  EXPECT_EQ(plan.algorithm, "ring_allreduce_n4_c2_m1");
  EXPECT_EQ(planChannels(plan), 2);
  EXPECT_EQ(sel.makePlan(args, "ring").algorithm, "ring");
  // Not forced: the program is priced beside the built-ins.
  Selector free({}, tuning, 0);
  free.setPrograms(programs);
  const Prediction chosen = free.choose(CollKind::kAllReduce, 1 << 20, false);
  EXPECT_GT(chosen.us, 0);
  EXPECT_TRUE(chosen.algorithm == "ring_allreduce_n4_c2_m1" || findAlgorithm(CollKind::kAllReduce, chosen.algorithm));
  // STRATA_TUNE=sim: the program's time is simulated, as the built-ins' are (a positive time, and a choice among
  // them that the model alone might not make).
  {
    Selector sim({}, tuning, 0);
    sim.setPrograms(programs);
    sim.useSimulator(128 * 1024, 8);
    const Prediction p = sim.choose(CollKind::kAllReduce, 1 << 20, false);
    EXPECT_GT(p.us, 0);
    EXPECT_TRUE(p.algorithm == "ring_allreduce_n4_c2_m1" || findAlgorithm(CollKind::kAllReduce, p.algorithm));
    SimCall call;
    call.kind = CollKind::kAllReduce;
    call.bytes = 1 << 20;
    call.hosts = 1;
    call.ranksPerHost = 4;
    call.program = programs[1].program.get();
    ASSERT_EQ(programs[1].program->name, "ring_allreduce_n4_c2_m1");
    const double direct = simulate(clusterFromTuning(tuning, 128 * 1024, 8), call).us;
    EXPECT_NEAR(sim.predictedUs(CollKind::kAllReduce, 1 << 20, "ring_allreduce_n4_c2_m1"), direct, 1e-9 * direct);
  }
  // A broadcast file describes root 0: another root's call gets the default's plan, which is correct for it.
  {
    TempDir bdir;
    PlanProgram chain = dumpProgram(CollKind::kBroadcast, "chain", 4, 4);
    chain.name = "bcast_file";
    bdir.write("b.json", writeStrataPlan(chain));
    Selector b({{"broadcast", "bcast_file"}}, tuning, 0);
    b.setPrograms(loadPlanPrograms(bdir.path, 128 * 1024, 8));
    CollArgs root0 = makeCollArgs(CollKind::kBroadcast, 4, 2, 64, 1 << 16, 0);
    CollArgs root3 = makeCollArgs(CollKind::kBroadcast, 4, 2, 64, 1 << 16, 3);
    EXPECT_EQ(b.makePlan(root0, "bcast_file").algorithm, "bcast_file");
    EXPECT_EQ(b.makePlan(root3, "bcast_file").toString(), makePlan(root3, "chain").toString());
  }
  // Another rank count: never offered.
  TuningInputs eight = tuning;
  eight.nranks = 8;
  Selector other({{"allreduce", "ring_allreduce_n4_c2_m1"}}, eight, 0);
  other.setPrograms(programs);
  EXPECT_TRUE(findAlgorithm(CollKind::kAllReduce, other.choose(CollKind::kAllReduce, 4096, false).algorithm));
}

}  // namespace
}  // namespace strata

// ---- loaded programs in the simulator ------------------------------------------------------------------------------

namespace strata {
namespace {

using namespace msccl_test;

TEST(PlanProgramSim, SimulatesAProgramWithItsSymmetryAsInFullAndItsBlocksAsChannels) {
  const SimCluster mesh = loadCluster(std::string(STRATA_SOURCE_DIR) + "/clusters/mi300x.json");
  auto p = load(allPairsAllReduce(8, 1, true));
  SimCall call;
  call.kind = CollKind::kAllReduce;
  call.bytes = 8 << 20;
  call.program = p.get();
  const SimResult sym = simulate(mesh, call);
  call.symmetry = false;
  const SimResult full = simulate(mesh, call);
  EXPECT_EQ(sym.algorithm, p->name);
  EXPECT_GT(sym.us, 0);
  EXPECT_NEAR(sym.us, full.us, 1e-9 * full.us);
  // A program of another rank count is refused, naming both.
  call.ranksPerHost = 4;
  try {
    simulate(mesh, call);
    ADD_FAILURE() << "an 8-rank program simulated on 4 ranks";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("on 8 ranks, not a allreduce on 4"), std::string::npos) << e.what();
  }
  // On the device executor each thread block is a channel of its own: a ring over two blocks per neighbour moves
  // its chunks in parallel, faster than the same ring on one block.
  auto one = load(ringAllReduce(8, 1, 2));
  auto two = load(ringAllReduce(8, 2, 1));
  SimCall ring;
  ring.kind = CollKind::kAllReduce;
  ring.bytes = 64 << 20;
  SimCluster capped = loadCluster(std::string(STRATA_SOURCE_DIR) + "/clusters/dgx-h200.json");
  capped.channelGBps = 20;  // a block moves at most 20 GB/s: the blocks, not the links, bound the rings
  ring.program = one.get();
  const double oneBlock = simulate(capped, ring).us;
  ring.program = two.get();
  const double twoBlocks = simulate(capped, ring).us;
  EXPECT_LT(twoBlocks, 0.7 * oneBlock) << oneBlock << " " << twoBlocks;
}

}  // namespace
}  // namespace strata
