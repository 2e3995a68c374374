// strataCommShrink and strataCommRevoke (NCCL's ncclCommShrink/ncclCommRevoke): survivors make a communicator
// without the ranks they exclude, without a new rendezvous, also after the parent failed; revoke stops one
// communicator here and on its other ranks, and nothing else. Ranks are threads of this process; a rank that dies
// is tested with processes (tests/multiproc/test_shrink.sh).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap/failure_scope.h"
#include "strata/strata.h"
#include "test_util.h"

namespace {

using strata::test::threadRanks;

void eachRank(int n, const std::function<void(int)>& body) {
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back(body, r);
  for (auto& t : threads) t.join();
}

/// A sum all-reduce of `mine` (1000 elements) on `c`: every element must come back as `want`.
void expectSum(strataComm_t c, float mine, float want) {
  std::vector<float> v(1000, mine);
  ASSERT_EQ(strataAllReduce(v.data(), v.data(), v.size(), strataFloat32, strataSum, c, nullptr), strataSuccess)
      << strataGetLastError(c);
  for (float x : v) ASSERT_EQ(x, want);
}

class EnvTimeout {
 public:
  explicit EnvTimeout(const char* ms) {
    const char* old = getenv("STRATA_TIMEOUT_MS");
    had_ = old != nullptr;
    if (old) saved_ = old;
    setenv("STRATA_TIMEOUT_MS", ms, 1);
  }
  ~EnvTimeout() {
    if (had_) setenv("STRATA_TIMEOUT_MS", saved_.c_str(), 1);
    else unsetenv("STRATA_TIMEOUT_MS");
  }

 private:
  bool had_ = false;
  std::string saved_;
};

TEST(Shrink, SurvivorsKeepTheirOrderAndComputeCorrectly) {
  const int n = 4;
  std::vector<strataComm_t> comms = threadRanks(n);
  std::vector<strataComm_t> shrunk(n, nullptr);
  const int excluded[] = {1};
  eachRank(n, [&](int r) {
    if (r == 1) return;  // the excluded rank does not call
    ASSERT_EQ(strataCommShrink(comms[r], excluded, 1, &shrunk[r], nullptr, STRATA_SHRINK_DEFAULT), strataSuccess)
        << strataGetLastError(comms[r]);
    int size = 0, rank = -1;
    strataCommCount(shrunk[r], &size);
    strataCommUserRank(shrunk[r], &rank);
    EXPECT_EQ(size, 3);
    EXPECT_EQ(rank, r == 0 ? 0 : r - 1);
    expectSum(shrunk[r], static_cast<float>(r + 1), 1 + 3 + 4);
  });
  // The parent still works for everybody, and so does a split of the shrunk communicator.
  eachRank(n, [&](int r) { expectSum(comms[r], 1.0f, 4.0f); });
  eachRank(n, [&](int r) {
    if (r == 1) return;
    strataComm_t sub = nullptr;
    ASSERT_EQ(strataCommSplit(shrunk[r], r % 2, 0, &sub, nullptr), strataSuccess) << strataGetLastError(shrunk[r]);
    expectSum(sub, 1.0f, r % 2 == 0 ? 2.0f : 1.0f);  // {0, 2} and {3}
    EXPECT_EQ(strataCommDestroy(sub), strataSuccess);
  });
  for (int r = 0; r < n; ++r) {
    if (shrunk[r]) {
      EXPECT_EQ(strataCommDestroy(shrunk[r]), strataSuccess);
    }
    EXPECT_EQ(strataCommDestroy(comms[r]), strataSuccess);
  }
}

// The point of shrink: the parent failed (here every rank called another collective at #2), and the survivors go
// on in a communicator that does not hear of that failure, while a failure in the new one still stops it.
TEST(Shrink, WorksAfterTheParentFailedAndHearsOnlyOfItsOwnFailures) {
  EnvTimeout timeout("5000");
  const int n = 3;
  std::vector<strataComm_t> comms = threadRanks(n);
  std::vector<strataComm_t> shrunk(n, nullptr), again(n, nullptr);
  eachRank(n, [&](int r) {
    std::vector<float> v(64, 1.0f), all(64 * n);
    const strataResult_t bad =
        r == 0 ? strataAllGather(v.data(), all.data(), 64, strataFloat32, comms[r], nullptr)
               : strataAllReduce(v.data(), v.data(), 64, strataFloat32, strataSum, comms[r], nullptr);
    EXPECT_NE(bad, strataSuccess);
    ASSERT_EQ(strataCommShrink(comms[r], nullptr, 0, &shrunk[r], nullptr, STRATA_SHRINK_DEFAULT), strataSuccess)
        << strataGetLastError(comms[r]);
    expectSum(shrunk[r], static_cast<float>(r + 1), 6.0f);
    // The parent stays failed.
    float x = 1;
    EXPECT_NE(strataAllReduce(&x, &x, 1, strataFloat32, strataSum, comms[r], nullptr), strataSuccess);
    // A desync in the shrunk communicator fails it on every rank...
    const strataResult_t bad2 =
        r == 2 ? strataBroadcast(v.data(), v.data(), 64, strataFloat32, 0, shrunk[r], nullptr)
               : strataAllReduce(v.data(), v.data(), 64, strataFloat32, strataMax, shrunk[r], nullptr);
    EXPECT_NE(bad2, strataSuccess);
    EXPECT_NE(strataAllReduce(&x, &x, 1, strataFloat32, strataSum, shrunk[r], nullptr), strataSuccess);
    // ...and a shrink of it (one epoch later again) works.
    ASSERT_EQ(strataCommShrink(shrunk[r], nullptr, 0, &again[r], nullptr, STRATA_SHRINK_ABORT), strataSuccess)
        << strataGetLastError(shrunk[r]);
    expectSum(again[r], 2.0f, 6.0f);
  });
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(strataCommDestroy(again[r]), strataSuccess);
    strataCommDestroy(shrunk[r]);
    strataCommDestroy(comms[r]);
  }
}

TEST(Shrink, DifferentExcludeListsFailOnEveryRankNamingBoth) {
  EnvTimeout timeout("5000");
  const int n = 4;
  std::vector<strataComm_t> comms = threadRanks(n);
  std::string errors[n];
  eachRank(n, [&](int r) {
    if (r == 3) return;
    const int mine[] = {3};
    const int other[] = {2, 3};
    strataComm_t out = nullptr;
    // Ranks 0 and 2 drop rank 3, rank 1 drops ranks 2 and 3: rank 0 (rank 0 of the new communicator for both
    // views) sees rank 1's list, answers rank 1, and reports to the new epoch, which ends rank 2's wait.
    const strataResult_t res = r == 1 ? strataCommShrink(comms[r], other, 2, &out, nullptr, 0)
                                      : strataCommShrink(comms[r], mine, 1, &out, nullptr, 0);
    EXPECT_NE(res, strataSuccess) << "rank " << r;
    EXPECT_EQ(out, nullptr);
    errors[r] = strataGetLastError(comms[r]);
  });
  for (int r : {0, 1}) {
    SCOPED_TRACE(errors[r]);
    EXPECT_NE(errors[r].find("{2,3}"), std::string::npos);
    EXPECT_NE(errors[r].find("{3}"), std::string::npos);
    EXPECT_NE(errors[r].find("same exclude list"), std::string::npos);
  }
  EXPECT_FALSE(errors[2].empty());
  for (strataComm_t c : comms) strataCommAbort(c);
}

// A rank left out of one shrink while alive takes part in the next shrink of the same communicator: the ranks
// must still agree on the new communicator (they have made different numbers of shrinks of it).
TEST(Shrink, ARankLeftOutOfOneShrinkJoinsTheNext) {
  EnvTimeout timeout("5000");
  const int n = 3;
  std::vector<strataComm_t> comms = threadRanks(n);
  eachRank(n, [&](int r) {
    if (r != 2) {
      const int last[] = {2};
      strataComm_t a = nullptr;
      ASSERT_EQ(strataCommShrink(comms[r], last, 1, &a, nullptr, STRATA_SHRINK_DEFAULT), strataSuccess)
          << strataGetLastError(comms[r]);
      expectSum(a, 1.0f, 2.0f);
      EXPECT_EQ(strataCommDestroy(a), strataSuccess);
    }
    expectSum(comms[r], 1.0f, 3.0f);
    for (int round = 0; round < 2; ++round) {
      strataComm_t b = nullptr;
      ASSERT_EQ(strataCommShrink(comms[r], nullptr, 0, &b, nullptr, STRATA_SHRINK_DEFAULT), strataSuccess)
          << strataGetLastError(comms[r]);
      expectSum(b, static_cast<float>(r + 1), 6.0f);
      EXPECT_EQ(strataCommDestroy(b), strataSuccess);
    }
  });
  for (strataComm_t c : comms) EXPECT_EQ(strataCommDestroy(c), strataSuccess);
}

TEST(Shrink, BadArgumentsAreRefusedNamingTheValue) {
  std::vector<strataComm_t> comms = threadRanks(2);
  strataComm_t out = nullptr;
  const int self[] = {0};
  const int outOfRange[] = {2};
  const int negative[] = {-1};
  struct Case {
    const int* list;
    int count;
    strataComm_t* out;
    int flags;
    const char* words;
  } cases[] = {
      {self, 1, &out, 0, "its own exclude list"},
      {outOfRange, 1, &out, 0, "excluded rank 2 is out of range"},
      {negative, 1, &out, 0, "excluded rank -1 is out of range"},
      {nullptr, 1, &out, 0, "excludeRanks is NULL"},
      {self, -1, &out, 0, "excludeCount -1"},
      {self, 2, &out, 0, "excludeCount 2"},
      {self, 1, nullptr, 0, "newcomm is NULL"},
      {self, 1, &out, 7, "flags 7"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(strataCommShrink(comms[0], c.list, c.count, c.out, nullptr, c.flags), strataInvalidArgument) << c.words;
    EXPECT_NE(std::string(strataGetLastError(comms[0])).find(c.words), std::string::npos)
        << c.words << ": " << strataGetLastError(comms[0]);
  }
  EXPECT_EQ(strataCommShrink(nullptr, nullptr, 0, &out, nullptr, 0), strataInvalidUsage);
  EXPECT_EQ(strataCommRevoke(comms[0], 3), strataInvalidArgument);
  // Nothing above touched the communicators.
  eachRank(2, [&](int r) { expectSum(comms[r], 1.0f, 2.0f); });
  for (strataComm_t c : comms) EXPECT_EQ(strataCommDestroy(c), strataSuccess);
}

// A watchdog revokes rank 0's communicator while its call waits on rank 1, which is busy elsewhere: the call
// returns naming the revoke, rank 1's next call in that communicator fails naming rank 0's revoke (not after its
// deadline), a sibling communicator of the same ranks is untouched, and the revoked one can still be shrunk.
TEST(Revoke, StopsOneCommunicatorHereAndOnItsPeersOnly) {
  EnvTimeout timeout("20000");
  for (int round = 0; round < 4; ++round) {
    std::vector<strataComm_t> comms = threadRanks(2);
    std::vector<strataComm_t> sibling(2, nullptr), shrunk(2, nullptr);
    eachRank(2, [&](int r) { ASSERT_EQ(strataCommSplit(comms[r], 0, 0, &sibling[r], nullptr), strataSuccess); });
    std::atomic<bool> revoked{false};
    std::string error0, error1;
    // Odd rounds: the blocked call waits in the transport; even rounds: in its first connection's set-up.
    if (round % 2) eachRank(2, [&](int r) { expectSum(comms[r], 1.0f, 2.0f); });
    std::thread rank0([&] {
      std::vector<float> v(1 << 16, 1.0f);
      const auto t0 = std::chrono::steady_clock::now();
      EXPECT_NE(strataAllReduce(v.data(), v.data(), v.size(), strataFloat32, strataSum, comms[0], nullptr),
                strataSuccess);
      error0 = strataGetLastError(nullptr);
      EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10)) << "the call waited its deadline";
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(50 + 30 * round));
    ASSERT_EQ(strataCommRevoke(comms[0], STRATA_REVOKE_DEFAULT), strataSuccess) << strataGetLastError(comms[0]);
    revoked = true;
    rank0.join();
    EXPECT_NE(error0.find("revoked"), std::string::npos) << error0;
    std::thread rank1([&] {
      std::vector<float> v(1 << 16, 1.0f);
      const auto t0 = std::chrono::steady_clock::now();
      EXPECT_NE(strataAllReduce(v.data(), v.data(), v.size(), strataFloat32, strataSum, comms[1], nullptr),
                strataSuccess);
      error1 = strataGetLastError(nullptr);
      EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10)) << "the call waited its deadline";
    });
    rank1.join();
    EXPECT_NE(error1.find("rank 0"), std::string::npos) << error1;
    EXPECT_NE(error1.find("revoked"), std::string::npos) << error1;
    // Later calls on rank 0 are refused; the sibling works on both.
    float x = 1;
    EXPECT_EQ(strataAllReduce(&x, &x, 1, strataFloat32, strataSum, comms[0], nullptr), strataInvalidUsage);
    eachRank(2, [&](int r) { expectSum(sibling[r], 1.0f, 2.0f); });
    eachRank(2, [&](int r) {
      ASSERT_EQ(strataCommShrink(comms[r], nullptr, 0, &shrunk[r], nullptr, STRATA_SHRINK_DEFAULT), strataSuccess)
          << strataGetLastError(comms[r]);
      expectSum(shrunk[r], 3.0f, 6.0f);
    });
    for (int r = 0; r < 2; ++r) {
      EXPECT_EQ(strataCommDestroy(shrunk[r]), strataSuccess);
      EXPECT_EQ(strataCommDestroy(sibling[r]), strataSuccess);
      EXPECT_EQ(strataCommDestroy(comms[r]), strataSuccess);
    }
  }
}

// Which failures end which views' waits (bootstrap/failure_scope.h).
TEST(FailureScope, CoversWhatEachEpochMustHearOf) {
  strata::FailureScope world;  // epoch 0: everything
  strata::FailureScope shrunk;
  shrunk.commId = 77;
  shrunk.epoch = 1;
  shrunk.worldRanks = {0, 1, 3};
  const strata::BootstrapFailure death2{"rank 2 died", 0, 2, false, 0};
  const strata::BootstrapFailure death3{"rank 3 died", 0, 3, false, 0};
  const strata::BootstrapFailure report0{"timed out", 0, -1, false, 0};
  const strata::BootstrapFailure report1{"desync", 1, -1, false, 0};
  const strata::BootstrapFailure rootLost{"root lost", 0, -1, true, 0};
  const strata::BootstrapFailure revokeOther{"revoked", 1, -1, false, 55};
  const strata::BootstrapFailure revokeThis{"revoked", 0, -1, false, 77};
  EXPECT_TRUE(world.covers(death2));
  EXPECT_TRUE(world.covers(report0));
  EXPECT_TRUE(world.covers(report1));
  EXPECT_FALSE(world.covers(revokeOther));
  EXPECT_FALSE(shrunk.covers(death2));
  EXPECT_TRUE(shrunk.covers(death3));
  EXPECT_FALSE(shrunk.covers(report0));
  EXPECT_TRUE(shrunk.covers(report1));
  EXPECT_TRUE(shrunk.covers(rootLost));
  EXPECT_FALSE(shrunk.covers(revokeOther));
  EXPECT_TRUE(shrunk.covers(revokeThis));
}

}  // namespace
