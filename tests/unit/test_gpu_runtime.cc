// The GPU entry points on a machine without a usable GPU (this is what CI and CPU-only hosts see): a call that
// asks for CUDA fails with strataUnhandledCudaError and a message naming the cause, and host collectives keep
// working in the same process, in a build with CUDA enabled. On a machine with a GPU these tests are skipped
// (tests/gpu/ covers that case).
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "kernels/cuda_loader.h"
#include "strata/strata.h"
#include "test_util.h"
#include "util/error.h"

namespace {

// True when the CUDA driver can be loaded, i.e. this may be a GPU machine.
bool driverInstalled() {
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) return false;
  dlclose(h);
  return true;
}

using strata::test::oneRankComm;

TEST(GpuRuntime, HostPointersNeverLoadCuda) {
  if (driverInstalled()) GTEST_SKIP() << "a CUDA driver is installed here; this checks CPU-only machines";
  std::vector<float> x(16, 1.0f);
  EXPECT_FALSE(strata::cudaDriverLoaded());
  EXPECT_EQ(strata::devicePointerOwner(x.data()), -1);
  // Checking a pointer loaded nothing.
  EXPECT_FALSE(strata::cudaDriverLoaded());
  EXPECT_EQ(dlopen("libcuda.so.1", RTLD_NOLOAD | RTLD_LAZY), nullptr);
}

TEST(GpuRuntime, StreamWithoutGpuIsAClearCudaError) {
  if (driverInstalled()) GTEST_SKIP() << "a CUDA driver is installed here; this checks CPU-only machines";
  strataComm_t comm = oneRankComm();
  std::vector<float> x(4, 1.0f), y(4, 0.0f);
  int fakeStream = 0;  // any non-NULL stream asks for the GPU path
  const strataResult_t r = strataAllReduce(x.data(), y.data(), 4, strataFloat32, strataSum, comm, &fakeStream);
  EXPECT_EQ(r, strataUnhandledCudaError);
  const std::string msg = strataGetLastError(comm);
  // The message says CUDA is unavailable and why: no CUDA build, the library missing, or no driver.
  EXPECT_NE(msg.find("CUDA is not available for a device buffer or CUDA stream"), std::string::npos) << msg;
#ifdef STRATA_TEST_HAVE_CUDA
  EXPECT_NE(msg.find("no CUDA driver"), std::string::npos) << msg;
#else
  EXPECT_NE(msg.find("no CUDA support"), std::string::npos) << msg;
#endif
  // Every collective entry point gives the same answer, and p2p, groups and barriers too.
  EXPECT_EQ(strataBroadcast(x.data(), y.data(), 4, strataFloat32, 0, comm, &fakeStream), strataUnhandledCudaError);
  EXPECT_EQ(strataBarrier(comm, &fakeStream), strataUnhandledCudaError);
  EXPECT_EQ(strataGroupStart(), strataSuccess);
  EXPECT_EQ(strataAllGather(x.data(), y.data(), 4, strataFloat32, comm, &fakeStream), strataUnhandledCudaError);
  EXPECT_EQ(strataGroupEnd(), strataSuccess);
  // The communicator is not poisoned: host collectives still work.
  EXPECT_EQ(strataAllReduce(x.data(), y.data(), 4, strataFloat32, strataSum, comm, nullptr), strataSuccess);
  EXPECT_EQ(y[3], 1.0f);
  strataResult_t async = strataInternalError;
  EXPECT_EQ(strataCommGetAsyncError(comm, &async), strataSuccess);
  EXPECT_EQ(async, strataSuccess);
  EXPECT_EQ(strataCommDestroy(comm), strataSuccess);
}

TEST(GpuRuntime, CudaApiThrowsCudaErrorWithCause) {
  if (driverInstalled()) GTEST_SKIP() << "a CUDA driver is installed here; this checks CPU-only machines";
  try {
    strata::cudaApi();
    FAIL() << "cudaApi() succeeded without a driver";
  } catch (const strata::Error& e) {
    EXPECT_EQ(e.code(), strataUnhandledCudaError);
    EXPECT_NE(std::string(e.what()).find("CUDA is not available"), std::string::npos) << e.what();
  }
}

// Host collectives between thread ranks in a build with CUDA: the pointer check on every call must not
// change them.
TEST(GpuRuntime, HostCollectivesUnaffected) {
  strataUniqueId id;
  ASSERT_EQ(strataGetUniqueId(&id), strataSuccess);
  constexpr int n = 3;
  std::vector<std::thread> threads;
  std::vector<int> ok(n, 0);
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      strataComm_t comm = nullptr;
      if (strataCommInitRank(&comm, n, id, r) != strataSuccess) return;
      std::vector<double> x(1000, r + 1.0), y(1000, 0.0);
      bool good = strataAllReduce(x.data(), y.data(), 1000, strataFloat64, strataSum, comm, nullptr) == strataSuccess;
      for (double v : y) good &= v == 6.0;
      good &= strataCommDestroy(comm) == strataSuccess;
      ok[static_cast<size_t>(r)] = good;
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) EXPECT_TRUE(ok[static_cast<size_t>(r)]) << "rank " << r;
}

}  // namespace
