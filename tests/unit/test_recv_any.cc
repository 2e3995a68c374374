// Receives from any source (strataRecvAny): the first send to arrive from any other rank is matched, its rank is
// reported, a collective's message from a rank that is ahead is never taken for it, sizes must agree, and bad use
// is refused. Ranks are threads of this process; every case runs over shm, tcp and (when built) ucx.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "strata/strata.h"

namespace {

struct Outcome {
  strataResult_t result = strataSuccess;
  std::string error;
};

using RankCall = std::function<strataResult_t(int rank, strataComm_t comm)>;

class RecvAny : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    setenv("STRATA_TRANSPORT", GetParam(), 1);
    setenv("STRATA_TIMEOUT_MS", "30000", 1);  // a receive that never matches fails by timeout, not by hanging
  }
  void TearDown() override {
    unsetenv("STRATA_TRANSPORT");
    unsetenv("STRATA_TIMEOUT_MS");
    unsetenv("STRATA_ALGO");
  }

  /// Runs `call` on `n` thread ranks of one job; each rank's result and last error.
  std::vector<Outcome> run(int n, const RankCall& call) {
    strataUniqueId id;
    EXPECT_EQ(strataGetUniqueId(&id), strataSuccess);
    std::vector<strataComm_t> comms(n, nullptr);
    std::vector<Outcome> out(n);
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r)
      threads.emplace_back([&, r] {
        if (strataCommInitRank(&comms[r], n, id, r) != strataSuccess) {
          out[r] = {strataInternalError, strataGetLastError(nullptr)};
          return;
        }
        out[r].result = call(r, comms[r]);
        if (out[r].result != strataSuccess) out[r].error = strataGetLastError(nullptr);
      });
    for (auto& t : threads) t.join();
    for (int r = 0; r < n; ++r)
      if (comms[r]) strataCommDestroy(comms[r]);
    return out;
  }

  bool transportMissing(const std::vector<Outcome>& out) const {
    for (const Outcome& o : out)
      if (o.error.find("without UCX") != std::string::npos || o.error.find("UCX library") != std::string::npos)
        return true;
    return false;
  }
};

float valueOf(int rank, int message, size_t i) { return static_cast<float>(rank * 1000000 + message * 1000) + i; }

// Ranks 1..n-1 each send `perSender` messages to rank 0, which posts (n-1) x perSender receives from any source:
// every sender is named as often as it sent, its messages arrive in its order, and every byte is its.
TEST_P(RecvAny, SeveralSendersAreEachNamedWithTheirData) {
  constexpr int n = 4, perSender = 2;
  constexpr size_t count = 3000;  // more than one shm inline slot, less than a piece
  std::vector<std::vector<int>> order(1);
  std::vector<std::string> bad;
  auto out = run(n, [&](int rank, strataComm_t comm) -> strataResult_t {
    if (rank != 0) {
      for (int m = 0; m < perSender; ++m) {
        std::vector<float> buf(count);
        for (size_t i = 0; i < count; ++i) buf[i] = valueOf(rank, m, i);
        if (strataResult_t r = strataSend(buf.data(), count, strataFloat32, 0, comm, nullptr)) return r;
      }
      return strataSuccess;
    }
    std::vector<int> seen(n, 0);
    for (int k = 0; k < (n - 1) * perSender; ++k) {
      std::vector<float> buf(count, -1.0f);
      int source = -7;
      if (strataResult_t r = strataRecvAny(buf.data(), count, strataFloat32, &source, comm, nullptr)) return r;
      order[0].push_back(source);
      if (source < 1 || source >= n) {
        bad.push_back("source " + std::to_string(source));
        continue;
      }
      const int m = seen[source]++;
      for (size_t i = 0; i < count; ++i)
        if (buf[i] != valueOf(source, m, i)) {
          bad.push_back("message " + std::to_string(m) + " of rank " + std::to_string(source) + " element " +
                        std::to_string(i) + " is " + std::to_string(buf[i]));
          break;
        }
    }
    return strataSuccess;
  });
  if (transportMissing(out)) GTEST_SKIP() << out[0].error;
  for (int r = 0; r < n; ++r) EXPECT_EQ(out[r].result, strataSuccess) << "rank " << r << ": " << out[r].error;
  EXPECT_TRUE(bad.empty()) << bad.front();
  std::vector<int> sorted = order[0];
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, (std::vector<int>{1, 1, 2, 2, 3, 3}));
}

// Rank 2 has sent rank 0 nothing and goes on to an all-gather (whose message reaches rank 0 first, over the
// connection an earlier all-gather set up); rank 1 sends later. Rank 0's receive from any source must take rank 1's
// send, not the collective's message, and the all-gather then completes on every rank with the right data.
TEST_P(RecvAny, ACollectiveMessageFromARankAheadIsNotMatched) {
  constexpr int n = 3;
  constexpr size_t count = 64;
  setenv("STRATA_ALGO", "allgather:ring", 1);  // rank r sends to r + 1: rank 2's first message goes to rank 0
  std::vector<std::vector<float>> gathered(n, std::vector<float>(count * n, -1.0f));
  int source = -7;
  std::vector<float> got(count, -1.0f);
  auto out = run(n, [&](int rank, strataComm_t comm) -> strataResult_t {
    std::vector<float> mine(count, static_cast<float>(rank + 1));
    // A first all-gather sets up every connection, so nothing below waits on a set-up.
    if (strataResult_t r = strataAllGather(mine.data(), gathered[rank].data(), count, strataFloat32, comm, nullptr))
      return r;
    if (rank == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));  // rank 2's all-gather is at rank 0 by now
      std::vector<float> buf(count, 42.0f);
      if (strataResult_t r = strataSend(buf.data(), count, strataFloat32, 0, comm, nullptr)) return r;
    } else if (rank == 0) {
      if (strataResult_t r = strataRecvAny(got.data(), count, strataFloat32, &source, comm, nullptr)) return r;
    }
    return strataAllGather(mine.data(), gathered[rank].data(), count, strataFloat32, comm, nullptr);
  });
  if (transportMissing(out)) GTEST_SKIP() << out[0].error;
  for (int r = 0; r < n; ++r) EXPECT_EQ(out[r].result, strataSuccess) << "rank " << r << ": " << out[r].error;
  EXPECT_EQ(source, 1);
  EXPECT_EQ(got, std::vector<float>(count, 42.0f));
  for (int r = 0; r < n; ++r)
    for (int b = 0; b < n; ++b)
      EXPECT_EQ(gathered[r][b * count], static_cast<float>(b + 1)) << "rank " << r << " block " << b;
}

// A send of another size than the receive's: the receiver fails naming both sizes and the sender.
TEST_P(RecvAny, ASizeMismatchIsAnErrorNamingBothSizes) {
  auto out = run(2, [&](int rank, strataComm_t comm) -> strataResult_t {
    std::vector<float> buf(8, 1.0f);
    if (rank == 1) return strataSend(buf.data(), 8, strataFloat32, 0, comm, nullptr);
    int source = -7;
    return strataRecvAny(buf.data(), 4, strataFloat32, &source, comm, nullptr);
  });
  if (transportMissing(out)) GTEST_SKIP() << out[0].error;
  EXPECT_EQ(out[0].result, strataInvalidUsage) << out[0].error;
  for (const char* w : {"any source", "16 bytes", "32 bytes", "rank 1"})
    EXPECT_NE(out[0].error.find(w), std::string::npos) << "\"" << w << "\" not in: " << out[0].error;
}

// Nobody sends: the receive ends with the communicator's timeout, saying what it waited for.
TEST_P(RecvAny, NoSenderTimesOut) {
  setenv("STRATA_TIMEOUT_MS", "1000", 1);
  auto out = run(3, [&](int rank, strataComm_t comm) -> strataResult_t {
    if (rank != 0) return strataSuccess;
    float x = 0;
    int source = -7;
    return strataRecvAny(&x, 1, strataFloat32, &source, comm, nullptr);
  });
  if (transportMissing(out)) GTEST_SKIP() << out[0].error;
  EXPECT_EQ(out[0].result, strataTimeout) << out[0].error;
  EXPECT_NE(out[0].error.find("any source"), std::string::npos) << out[0].error;
}

INSTANTIATE_TEST_SUITE_P(Transports, RecvAny, ::testing::Values("shm", "tcp", "ucx"),
                         [](const ::testing::TestParamInfo<const char*>& p) { return std::string(p.param); });

// Bad use is refused before anything runs, and the communicator stays usable.
TEST(RecvAnyRefusals, BadArgumentsAndGroups) {
  strataUniqueId id;
  ASSERT_EQ(strataGetUniqueId(&id), strataSuccess);
  std::vector<strataComm_t> comms(2, nullptr);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) threads.emplace_back([&, r] { strataCommInitRank(&comms[r], 2, id, r); });
  for (auto& t : threads) t.join();
  ASSERT_NE(comms[0], nullptr);
  float x = 0;
  int source = -7;
  EXPECT_EQ(strataRecvAny(&x, 1, strataFloat32, nullptr, comms[0], nullptr), strataInvalidArgument);
  EXPECT_EQ(strataRecvAny(&x, 0, strataFloat32, &source, comms[0], nullptr), strataInvalidArgument);
  EXPECT_NE(std::string(strataGetLastError(comms[0])).find("count"), std::string::npos);
  ASSERT_EQ(strataGroupStart(), strataSuccess);
  EXPECT_EQ(strataRecvAny(&x, 1, strataFloat32, &source, comms[0], nullptr), strataSuccess);
  EXPECT_EQ(strataSend(&x, 1, strataFloat32, 1, comms[0], nullptr), strataSuccess);
  EXPECT_EQ(strataGroupEnd(), strataInvalidUsage);
  EXPECT_NE(std::string(strataGetLastError(nullptr)).find("alone"), std::string::npos) << strataGetLastError(nullptr);
  // Still usable: a barrier on both ranks.
  threads.clear();
  std::vector<strataResult_t> res(2);
  for (int r = 0; r < 2; ++r) threads.emplace_back([&, r] { res[r] = strataBarrier(comms[r], nullptr); });
  for (auto& t : threads) t.join();
  EXPECT_EQ(res[0], strataSuccess);
  EXPECT_EQ(res[1], strataSuccess);
  for (auto c : comms) strataCommDestroy(c);

  ASSERT_EQ(strataGetUniqueId(&id), strataSuccess);
  strataComm_t one = nullptr;
  ASSERT_EQ(strataCommInitRank(&one, 1, id, 0), strataSuccess);
  EXPECT_EQ(strataRecvAny(&x, 1, strataFloat32, &source, one, nullptr), strataInvalidUsage);
  EXPECT_NE(std::string(strataGetLastError(one)).find("no other rank"), std::string::npos);
  strataCommDestroy(one);
}

}  // namespace
