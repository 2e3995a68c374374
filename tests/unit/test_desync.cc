// Ranks that call different collectives must get an error, never garbage and strataSuccess: every message
// carries the fingerprint of its call (sequence number, kind, type, op, count, root), checked by its receiver.
// Each mismatch below has messages of equal sizes on both sides, so the size check alone lets it through.
// Ranks are threads of this process; every case runs over shm, tcp and (when built) ucx.
#include <gtest/gtest.h>
#include <stdlib.h>

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

class Desync : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    setenv("STRATA_TRANSPORT", GetParam(), 1);
    setenv("STRATA_TIMEOUT_MS", "30000", 1);  // a missed mismatch fails by timeout, not by hanging the suite
  }
  void TearDown() override {
    unsetenv("STRATA_TRANSPORT");
    unsetenv("STRATA_TIMEOUT_MS");
  }

  /// Runs `call` on `n` thread ranks of one job and returns each rank's result and last error. Skips the test
  /// when the transport cannot be used here (ucx not built).
  std::vector<Outcome> run(int n, const RankCall& call) {
    strataUniqueId id;
    EXPECT_EQ(strataGetUniqueId(&id), strataSuccess);
    std::vector<strataComm_t> comms(n, nullptr);
    std::vector<Outcome> out(n);
    std::vector<strataResult_t> init(n, strataSuccess);
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r)
      threads.emplace_back([&, r] {
        init[r] = strataCommInitRank(&comms[r], n, id, r);
        if (init[r] != strataSuccess) {
          out[r].error = strataGetLastError(nullptr);
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
    return out[0].error.find("without UCX") != std::string::npos ||
           out[0].error.find("UCX library") != std::string::npos;
  }
};

/// Every rank failed, and each error names what `words` lists (both calls).
void expectEveryRankFailsNaming(const std::vector<Outcome>& out, const std::vector<std::string>& words) {
  for (size_t r = 0; r < out.size(); ++r) {
    EXPECT_NE(out[r].result, strataSuccess) << "rank " << r << " reported success";
    EXPECT_EQ(out[r].error.find("timed out"), std::string::npos) << "rank " << r << ": " << out[r].error;
    for (const std::string& w : words)
      EXPECT_NE(out[r].error.find(w), std::string::npos)
          << "rank " << r << ": \"" << w << "\" not in: " << out[r].error;
  }
}

constexpr size_t kMi = size_t{1} << 20;

TEST_P(Desync, AllReduceAgainstAllGatherOfEqualMessageSizes) {
  std::vector<std::vector<float>> in(2, std::vector<float>(kMi, 1.0f)), outBuf(2, std::vector<float>(kMi));
  auto out = run(2, [&](int r, strataComm_t c) {
    if (r == 0) return strataAllReduce(in[r].data(), outBuf[r].data(), kMi, strataFloat32, strataSum, c, nullptr);
    return strataAllGather(in[r].data(), outBuf[r].data(), kMi / 2, strataFloat32, c, nullptr);
  });
  if (transportMissing(out)) GTEST_SKIP() << out[0].error;
  expectEveryRankFailsNaming(out, {"allreduce", "allgather"});
}

TEST_P(Desync, Float32AgainstInt32) {
  std::vector<std::vector<int32_t>> in(2, std::vector<int32_t>(4096, 1)), outBuf(2, std::vector<int32_t>(4096));
  auto out = run(2, [&](int r, strataComm_t c) {
    return strataAllReduce(in[r].data(), outBuf[r].data(), 4096, r == 0 ? strataFloat32 : strataInt32, strataSum, c,
                           nullptr);
  });
  if (transportMissing(out)) GTEST_SKIP() << out[0].error;
  expectEveryRankFailsNaming(out, {"float32", "int32"});
}

TEST_P(Desync, SumAgainstMax) {
  std::vector<std::vector<float>> in(2, std::vector<float>(4096, 1.0f)), outBuf(2, std::vector<float>(4096));
  auto out = run(2, [&](int r, strataComm_t c) {
    return strataAllReduce(in[r].data(), outBuf[r].data(), 4096, strataFloat32, r == 0 ? strataSum : strataMax, c,
                           nullptr);
  });
  if (transportMissing(out)) GTEST_SKIP() << out[0].error;
  expectEveryRankFailsNaming(out, {"sum", "max"});
}

// 1 Mi floats against 1 Mi + 1 (and + 2): the ring cuts both into segments of nearly equal sizes, so the size
// check fails on one rank only (or on none, when the pieces happen to agree); the fingerprint fails both.
TEST_P(Desync, CountMismatchFailsOnEveryRank) {
  std::vector<std::vector<float>> in(2, std::vector<float>(kMi + 2, 1.0f)), outBuf(2, std::vector<float>(kMi + 2));
  for (size_t other : {kMi + 1, kMi + 2}) {
    auto out = run(2, [&](int r, strataComm_t c) {
      const size_t count = r == 1 ? other : kMi;
      return strataAllReduce(in[r].data(), outBuf[r].data(), count, strataFloat32, strataSum, c, nullptr);
    });
    if (transportMissing(out)) GTEST_SKIP() << out[0].error;
    expectEveryRankFailsNaming(out, {"count " + std::to_string(kMi), "count " + std::to_string(other)});
  }
}

// A rank that skipped a call: its second call meets its peer's first, of the same shape but another number.
TEST_P(Desync, SkippedCallIsFoundBySequenceNumber) {
  std::vector<std::vector<float>> in(2, std::vector<float>(256, 1.0f)), outBuf(2, std::vector<float>(256));
  auto out = run(2, [&](int r, strataComm_t c) {
    // Rank 0 broadcasts twice from itself (it only sends); rank 1 receives once, then all-reduces.
    if (r == 0) {
      strataResult_t a = strataBroadcast(in[r].data(), outBuf[r].data(), 256, strataFloat32, 0, c, nullptr);
      if (a != strataSuccess) return a;
      a = strataBroadcast(in[r].data(), outBuf[r].data(), 256, strataFloat32, 0, c, nullptr);
      if (a != strataSuccess) return a;
      return strataAllReduce(in[r].data(), outBuf[r].data(), 256, strataFloat32, strataSum, c, nullptr);
    }
    strataResult_t a = strataBroadcast(in[r].data(), outBuf[r].data(), 256, strataFloat32, 0, c, nullptr);
    if (a != strataSuccess) return a;
    return strataAllReduce(in[r].data(), outBuf[r].data(), 256, strataFloat32, strataSum, c, nullptr);
  });
  if (transportMissing(out)) GTEST_SKIP() << out[0].error;
  // Rank 1 meets the second broadcast in its all-reduce; rank 0 fails in its all-reduce, by rank 1's report or by
  // meeting rank 1's all-reduce #2 in its #3, whichever comes first.
  EXPECT_NE(out[0].result, strataSuccess);
  EXPECT_EQ(out[0].error.find("timed out"), std::string::npos) << out[0].error;
  EXPECT_NE(out[1].result, strataSuccess);
  EXPECT_NE(out[1].error.find("#2 broadcast"), std::string::npos) << out[1].error;
  EXPECT_NE(out[1].error.find("#2 allreduce"), std::string::npos) << out[1].error;
}

// Send and receive of different lengths whose first pieces agree: the receive must not wait for more.
TEST_P(Desync, SendShorterThanRecvFailsBothSides) {
  std::vector<char> buf(8 * kMi);
  auto out = run(2, [&](int r, strataComm_t c) {
    if (r == 0) return strataSend(buf.data(), 4 * kMi, strataUint8, 1, c, nullptr);
    return strataRecv(buf.data(), 8 * kMi, strataUint8, 0, c, nullptr);
  });
  if (transportMissing(out)) GTEST_SKIP() << out[0].error;
  // The sender's data all left, so only the receiver can see it: it must fail naming both lengths, and the
  // sender's next call hears of it.
  EXPECT_NE(out[1].result, strataSuccess);
  EXPECT_EQ(out[1].error.find("timed out"), std::string::npos) << out[1].error;
  EXPECT_NE(out[1].error.find("4194304"), std::string::npos) << out[1].error;
  EXPECT_NE(out[1].error.find("8388608"), std::string::npos) << out[1].error;
}

// The check must not refuse what is legal: equal calls, a p2p group with several messages to one peer, and
// collectives interleaved with p2p.
TEST_P(Desync, MatchingCallsStillSucceed) {
  std::vector<std::vector<float>> a(2, std::vector<float>(5000, 1.0f)), b(2, std::vector<float>(5000));
  auto out = run(2, [&](int r, strataComm_t c) {
    const int peer = 1 - r;
    for (int i = 0; i < 3; ++i) {
      strataResult_t x = strataAllReduce(a[r].data(), b[r].data(), 5000, strataFloat32, strataSum, c, nullptr);
      if (x != strataSuccess) return x;
      strataGroupStart();
      strataSend(a[r].data(), 100, strataFloat32, peer, c, nullptr);
      strataSend(a[r].data() + 100, 2000, strataFloat32, peer, c, nullptr);
      strataRecv(b[r].data(), 100, strataFloat32, peer, c, nullptr);
      strataRecv(b[r].data() + 100, 2000, strataFloat32, peer, c, nullptr);
      x = strataGroupEnd();
      if (x != strataSuccess) return x;
      x = strataBroadcast(a[r].data(), b[r].data(), 300, strataFloat32, i % 2, c, nullptr);
      if (x != strataSuccess) return x;
    }
    return strataSuccess;
  });
  if (transportMissing(out)) GTEST_SKIP() << out[0].error;
  for (size_t r = 0; r < out.size(); ++r) EXPECT_EQ(out[r].result, strataSuccess) << out[r].error;
}

INSTANTIATE_TEST_SUITE_P(Transports, Desync, ::testing::Values("shm", "tcp", "ucx"),
                         [](const ::testing::TestParamInfo<const char*>& p) { return std::string(p.param); });

}  // namespace
