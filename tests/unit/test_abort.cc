// strataCommAbort from another thread, the way a watchdog uses it: a call blocked on a peer that never comes
// must return an error promptly, and the communicator is torn down only after every blocked call has left.
// Ranks are threads of this process; each case is repeated because the race it guards against is a timing one.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "strata/strata.h"
#include "test_util.h"

namespace {

using strata::test::threadRanks;

/// Runs `blocked(comm, error)` on a thread of its own (a call rank 1 never joins), aborts rank 0's communicator
/// from this thread once the call has had time to block, and checks that the call came back with an error naming
/// the abort. Rank 1 is destroyed afterwards; it may or may not have heard of rank 0's abort, either is fine.
template <typename Call>
void abortWhileBlocked(Call blocked, int rounds = 6, int blockedRank = 0) {
  for (int round = 0; round < rounds; ++round) {
    std::vector<strataComm_t> comms = threadRanks(2);
    ASSERT_NE(comms[0], nullptr);
    ASSERT_NE(comms[1], nullptr);
    std::atomic<int> result{-1};
    std::string error;
    std::thread caller([&] { result = blocked(comms[blockedRank], error); });
    std::this_thread::sleep_for(std::chrono::milliseconds(50 + 20 * round));
    EXPECT_EQ(strataCommAbort(comms[blockedRank]), strataSuccess);
    caller.join();
    EXPECT_NE(result.load(), static_cast<int>(strataSuccess)) << "round " << round;
    EXPECT_NE(error.find("abort"), std::string::npos) << "round " << round << ": " << error;
    strataCommDestroy(comms[1 - blockedRank]);
  }
}

TEST(Abort, FromAnotherThreadUnblocksACollective) {
  std::vector<float> x(1 << 20, 1.0f), y(x.size());
  abortWhileBlocked([&](strataComm_t c, std::string& error) {
    strataResult_t r = strataAllReduce(x.data(), y.data(), x.size(), strataFloat32, strataSum, c, nullptr);
    error = strataGetLastError(nullptr);
    return r;
  });
}

TEST(Abort, FromAnotherThreadUnblocksASmallCollective) {
  float x = 1, y = 0;
  abortWhileBlocked([&](strataComm_t c, std::string& error) {
    strataResult_t r = strataAllReduce(&x, &y, 1, strataFloat32, strataSum, c, nullptr);
    error = strataGetLastError(nullptr);
    return r;
  });
}

TEST(Abort, FromAnotherThreadUnblocksARecv) {
  std::vector<int> y(1000);
  abortWhileBlocked([&](strataComm_t c, std::string& error) {
    strataResult_t r = strataRecv(y.data(), y.size(), strataInt32, 1, c, nullptr);
    error = strataGetLastError(nullptr);
    return r;
  });
}

// A split waits for the other rank's part in the bootstrap, not in a transport.
TEST(Abort, FromAnotherThreadUnblocksASplit) {
  abortWhileBlocked([&](strataComm_t c, std::string& error) {
    strataComm_t child = nullptr;
    strataResult_t r = strataCommSplit(c, 0, 0, &child, nullptr);
    error = strataGetLastError(nullptr);
    if (child) strataCommDestroy(child);
    return r;
  });
}

// Async work (strataGroupEndAsync) blocked on the peer, and a blocking call queued behind it.
TEST(Abort, FromAnotherThreadUnblocksQueuedAndAsyncWork) {
  std::vector<float> x(1 << 16, 1.0f), y(x.size());
  abortWhileBlocked([&](strataComm_t c, std::string& error) {
    strataWork_t work = nullptr;
    strataGroupStart();
    strataAllReduce(x.data(), y.data(), x.size(), strataFloat32, strataSum, c, nullptr);
    if (strataGroupEndAsync(&work) != strataSuccess) return strataInternalError;
    strataResult_t r = strataAllReduce(x.data(), y.data(), x.size(), strataFloat32, strataSum, c, nullptr);
    error = strataGetLastError(nullptr);
    // The async work must have failed too, with the abort as its reason.
    strataResult_t w = strataWorkWait(work, -1);
    std::string workError = strataWorkError(work);
    strataWorkFree(work);
    if (w == strataSuccess) return strataSuccess;
    if (workError.find("abort") == std::string::npos) error = "async work: " + workError;
    return r;
  });
}

// Async work waiting for its first connection: over tcp the higher rank of a pair listens for the lower one's
// sockets, a wait of the transport's own (not the bootstrap's), which an abort must end too. (It waited until
// the peer came, or until STRATA_TIMEOUT_MS.)
TEST(Abort, FromAnotherThreadUnblocksATcpConnectionSetUp) {
  setenv("STRATA_TRANSPORT", "tcp", 1);
  setenv("STRATA_TIMEOUT_MS", "20000", 1);  // a wait the abort missed ends as a timeout, whose error names no abort
  std::vector<float> x(1024, 1.0f), y(x.size());
  abortWhileBlocked(
      [&](strataComm_t c, std::string& error) {
        strataWork_t work = nullptr;
        strataGroupStart();
        strataAllReduce(x.data(), y.data(), x.size(), strataFloat32, strataSum, c, nullptr);
        if (strataGroupEndAsync(&work) != strataSuccess) return strataInternalError;
        strataResult_t w = strataWorkWait(work, -1);
        error = strataWorkError(work);
        strataWorkFree(work);
        return w;
      },
      4, /*blockedRank=*/1);
  unsetenv("STRATA_TRANSPORT");
  unsetenv("STRATA_TIMEOUT_MS");
}

}  // namespace
