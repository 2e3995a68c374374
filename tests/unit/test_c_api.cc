// The C ABI's argument checking and error reporting, and collectives between ranks that are threads of
// this process (shm between threads works the same as between processes).
#include <dirent.h>
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "strata/strata.h"
#include "strata/strata.hpp"
#include "test_util.h"

namespace {

using strata::test::oneRankComm;

TEST(CApi, VersionAndErrorStrings) {
  int v = 0;
  EXPECT_EQ(strataGetVersion(&v), strataSuccess);
  EXPECT_EQ(v, STRATA_VERSION_CODE);
  EXPECT_EQ(strataGetVersion(nullptr), strataInvalidArgument);
  for (int r = 0; r < strataNumResults; ++r) EXPECT_STRNE(strataGetErrorString(static_cast<strataResult_t>(r)), "");
  EXPECT_STREQ(strataGetErrorString(strataSuccess), "no error");
}

TEST(CApi, EnumValuesMatchNccl) {
  EXPECT_EQ(strataInvalidArgument, 4);
  EXPECT_EQ(strataInProgress, 7);
  EXPECT_EQ(strataTimeout, 8);
  EXPECT_EQ(strataBfloat16, 9);
  EXPECT_EQ(strataFloat8e5m2, 11);
  EXPECT_EQ(strataAvg, 4);
  EXPECT_EQ(strataScalarDevice, 0);  // NCCL's ncclScalarDevice, ncclScalarHostImmediate
  EXPECT_EQ(strataScalarHostImmediate, 1);
  EXPECT_EQ(sizeof(strataUniqueId), 128u);
}

TEST(CApi, InitRejectsBadArguments) {
  strataUniqueId id;
  ASSERT_EQ(strataGetUniqueId(&id), strataSuccess);
  strataComm_t comm;
  EXPECT_EQ(strataCommInitRank(&comm, 0, id, 0), strataInvalidArgument);
  EXPECT_NE(std::string(strataGetLastError(nullptr)).find("nranks"), std::string::npos);
  EXPECT_EQ(strataCommInitRank(&comm, 2, id, 2), strataInvalidArgument);
  EXPECT_EQ(strataCommInitRank(nullptr, 1, id, 0), strataInvalidArgument);
  strataUniqueId garbage;
  std::memset(&garbage, 0x5a, sizeof(garbage));
  EXPECT_EQ(strataCommInitRank(&comm, 1, garbage, 0), strataInvalidArgument);
}

TEST(CApi, CollectivesRejectBadArguments) {
  strataComm_t comm = oneRankComm();
  float x[4] = {1, 2, 3, 4}, y[4];
  EXPECT_EQ(strataAllReduce(nullptr, y, 4, strataFloat32, strataSum, comm, nullptr), strataInvalidArgument);
  EXPECT_NE(std::string(strataGetLastError(comm)).find("sendbuff is NULL"), std::string::npos);
  EXPECT_EQ(strataAllReduce(x, nullptr, 4, strataFloat32, strataSum, comm, nullptr), strataInvalidArgument);
  // NULL buffers are fine with count 0.
  EXPECT_EQ(strataAllReduce(nullptr, nullptr, 0, strataFloat32, strataSum, comm, nullptr), strataSuccess);
  EXPECT_EQ(strataAllReduce(x, y, 4, static_cast<strataDataType_t>(42), strataSum, comm, nullptr),
            strataInvalidArgument);
  EXPECT_NE(std::string(strataGetLastError(comm)).find("datatype 42"), std::string::npos);
  EXPECT_EQ(strataAllReduce(x, y, 4, strataFloat32, static_cast<strataRedOp_t>(77), comm, nullptr),
            strataInvalidArgument);
  EXPECT_EQ(strataBroadcast(x, y, 4, strataFloat32, 1, comm, nullptr), strataInvalidArgument);
  EXPECT_NE(std::string(strataGetLastError(comm)).find("root 1"), std::string::npos);
  EXPECT_EQ(strataReduce(x, y, 4, strataFloat32, strataSum, -1, comm, nullptr), strataInvalidArgument);
  EXPECT_EQ(strataSend(x, 4, strataFloat32, 3, comm, nullptr), strataInvalidArgument);
  EXPECT_EQ(strataRecv(y, 4, strataFloat32, -2, comm, nullptr), strataInvalidArgument);
  EXPECT_EQ(strataAllGather(x, y, std::numeric_limits<size_t>::max() / 2, strataFloat32, comm, nullptr),
            strataInvalidArgument);
  EXPECT_NE(std::string(strataGetLastError(comm)).find("overflow"), std::string::npos);
  // Partially overlapping buffers that are not NCCL's in-place layout.
  EXPECT_EQ(strataAllReduce(x, x + 1, 3, strataFloat32, strataSum, comm, nullptr), strataInvalidArgument);
  // A CUDA stream where CUDA cannot be used (no driver here; with a driver, &fake is no stream: skip, and see
  // test_gpu_runtime.cc and tests/gpu/).
  int fake = 0;
  if (!dlopen("libcuda.so.1", RTLD_NOLOAD | RTLD_LAZY) && !dlopen("libcuda.so.1", RTLD_LAZY)) {
    EXPECT_EQ(strataAllReduce(x, y, 4, strataFloat32, strataSum, comm, &fake), strataUnhandledCudaError);
  }
  // Self send outside a group cannot complete.
  EXPECT_EQ(strataSend(x, 4, strataFloat32, 0, comm, nullptr), strataInvalidUsage);
  // The communicator is still usable after argument errors.
  EXPECT_EQ(strataAllReduce(x, y, 4, strataFloat32, strataSum, comm, nullptr), strataSuccess);
  EXPECT_EQ(y[3], 4.0f);
  strataResult_t async = strataInternalError;
  EXPECT_EQ(strataCommGetAsyncError(comm, &async), strataSuccess);
  EXPECT_EQ(async, strataSuccess);
  EXPECT_EQ(strataCommDestroy(comm), strataSuccess);
}

TEST(CApi, DestroyedCommunicatorIsRejected) {
  strataComm_t comm = oneRankComm();
  float x = 1, y = 0;
  // Successful calls first, on this thread and another: each thread remembers the handle as live.
  ASSERT_EQ(strataAllReduce(&x, &y, 1, strataFloat32, strataSum, comm, nullptr), strataSuccess);
  strataResult_t other = strataSuccess;
  std::thread([&] { other = strataAllReduce(&x, &y, 1, strataFloat32, strataSum, comm, nullptr); }).join();
  ASSERT_EQ(other, strataSuccess);
  ASSERT_EQ(strataCommDestroy(comm), strataSuccess);
  std::thread([&] { other = strataAllReduce(&x, &y, 1, strataFloat32, strataSum, comm, nullptr); }).join();
  EXPECT_EQ(other, strataInvalidUsage);
  EXPECT_EQ(strataAllReduce(&x, &y, 1, strataFloat32, strataSum, comm, nullptr), strataInvalidUsage);
  EXPECT_EQ(strataCommDestroy(comm), strataInvalidUsage);
  int n = 0;
  EXPECT_EQ(strataCommCount(comm, &n), strataInvalidUsage);
  EXPECT_EQ(strataCommCount(nullptr, &n), strataInvalidUsage);
}

TEST(CApi, ConcurrentDestroysOfOneCommunicatorSucceedOnce) {
  for (int round = 0; round < 20; ++round) {
    strataComm_t comm = oneRankComm();
    std::vector<strataResult_t> results(4, strataInternalError);
    std::vector<std::thread> threads;
    for (size_t t = 0; t < results.size(); ++t) threads.emplace_back([&, t] { results[t] = strataCommDestroy(comm); });
    for (auto& t : threads) t.join();
    int ok = 0;
    for (strataResult_t r : results) {
      if (r == strataSuccess) ++ok;
      else EXPECT_EQ(r, strataInvalidUsage);
    }
    EXPECT_EQ(ok, 1) << "round " << round;
  }
}

TEST(CApi, GroupsAndAsyncWork) {
  strataComm_t comm = oneRankComm();
  int a[3] = {1, 2, 3}, b[3] = {0, 0, 0}, c[3] = {0, 0, 0};
  ASSERT_EQ(strataGroupStart(), strataSuccess);
  ASSERT_EQ(strataSend(a, 3, strataInt32, 0, comm, nullptr), strataSuccess);
  ASSERT_EQ(strataRecv(b, 3, strataInt32, 0, comm, nullptr), strataSuccess);
  ASSERT_EQ(strataAllReduce(a, c, 3, strataInt32, strataSum, comm, nullptr), strataSuccess);
  strataWork_t work = nullptr;
  ASSERT_EQ(strataGroupEndAsync(&work), strataSuccess);
  EXPECT_EQ(strataWorkWait(work, -1), strataSuccess);
  int done = 0;
  EXPECT_EQ(strataWorkTest(work, &done), strataSuccess);
  EXPECT_EQ(done, 1);
  EXPECT_EQ(strataWorkFree(work), strataSuccess);
  EXPECT_EQ(b[2], 3);
  EXPECT_EQ(c[1], 2);
  EXPECT_EQ(strataGroupEnd(), strataInvalidUsage);  // no open group
  EXPECT_EQ(strataCommDestroy(comm), strataSuccess);
}

// strataGetLastError(comm) returns the newest error: an error recorded without a communicator (a group
// misuse) after one recorded on the communicator must not be hidden by the older one, and vice versa.
TEST(CApi, LastErrorIsTheNewest) {
  strataComm_t comm = oneRankComm();
  float x = 1;
  ASSERT_EQ(strataAllReduce(nullptr, &x, 1, strataFloat32, strataSum, comm, nullptr), strataInvalidArgument);
  EXPECT_NE(std::string(strataGetLastError(comm)).find("sendbuff is NULL"), std::string::npos);
  ASSERT_EQ(strataGroupEnd(), strataInvalidUsage);
  EXPECT_NE(std::string(strataGetLastError(comm)).find("strataGroupEnd without strataGroupStart"), std::string::npos)
      << strataGetLastError(comm);
  ASSERT_EQ(strataAllReduce(&x, &x, 1, static_cast<strataDataType_t>(42), strataSum, comm, nullptr),
            strataInvalidArgument);
  EXPECT_NE(std::string(strataGetLastError(comm)).find("datatype 42"), std::string::npos) << strataGetLastError(comm);
  EXPECT_EQ(strataCommDestroy(comm), strataSuccess);
}

TEST(CApi, PreMulSumAndAvgOnOneRank) {
  strataComm_t comm = oneRankComm();
  double s = 3.0;
  strataRedOp_t op;
  ASSERT_EQ(strataRedOpCreatePreMulSum(&op, &s, strataFloat64, strataScalarHostImmediate, comm), strataSuccess);
  double x[2] = {1.5, -2}, y[2] = {0, 0};
  ASSERT_EQ(strataAllReduce(x, y, 2, strataFloat64, op, comm, nullptr), strataSuccess);
  EXPECT_EQ(y[0], 4.5);
  EXPECT_EQ(y[1], -6);
  EXPECT_EQ(x[0], 1.5);  // the user's send buffer is untouched
  EXPECT_EQ(strataRedOpDestroy(op, comm), strataSuccess);
  EXPECT_EQ(strataRedOpDestroy(op, comm), strataInvalidArgument);
  EXPECT_EQ(strataAllReduce(x, y, 2, strataFloat64, op, comm, nullptr), strataInvalidArgument);
  EXPECT_EQ(strataCommDestroy(comm), strataSuccess);
}

// Integer PreMulSum multiplies in the integer type, as NCCL does: exact where a float or a double would round
// (int32 through float lost 10, int64 through double lost 3), and wrapping on overflow rather than saturating.
TEST(CApi, IntegerPreMulSumMultipliesInTheType) {
  strataComm_t comm = oneRankComm();
  auto premul = [&](auto scalar, strataDataType_t dt, auto input) {
    strataRedOp_t op;
    EXPECT_EQ(strataRedOpCreatePreMulSum(&op, &scalar, dt, strataScalarHostImmediate, comm), strataSuccess);
    decltype(input) out = 0;
    EXPECT_EQ(strataAllReduce(&input, &out, 1, dt, op, comm, nullptr), strataSuccess) << strataGetLastError(comm);
    EXPECT_EQ(strataRedOpDestroy(op, comm), strataSuccess);
    return out;
  };
  EXPECT_EQ(premul(int32_t{2}, strataInt32, int32_t{156863317}), int32_t{313726634});
  EXPECT_EQ(premul(int64_t{3}, strataInt64, int64_t{(int64_t{1} << 53) + 1}), int64_t{27021597764222979});
  EXPECT_EQ(premul(uint64_t{3}, strataUint64, uint64_t{(uint64_t{1} << 63) + 5}), uint64_t{(uint64_t{1} << 63) + 15});
  EXPECT_EQ(premul(int8_t{-3}, strataInt8, int8_t{50}), static_cast<int8_t>(-150));  // wraps to 106
  EXPECT_EQ(premul(uint32_t{7}, strataUint32, uint32_t{0x40000000}), uint32_t{0xC0000000});
  EXPECT_EQ(strataCommDestroy(comm), strataSuccess);
}

// Ranks as threads: the whole API over real shm connections, plus split and the C++ wrapper.
TEST(CApi, ThreadRanksAllCollectivesAndSplit) {
  const int n = 4;
  strataUniqueId id;
  ASSERT_EQ(strataGetUniqueId(&id), strataSuccess);
  std::vector<std::string> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        strata::Communicator comm(n, id, r);
        std::vector<int> x(1000, r + 1), y(1000);
        comm.allReduce(x.data(), y.data(), x.size());
        if (y[999] != n * (n + 1) / 2) errors[r] += "allreduce wrong; ";
        std::vector<int> g(4 * 10);
        comm.allGather(x.data(), g.data(), 10, strataInt32);
        for (int j = 0; j < n; ++j)
          if (g[j * 10 + 3] != j + 1) errors[r] += "allgather wrong; ";
        // Async work overlapping with the caller.
        std::vector<float> a(50000, 1.0f), b(50000);
        strata::Work w = comm.allReduceAsync(a.data(), b.data(), a.size(), strataFloat32, strataSum);
        w.wait();
        if (b[49999] != n) errors[r] += "async allreduce wrong; ";
        // Split into even and odd ranks, reversed order by key.
        strata::Communicator sub = comm.split(r % 2, -r);
        if (sub.size() != 2) errors[r] += "split size wrong; ";
        int mine = r, sum = 0;
        sub.allReduce(&mine, &sum, 1);
        if (sum != (r % 2 == 0 ? 0 + 2 : 1 + 3)) errors[r] += "split allreduce wrong; ";
        if (sub.rank() != (r < 2 ? 1 : 0)) errors[r] += "split key order wrong; ";
        comm.barrier();
      } catch (const std::exception& e) {
        errors[r] += e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

}  // namespace

namespace {

std::string strprintfForTest(const char* fmt, int a, int b, const char* c) {
  char buf[4096];
  snprintf(buf, sizeof(buf), fmt, a, b, c);
  return buf;
}

// One all-reduce on both ranks at once; true if both got the sum.
bool sumOnBoth(const std::vector<strataComm_t>& comms) {
  int x[2] = {1, 2}, y[2] = {0, 0};
  strataResult_t rc[2] = {strataInternalError, strataInternalError};
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back(
        [&, r] { rc[r] = strataAllReduce(&x[r], &y[r], 1, strataInt32, strataSum, comms[r], nullptr); });
  for (auto& t : threads) t.join();
  return rc[0] == strataSuccess && rc[1] == strataSuccess && y[0] == 3 && y[1] == 3;
}

}  // namespace

// After fork, the child must not drive its parent's connections (shm slots, sockets, worker threads that do
// not exist in the child): every call on an inherited communicator is refused, naming the fork, and
// destroying it in the child frees only the handle, so the parent's job goes on.
TEST(CApi, ForkedChildIsRefusedAndTheParentGoesOn) {
  std::vector<strataComm_t> comms = strata::test::threadRanks(2);
  strataComm_t solo = oneRankComm();
  ASSERT_TRUE(sumOnBoth(comms));
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    alarm(20);  // without the check the 2-rank call would wait for a peer that never comes
    int x = 1, y = 0;
    int bad = 0;
    if (strataAllReduce(&x, &y, 1, strataInt32, strataSum, solo, nullptr) != strataInvalidUsage) bad |= 1;
    if (std::string(strataGetLastError(solo)).find("fork") == std::string::npos) bad |= 2;
    if (strataAllReduce(&x, &y, 1, strataInt32, strataSum, comms[0], nullptr) != strataInvalidUsage) bad |= 4;
    int n = 0;
    if (strataCommCount(comms[0], &n) != strataInvalidUsage) bad |= 8;
    strataComm_t sub = nullptr;
    if (strataCommSplit(comms[0], 0, 0, &sub, nullptr) != strataInvalidUsage) bad |= 16;
    // The child may let go of the handles; the parent's resources stay the parent's.
    if (strataCommDestroy(comms[0]) != strataSuccess || strataCommAbort(comms[1]) != strataSuccess) bad |= 32;
    if (strataCommDestroy(solo) != strataSuccess) bad |= 64;
    if (strataCommCount(solo, &n) != strataInvalidUsage) bad |= 128;  // a released handle is gone
    _exit(bad);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "child died of signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "failed checks (bit mask) in the child";
  // The parent's communicators still work, on the same shm channels.
  EXPECT_TRUE(sumOnBoth(comms));
  EXPECT_TRUE(sumOnBoth(comms));
  int x = 5, y = 0;
  EXPECT_EQ(strataAllReduce(&x, &y, 1, strataInt32, strataSum, solo, nullptr), strataSuccess);
  EXPECT_EQ(y, 5);
  EXPECT_EQ(strataCommDestroy(solo), strataSuccess);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) threads.emplace_back([&, r] { EXPECT_EQ(strataCommDestroy(comms[r]), strataSuccess); });
  for (auto& t : threads) t.join();
}

// A work handle is like a communicator handle: once freed, every call on it is refused, not a use after free.
TEST(CApi, FreedWorkIsRejected) {
  strataComm_t comm = oneRankComm();
  int a = 7, b = 0;
  ASSERT_EQ(strataGroupStart(), strataSuccess);
  ASSERT_EQ(strataAllReduce(&a, &b, 1, strataInt32, strataSum, comm, nullptr), strataSuccess);
  strataWork_t work = nullptr;
  ASSERT_EQ(strataGroupEndAsync(&work), strataSuccess);
  ASSERT_EQ(strataWorkWait(work, -1), strataSuccess);
  EXPECT_EQ(b, 7);
  ASSERT_EQ(strataWorkFree(work), strataSuccess);
  int done = -1;
  EXPECT_EQ(strataWorkWait(work, 0), strataInvalidUsage);
  EXPECT_NE(std::string(strataGetLastError(nullptr)).find("freed"), std::string::npos) << strataGetLastError(nullptr);
  EXPECT_EQ(strataWorkTest(work, &done), strataInvalidUsage);
  EXPECT_STREQ(strataWorkError(work), "");
  EXPECT_EQ(strataWorkFree(work), strataInvalidUsage);
  // Garbage is refused the same way.
  int junk[8] = {};
  EXPECT_EQ(strataWorkWait(reinterpret_cast<strataWork_t>(junk), 0), strataInvalidUsage);
  EXPECT_EQ(strataWorkFree(reinterpret_cast<strataWork_t>(junk)), strataInvalidUsage);
  // NULL stays an argument error, and freeing NULL is a no-op, as free(NULL) is.
  EXPECT_EQ(strataWorkWait(nullptr, 0), strataInvalidArgument);
  EXPECT_EQ(strataWorkFree(nullptr), strataSuccess);
  EXPECT_EQ(strataCommDestroy(comm), strataSuccess);
}

// A unique id makes one communicator. Its root service ends when that communicator is destroyed, so a second
// strataCommInitRank with it can never complete: it is refused at once, saying why, instead of retrying the
// connection until STRATA_TIMEOUT_MS.
TEST(CApi, ReusingTheIdOfADestroyedCommunicatorIsRefused) {
  const char* old = getenv("STRATA_TIMEOUT_MS");
  const std::string saved = old ? old : "";
  setenv("STRATA_TIMEOUT_MS", "4000", 1);
  strataUniqueId id;
  ASSERT_EQ(strataGetUniqueId(&id), strataSuccess);
  strataComm_t comm = nullptr;
  ASSERT_EQ(strataCommInitRank(&comm, 1, id, 0), strataSuccess);
  ASSERT_EQ(strataCommDestroy(comm), strataSuccess);
  for (int attempt = 0; attempt < 3; ++attempt) {
    strataComm_t again = nullptr;
    EXPECT_EQ(strataCommInitRank(&again, 1, id, 0), strataInvalidUsage) << strataGetLastError(nullptr);
    EXPECT_NE(std::string(strataGetLastError(nullptr)).find("strataGetUniqueId"), std::string::npos)
        << strataGetLastError(nullptr);
    if (again) strataCommDestroy(again);
  }
  if (old) setenv("STRATA_TIMEOUT_MS", saved.c_str(), 1);
  else unsetenv("STRATA_TIMEOUT_MS");
}

// Rank 1 waits on rank 0, which waits on rank 2, which never calls: the timeout must name rank 2, not only
// the peer rank 1 happened to wait on. Rank 1 starts waiting first, so its deadline passes first. Twice: with
// the connections set up (the waits are transfers), and the first time the pairs talk (the waits are the
// bootstrap exchanges that set up the connections).
void expectTimeoutNamesTheEndOfTheChain(bool connected) {
  const char* old = getenv("STRATA_TIMEOUT_MS");
  const std::string saved = old ? old : "";
  setenv("STRATA_TIMEOUT_MS", "1500", 1);
  strataUniqueId id;
  ASSERT_EQ(strataGetUniqueId(&id), strataSuccess);
  std::vector<strataComm_t> comms(3, nullptr);
  auto eachRank = [&](const std::function<void(int)>& body) {
    std::vector<std::thread> threads;
    for (int r = 0; r < 3; ++r) threads.emplace_back(body, r);
    for (auto& t : threads) t.join();
  };
  eachRank([&](int r) { EXPECT_EQ(strataCommInitRank(&comms[r], 3, id, r), strataSuccess); });
  if (old) setenv("STRATA_TIMEOUT_MS", saved.c_str(), 1);
  else unsetenv("STRATA_TIMEOUT_MS");
  if (connected) {
    eachRank([&](int r) {
      float out = 1, in[3] = {0, 0, 0};
      EXPECT_EQ(strataGroupStart(), strataSuccess);
      for (int p = 0; p < 3; ++p) {
        if (p == r) continue;
        EXPECT_EQ(strataSend(&out, 1, strataFloat32, p, comms[r], nullptr), strataSuccess);
        EXPECT_EQ(strataRecv(&in[p], 1, strataFloat32, p, comms[r], nullptr), strataSuccess);
      }
      EXPECT_EQ(strataGroupEnd(), strataSuccess);
    });
  }
  std::string errors[2];
  std::atomic<int> finished{0};
  eachRank([&](int r) {
    float x = 0;
    if (r == 2) {  // busy elsewhere until the others gave up
      while (finished.load() < 2) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      return;
    }
    if (r == 0) std::this_thread::sleep_for(std::chrono::milliseconds(400));
    if (strataRecv(&x, 1, strataFloat32, r == 0 ? 2 : 0, comms[r], nullptr) != strataSuccess)
      errors[r] = strataGetLastError(comms[r]);
    ++finished;
  });
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE(strprintfForTest("connected=%d rank %d: %s", connected, r, errors[r].c_str()));
    EXPECT_NE(errors[r].find("timed out"), std::string::npos);
    EXPECT_NE(errors[r].find("rank 0 (host"), std::string::npos);
    EXPECT_NE(errors[r].find("rank 2 (host"), std::string::npos);
    EXPECT_NE(errors[r].find("not waiting in Strata"), std::string::npos);
  }
  for (strataComm_t c : comms) strataCommAbort(c);
}

TEST(CApi, TimeoutNamesTheRankAtTheEndOfTheWaitChain) {
  expectTimeoutNamesTheEndOfTheChain(true);
  expectTimeoutNamesTheEndOfTheChain(false);
}

// The flight recorder dumps in `dir` (strata-flight-*), concatenated; the files are removed.
std::string takeFlightDumps(const char* dir) {
  std::string text;
  if (DIR* d = opendir(dir)) {
    while (dirent* e = readdir(d)) {
      const std::string name = e->d_name;
      if (name.rfind("strata-flight-", 0) != 0) continue;
      FILE* f = fopen((std::string(dir) + "/" + name).c_str(), "r");
      char buf[1 << 16];
      text.append(buf, fread(buf, 1, sizeof(buf), f));
      fclose(f);
      unlink((std::string(dir) + "/" + name).c_str());
    }
    closedir(d);
  }
  return text;
}

// The flight recorder keeps the last STRATA_FLIGHT_RECORDER_ENTRIES operations and writes them on request.
TEST(CApi, FlightRecorderKeepsTheLastOperations) {
  setenv("STRATA_FLIGHT_RECORDER_ENTRIES", "3", 1);
  strataComm_t comm = oneRankComm();
  unsetenv("STRATA_FLIGHT_RECORDER_ENTRIES");
  float x[4] = {1, 2, 3, 4}, y[4];
  for (int i = 0; i < 5; ++i)
    ASSERT_EQ(strataAllReduce(x, y, 4, strataFloat32, strataMax, comm, nullptr), strataSuccess);
  ASSERT_EQ(strataBroadcast(x, y, 2, strataInt32, 0, comm, nullptr), strataSuccess);
  char dir[] = "/tmp/strata-fr-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  EXPECT_EQ(strataCommDumpFlightRecorder(comm, nullptr), strataInvalidArgument);  // no directory anywhere
  ASSERT_EQ(strataCommDumpFlightRecorder(comm, dir), strataSuccess) << strataGetLastError(comm);
  const std::string text = takeFlightDumps(dir);
  rmdir(dir);
  EXPECT_NE(text.find("\"rank\": 0"), std::string::npos) << text;
  EXPECT_NE(text.find("\"reason\": \"strataCommDumpFlightRecorder\""), std::string::npos) << text;
  // Only the last three: allreduce #4 and #5, then the broadcast #6 with its root.
  EXPECT_EQ(text.find("\"seq\": 3,"), std::string::npos) << text;
  EXPECT_NE(text.find("\"seq\": 4, \"kind\": \"allreduce\", \"dtype\": \"float32\", \"op\": \"max\", \"count\": 4"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("\"seq\": 6, \"kind\": \"broadcast\", \"dtype\": \"int32\""), std::string::npos) << text;
  EXPECT_NE(text.find("\"root\": 0"), std::string::npos) << text;
  EXPECT_NE(text.find("\"state\": \"completed\""), std::string::npos) << text;
  EXPECT_EQ(strataCommDestroy(comm), strataSuccess);
}

// A rank that hears of a failure before its next call never runs that call, but what it tried is what tells a
// desync from a late rank: the refused call is recorded with the number it would have had, and the dump in
// STRATA_FLIGHT_RECORDER_DIR is rewritten to show it (strata-doctor's desync case raced on this).
TEST(CApi, FlightRecorderKeepsCallsRefusedAfterAFailure) {
  char dir[] = "/tmp/strata-fr-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  setenv("STRATA_FLIGHT_RECORDER_DIR", dir, 1);
  const std::vector<strataComm_t> comms = strata::test::threadRanks(2);
  unsetenv("STRATA_FLIGHT_RECORDER_DIR");
  auto eachRank = [&](const std::function<void(int)>& body) {
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r) threads.emplace_back(body, r);
    for (auto& t : threads) t.join();
  };
  eachRank([&](int r) {
    std::vector<float> v(64, 1.0f), all(128);
    ASSERT_EQ(strataAllReduce(v.data(), v.data(), 64, strataFloat32, strataSum, comms[r], nullptr), strataSuccess);
    // Call #2 disagrees: every rank fails, and its next calls are refused.
    const strataResult_t bad =
        r == 0 ? strataAllReduce(v.data(), v.data(), 64, strataFloat32, strataSum, comms[r], nullptr)
               : strataAllGather(v.data(), all.data(), 64, strataFloat32, comms[r], nullptr);
    EXPECT_NE(bad, strataSuccess);
    float x = 0;
    EXPECT_NE(strataBroadcast(&x, &x, 1, strataInt32, 1, comms[r], nullptr), strataSuccess);
    EXPECT_NE(strataReduce(&x, &x, 1, strataFloat32, strataMax, 0, comms[r], nullptr), strataSuccess);
    EXPECT_EQ(strataGroupStart(), strataSuccess);
    EXPECT_EQ(strataSend(&x, 1, strataFloat32, 1 - r, comms[r], nullptr), strataSuccess);
    EXPECT_EQ(strataRecv(&x, 1, strataFloat32, 1 - r, comms[r], nullptr), strataSuccess);
    EXPECT_NE(strataGroupEnd(), strataSuccess);
  });
  // The automatic dumps, rewritten by the first refused call; then dumps on request, which show every refused call.
  for (int onRequest = 0; onRequest < 2; ++onRequest) {
    if (onRequest) {
      for (strataComm_t c : comms) ASSERT_EQ(strataCommDumpFlightRecorder(c, dir), strataSuccess);
    }
    const std::string text = takeFlightDumps(dir);
    for (int r = 0; r < 2; ++r) {
      SCOPED_TRACE(strprintfForTest("rank %d, on request %d%s", r, onRequest, ""));
      const size_t at = text.find("\"rank\": " + std::to_string(r) + ",");
      ASSERT_NE(at, std::string::npos) << text;
      const std::string dump = text.substr(at, text.find("\"rank\": ", at + 1) - at);
      EXPECT_NE(dump.find("\"seq\": 2, \"kind\": \"" + std::string(r == 0 ? "allreduce" : "allgather")),
                std::string::npos)
          << dump;
      EXPECT_NE(dump.find("\"state\": \"failed\""), std::string::npos) << dump;
      EXPECT_NE(dump.find("\"seq\": 3, \"kind\": \"broadcast\", \"dtype\": \"int32\", \"op\": \"sum\", "
                          "\"count\": 1, \"root\": 1, \"algorithm\": \"\", \"state\": \"refused\""),
                std::string::npos)
          << dump;
      if (!onRequest) continue;
      EXPECT_NE(dump.find("\"seq\": 4, \"kind\": \"reduce\", \"dtype\": \"float32\", \"op\": \"max\""),
                std::string::npos)
          << dump;
      EXPECT_NE(dump.find("\"seq\": 1, \"kind\": \"sendrecv\", \"calls\": 2, \"peer\": " + std::to_string(1 - r)),
                std::string::npos)
          << dump;
    }
  }
  rmdir(dir);
  for (strataComm_t c : comms) strataCommAbort(c);
}
