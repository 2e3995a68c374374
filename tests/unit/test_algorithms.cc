// The algorithm table (algorithms.h): every record is complete (a generator, a cost shape that prices it wherever it
// applies, a description), every collective has a default, names are unique, and the records' facts that other layers
// act on hold (the device executor's defaults are device-capable; NCCL names map onto Strata algorithms).
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "collectives/algorithms.h"
#include "collectives/cost_model.h"
#include "collectives/host_layout.h"
#include "device/dev_plan.h"
#include "util/error.h"

namespace strata {
namespace {

std::string describe(const AlgorithmRecord& r) { return std::string(collName(r.kind)) + "/" + r.name; }

// Layouts a shape is asked about: one host, two hosts, unequal hosts, a rank per host.
std::vector<std::vector<int>> layouts() {
  return {{0, 0}, {0, 0, 0, 0, 0}, {0, 0, 1, 1}, {0, 0, 0, 1, 1}, {0, 1, 2}, {0, 1, 0, 1, 0, 1, 0}};
}

TEST(Algorithms, EveryRecordIsComplete) {
  std::vector<std::string> missing;
  for (const AlgorithmRecord* record : allAlgorithms()) {
    const AlgorithmRecord& r = *record;
    if (!r.name || !*r.name) missing.push_back(std::string(collName(r.kind)) + ": a record without a name");
    if (!r.generate) missing.push_back(describe(r) + ": no generator");
    if (!r.costShape) missing.push_back(describe(r) + ": no cost shape");
    if (!r.applies) missing.push_back(describe(r) + ": no applies");
    if (!r.description || !*r.description) missing.push_back(describe(r) + ": no description");
  }
  EXPECT_TRUE(missing.empty()) << ::testing::PrintToString(missing);
}

// A cost shape for every record, for every collective: each record that applies to a layout is priced there (a
// record without a shape would be dropped by the selector, tested and never chosen).
TEST(Algorithms, EveryRecordIsPricedWhereItApplies) {
  for (const std::vector<int>& hostOf : layouts()) {
    const int n = static_cast<int>(hostOf.size());
    const HostLayout layout(n, hostOf, "test");
    TuningInputs in;
    in.nranks = n;
    in.hostOf = hostOf;
    for (const AlgorithmRecord* record : allAlgorithms()) {
      const AlgorithmRecord& r = *record;
      SCOPED_TRACE(describe(r) + " on " + ::testing::PrintToString(hostOf));
      const bool applies = r.applies(layout, 1 << 20);
      ShapeCounts counts;
      bool priced = false;
      EXPECT_NO_THROW(priced = shapeCounts(r.kind, r.name, 1 << 20, in, &counts));
      EXPECT_EQ(priced, applies);
      bool listed = false;
      for (const Prediction& p : predictAll(r.kind, 1 << 20, in)) {
        listed |= p.algorithm == r.name;
        EXPECT_GT(p.us, 0) << p.algorithm;
      }
      EXPECT_EQ(listed, applies);
      if (!applies) {
        EXPECT_STRNE(r.requirement, "") << "a record that does not apply everywhere says what it needs";
      }
    }
  }
}

TEST(Algorithms, EveryCollectiveHasADefaultAndUniqueNames) {
  for (int k = 0; k < kNumCollKinds; ++k) {
    const CollKind kind = static_cast<CollKind>(k);
    SCOPED_TRACE(collName(kind));
    const std::vector<const AlgorithmRecord*> records = algorithmRecords(kind);
    ASSERT_FALSE(records.empty());
    EXPECT_EQ(&defaultAlgorithm(kind), records.front());
    EXPECT_EQ(algorithmsFor(kind).front(), records.front()->name);
    std::set<std::string> names;
    for (const AlgorithmRecord* r : records) {
      EXPECT_TRUE(names.insert(r->name).second) << "two records named " << r->name;
      EXPECT_EQ(findAlgorithm(kind, r->name), r);
      EXPECT_EQ(&algorithmOf(kind, r->name), r);
    }
    // The default applies everywhere: a communicator on any layout must have something to run.
    EXPECT_STREQ(records.front()->requirement, "");
  }
  EXPECT_EQ(findAlgorithm(CollKind::kBroadcast, "ring"), nullptr);
  try {
    algorithmOf(CollKind::kAllGather, "tree");
    ADD_FAILURE() << "allgather/tree was found";
  } catch (const InvalidArgument& e) {
    EXPECT_STREQ(e.what(), "unknown allgather algorithm 'tree' (known: ring, rhd, hier)");
  }
}

// The device executor runs the default of every collective it serves unless STRATA_ALGO forces another, and cuts it
// into channels: those defaults must be device-capable, and deviceCapable is what channelSafe reports.
TEST(Algorithms, DeviceDefaultsAreDeviceCapable) {
  for (CollKind kind : {CollKind::kAllReduce, CollKind::kReduceScatter, CollKind::kAllGather, CollKind::kBroadcast,
                        CollKind::kReduce, CollKind::kAllToAll})
    EXPECT_TRUE(defaultAlgorithm(kind).deviceCapable) << collName(kind);
  for (const AlgorithmRecord* r : allAlgorithms())
    EXPECT_EQ(channelSafe(r->kind, r->name), r->deviceCapable) << describe(*r);
  EXPECT_FALSE(channelSafe(CollKind::kAllReduce, "no-such-algorithm"));
}

// The records' NCCL names: Ring stands for the training trio's rings, Tree for the all-reduce tree (NCCL's own
// meaning of NCCL_ALGO), and no two records of one collective claim the same NCCL name.
TEST(Algorithms, NcclNames) {
  std::set<std::pair<std::string, std::string>> twins;
  for (const AlgorithmRecord* r : allAlgorithms())
    if (r->ncclName) {
      EXPECT_TRUE(twins.emplace(collName(r->kind), r->ncclName).second) << describe(*r);
    }
  const std::set<std::pair<std::string, std::string>> want = {
      {"allreduce", "Ring"}, {"reducescatter", "Ring"}, {"allgather", "Ring"}, {"allreduce", "Tree"}};
  EXPECT_EQ(twins, want);
}

}  // namespace
}  // namespace strata
