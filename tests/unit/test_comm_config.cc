// strataConfig_t: per-communicator settings for creation, split and shrink (read by size and version, each field
// checked as its STRATA_* variable is), and non-blocking creation. Ranks are threads of this process.
#include <dirent.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "strata/strata.h"
#include "test_util.h"

namespace {

using strata::test::ScopedEnv;

// Runs body(rank) on n threads at once.
void eachRank(int n, const std::function<void(int)>& body) {
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back(body, r);
  for (auto& t : threads) t.join();
}

// n communicators of one job made with `config` (the same on every rank); every handle back on this thread.
std::vector<strataComm_t> configuredRanks(int n, const strataConfig_t* config) {
  strataUniqueId id;
  EXPECT_EQ(strataGetUniqueId(&id), strataSuccess);
  std::vector<strataComm_t> comms(static_cast<size_t>(n), nullptr);
  eachRank(n, [&](int r) {
    EXPECT_EQ(strataCommInitRankConfig(&comms[static_cast<size_t>(r)], n, id, r, config), strataSuccess)
        << strataGetLastError(nullptr);
  });
  return comms;
}

// The result of a 1-rank creation with `config`, and the error it recorded.
std::pair<strataResult_t, std::string> createOneRank(const strataConfig_t* config) {
  strataUniqueId id;
  EXPECT_EQ(strataGetUniqueId(&id), strataSuccess);
  strataComm_t comm = nullptr;
  const strataResult_t r = strataCommInitRankConfig(&comm, 1, id, 0, config);
  std::string error = r == strataSuccess ? "" : strataGetLastError(nullptr);
  if (comm) strataCommDestroy(comm);
  return {r, error};
}

TEST(CommConfig, TheInitializerLeavesEverySettingUnset) {
  const strataConfig_t config = STRATA_CONFIG_INITIALIZER;
  EXPECT_EQ(config.size, sizeof(strataConfig_t));
  EXPECT_EQ(config.magic, STRATA_CONFIG_MAGIC);
  EXPECT_EQ(config.version, static_cast<unsigned>(STRATA_VERSION_CODE));
  EXPECT_EQ(config.blocking, STRATA_CONFIG_UNDEF_INT);
  EXPECT_EQ(config.timeoutMs, STRATA_CONFIG_UNDEF_INT);
  EXPECT_EQ(config.commName, nullptr);
  EXPECT_EQ(config.algo, nullptr);
  EXPECT_EQ(config.transport, nullptr);
  EXPECT_EQ(config.nslots, STRATA_CONFIG_UNDEF_INT);
  EXPECT_EQ(config.pieceBytes, STRATA_CONFIG_UNDEF_INT);
  auto [r, error] = createOneRank(&config);
  EXPECT_EQ(r, strataSuccess) << error;
}

TEST(CommConfig, AWrongStructOrValueIsRefusedNamingTheField) {
  struct Case {
    std::function<void(strataConfig_t&)> spoil;
    std::string expected;  // in the error message
  };
  const std::vector<Case> cases = {
      {[](strataConfig_t& c) { c.size = 8; }, "config->size 8 is smaller"},
      {[](strataConfig_t& c) { c.size = sizeof(strataConfig_t) + 8; }, "larger than this library's"},
      {[](strataConfig_t& c) { c.magic = 0; }, "STRATA_CONFIG_INITIALIZER"},
      {[](strataConfig_t& c) { c.blocking = 2; }, "config->blocking 2 is neither 0 nor 1"},
      {[](strataConfig_t& c) { c.timeoutMs = 0; }, "config->timeoutMs"},
      {[](strataConfig_t& c) { c.timeoutMs = -5; }, "config->timeoutMs"},
      {[](strataConfig_t& c) { c.transport = "pigeon"; }, "config->transport"},
      {[](strataConfig_t& c) { c.nslots = 1; }, "config->nslots"},
      {[](strataConfig_t& c) { c.pieceBytes = 100; }, "config->pieceBytes"},
      {[](strataConfig_t& c) { c.algo = "allreduce"; }, "config->algo"},
      {[](strataConfig_t& c) { c.algo = "allreduce:no-such-algorithm"; }, "no-such-algorithm"},
  };
  for (const Case& k : cases) {
    strataConfig_t config = STRATA_CONFIG_INITIALIZER;
    k.spoil(config);
    auto [r, error] = createOneRank(&config);
    EXPECT_EQ(r, strataInvalidArgument) << k.expected;
    EXPECT_NE(error.find(k.expected), std::string::npos) << error;
  }
}

// A caller compiled against an older, shorter struct: the fields past its size are not read (here they hold
// values that would be refused), and what it did set applies.
TEST(CommConfig, AnOlderShorterStructIsReadUpToItsSize) {
  strataConfig_t config = STRATA_CONFIG_INITIALIZER;
  config.size = offsetof(strataConfig_t, algo);  // size, magic, version, blocking, timeoutMs, commName
  config.timeoutMs = 1234;
  config.algo = "allreduce:no-such-algorithm";
  config.transport = "pigeon";
  config.nslots = 1;
  auto [r, error] = createOneRank(&config);
  EXPECT_EQ(r, strataSuccess) << error;
}

// Two communicators of one process with different timeouts: each waits its own, and a split child takes the one
// its config gives while its parent keeps its own (no environment variable is touched).
TEST(CommConfig, EachCommunicatorWaitsItsOwnTimeout) {
  ScopedEnv env("STRATA_TIMEOUT_MS", "60000");
  strataConfig_t shortWait = STRATA_CONFIG_INITIALIZER;
  shortWait.timeoutMs = 300;
  std::vector<strataComm_t> fast = configuredRanks(2, &shortWait);
  std::vector<strataComm_t> slow = configuredRanks(2, nullptr);
  ASSERT_TRUE(fast[0] && fast[1] && slow[0] && slow[1]);
  // Rank 0 waits for a message rank 1 never sends.
  float x = 0;
  EXPECT_EQ(strataRecv(&x, 1, strataFloat32, 1, fast[0], nullptr), strataTimeout);
  const std::string error = strataGetLastError(fast[0]);
  EXPECT_NE(error.find("timed out after 300 ms"), std::string::npos) << error;

  // The other communicator still has the environment's timeout: a recv that is answered 500 ms later (past 300 ms)
  // succeeds.
  float got = 0;
  eachRank(2, [&](int r) {
    float one = 1;
    if (r == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      EXPECT_EQ(strataSend(&one, 1, strataFloat32, 0, slow[1], nullptr), strataSuccess);
    } else {
      EXPECT_EQ(strataRecv(&got, 1, strataFloat32, 1, slow[0], nullptr), strataSuccess) << strataGetLastError(slow[0]);
    }
  });
  EXPECT_EQ(got, 1.0f);

  // A child split with a config of its own: its timeout, in its exchanges through the bootstrap too (the first
  // message to a peer sets up the connection there); the parent keeps its own: a send answered 500 ms late still
  // arrives. (A failure anywhere in a job fails its communicators, so the parent is checked first.)
  std::vector<strataComm_t> child(2, nullptr);
  strataConfig_t childConfig = STRATA_CONFIG_INITIALIZER;
  childConfig.timeoutMs = 250;
  eachRank(2, [&](int r) {
    EXPECT_EQ(strataCommSplit(slow[r], 0, r, &child[r], &childConfig), strataSuccess) << strataGetLastError(slow[r]);
  });
  ASSERT_TRUE(child[0] && child[1]);
  got = 0;
  eachRank(2, [&](int r) {
    float two = 2;
    if (r == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      EXPECT_EQ(strataSend(&two, 1, strataFloat32, 0, slow[1], nullptr), strataSuccess);
    } else {
      EXPECT_EQ(strataRecv(&got, 1, strataFloat32, 1, slow[0], nullptr), strataSuccess) << strataGetLastError(slow[0]);
    }
  });
  EXPECT_EQ(got, 2.0f);
  EXPECT_EQ(strataRecv(&x, 1, strataFloat32, 1, child[0], nullptr), strataTimeout);
  const std::string childError = strataGetLastError(child[0]);
  EXPECT_NE(childError.find("timed out after 250 ms"), std::string::npos) << childError;
  for (auto* list : {&fast, &slow, &child})
    for (strataComm_t c : *list) strataCommAbort(c);
}

// A forced algorithm in the config binds that communicator only; a split without a config inherits it.
TEST(CommConfig, ForcedAlgorithmsArePerCommunicator) {
  ScopedEnv env("STRATA_ALGO", nullptr);
  strataConfig_t ring = STRATA_CONFIG_INITIALIZER, rhd = STRATA_CONFIG_INITIALIZER;
  ring.algo = "allreduce:ring";
  rhd.algo = "allreduce:rhd";
  std::vector<strataComm_t> a = configuredRanks(2, &ring);
  std::vector<strataComm_t> b = configuredRanks(2, &rhd);
  auto algorithmOf = [](strataComm_t comm) {
    char name[64] = {0};
    EXPECT_EQ(strataCommExplain(comm, strataCollAllReduce, 1 << 20, strataFloat32, name, sizeof(name), nullptr),
              strataSuccess);
    return std::string(name);
  };
  EXPECT_EQ(algorithmOf(a[0]), "ring");
  EXPECT_EQ(algorithmOf(b[0]), "rhd");
  std::vector<strataComm_t> child(2, nullptr);
  eachRank(2, [&](int r) { EXPECT_EQ(strataCommSplit(a[r], 0, r, &child[r], nullptr), strataSuccess); });
  EXPECT_EQ(algorithmOf(child[0]), "ring");
  eachRank(2, [&](int r) {  // and they run
    int mine = r + 1, sum = 0;
    EXPECT_EQ(strataAllReduce(&mine, &sum, 1, strataInt32, strataSum, b[r], nullptr), strataSuccess);
    EXPECT_EQ(sum, 3);
  });
  for (auto* list : {&a, &b, &child})
    for (strataComm_t c : *list) strataCommDestroy(c);
}

TEST(CommConfig, TheNameIsInTheFlightRecorderDump) {
  char dir[] = "/tmp/strata-config-name-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  strataConfig_t config = STRATA_CONFIG_INITIALIZER;
  config.commName = "trainer-dp";
  strataUniqueId id;
  ASSERT_EQ(strataGetUniqueId(&id), strataSuccess);
  strataComm_t comm = nullptr;
  ASSERT_EQ(strataCommInitRankConfig(&comm, 1, id, 0, &config), strataSuccess) << strataGetLastError(nullptr);
  ASSERT_EQ(strataCommDumpFlightRecorder(comm, dir), strataSuccess) << strataGetLastError(comm);
  std::string text;
  DIR* d = opendir(dir);
  ASSERT_NE(d, nullptr);
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    const std::string path = std::string(dir) + "/" + e->d_name;
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    text += ss.str();
    std::remove(path.c_str());
  }
  closedir(d);
  rmdir(dir);
  EXPECT_NE(text.find("\"name\": \"trainer-dp\""), std::string::npos) << text;
  strataCommDestroy(comm);
}

// blocking = 0: the call returns strataInProgress with a handle before the other rank has arrived; the handle
// reports strataInProgress until the communicator exists, then works.
TEST(CommConfig, NonBlockingCreationReturnsAtOnceAndCompletes) {
  strataConfig_t config = STRATA_CONFIG_INITIALIZER;
  config.blocking = 0;
  strataUniqueId id;
  ASSERT_EQ(strataGetUniqueId(&id), strataSuccess);
  strataComm_t comm0 = nullptr, comm1 = nullptr;
  ASSERT_EQ(strataCommInitRankConfig(&comm0, 2, id, 0, &config), strataInProgress) << strataGetLastError(nullptr);
  ASSERT_NE(comm0, nullptr);
  strataResult_t state = strataSuccess;
  ASSERT_EQ(strataCommGetAsyncError(comm0, &state), strataSuccess);
  EXPECT_EQ(state, strataInProgress);  // rank 1 has not called yet: it cannot be ready
  std::thread late([&] { EXPECT_EQ(strataCommInitRankConfig(&comm1, 2, id, 1, nullptr), strataSuccess); });
  do {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    ASSERT_EQ(strataCommGetAsyncError(comm0, &state), strataSuccess);
  } while (state == strataInProgress);
  late.join();
  EXPECT_EQ(state, strataSuccess);
  int size = 0;
  EXPECT_EQ(strataCommCount(comm0, &size), strataSuccess);
  EXPECT_EQ(size, 2);
  eachRank(2, [&](int r) {
    int mine = r + 1, sum = 0;
    EXPECT_EQ(strataAllReduce(&mine, &sum, 1, strataInt32, strataSum, r == 0 ? comm0 : comm1, nullptr), strataSuccess);
    EXPECT_EQ(sum, 3);
  });
  EXPECT_EQ(strataCommDestroy(comm0), strataSuccess);
  EXPECT_EQ(strataCommDestroy(comm1), strataSuccess);
}

// A call made on the handle before the creation ends waits for it; a creation that fails (the other rank never
// comes) is reported by strataCommGetAsyncError and by every call, and the handle can still be destroyed.
TEST(CommConfig, NonBlockingCreationCallsWaitAndFailuresAreReported) {
  strataConfig_t config = STRATA_CONFIG_INITIALIZER;
  config.blocking = 0;
  {
    strataUniqueId id;
    ASSERT_EQ(strataGetUniqueId(&id), strataSuccess);
    strataComm_t comm0 = nullptr, comm1 = nullptr;
    ASSERT_EQ(strataCommInitRankConfig(&comm0, 2, id, 0, &config), strataInProgress);
    std::thread late([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      EXPECT_EQ(strataCommInitRankConfig(&comm1, 2, id, 1, nullptr), strataSuccess);
      int mine = 2, sum = 0;
      EXPECT_EQ(strataAllReduce(&mine, &sum, 1, strataInt32, strataSum, comm1, nullptr), strataSuccess);
    });
    int mine = 1, sum = 0;  // issued at once: waits for the creation, then runs
    EXPECT_EQ(strataAllReduce(&mine, &sum, 1, strataInt32, strataSum, comm0, nullptr), strataSuccess)
        << strataGetLastError(comm0);
    EXPECT_EQ(sum, 3);
    late.join();
    strataCommDestroy(comm0);
    strataCommDestroy(comm1);
  }
  config.timeoutMs = 300;
  strataUniqueId id;
  ASSERT_EQ(strataGetUniqueId(&id), strataSuccess);
  strataComm_t alone = nullptr;
  ASSERT_EQ(strataCommInitRankConfig(&alone, 2, id, 0, &config), strataInProgress);
  strataResult_t state = strataInProgress;
  while (state == strataInProgress) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    ASSERT_EQ(strataCommGetAsyncError(alone, &state), strataSuccess);
  }
  EXPECT_EQ(state, strataTimeout);
  int mine = 1, sum = 0;
  EXPECT_EQ(strataAllReduce(&mine, &sum, 1, strataInt32, strataSum, alone, nullptr), strataTimeout);
  const std::string error = strataGetLastError(nullptr);
  EXPECT_NE(error.find("non-blocking creation failed"), std::string::npos) << error;
  EXPECT_EQ(strataCommDestroy(alone), strataSuccess);
  EXPECT_EQ(strataCommDestroy(alone), strataInvalidUsage);  // gone
}

// Split and shrink take a config too (here: a name and a timeout); shrink's child gets its own, the parent keeps
// its own.
TEST(CommConfig, ShrinkTakesAConfig) {
  std::vector<strataComm_t> comms = configuredRanks(3, nullptr);
  strataConfig_t config = STRATA_CONFIG_INITIALIZER;
  config.timeoutMs = 200;
  std::vector<strataComm_t> child(3, nullptr);
  const int excluded[] = {2};
  eachRank(2, [&](int r) {
    EXPECT_EQ(strataCommShrink(comms[r], excluded, 1, &child[r], &config, STRATA_SHRINK_DEFAULT), strataSuccess)
        << strataGetLastError(comms[r]);
  });
  ASSERT_TRUE(child[0] && child[1]);
  float x = 0;
  EXPECT_EQ(strataRecv(&x, 1, strataFloat32, 1, child[0], nullptr), strataTimeout);
  const std::string error = strataGetLastError(child[0]);
  EXPECT_NE(error.find("timed out after 200 ms"), std::string::npos) << error;
  strataConfig_t bad = STRATA_CONFIG_INITIALIZER;
  bad.nslots = 0;
  strataComm_t none = nullptr;
  EXPECT_EQ(strataCommShrink(comms[0], excluded, 1, &none, &bad, STRATA_SHRINK_DEFAULT), strataInvalidArgument);
  EXPECT_NE(std::string(strataGetLastError(comms[0])).find("config->nslots"), std::string::npos);
  for (strataComm_t c : child)
    if (c) strataCommAbort(c);
  for (strataComm_t c : comms) strataCommAbort(c);
}

}  // namespace
