// The device engine's logic on the CPU: a CudaApi whose "device" is host memory and whose stream operations run
// at once on the calling thread (a stream wait spins until the flag is raised), so thread ranks drive the real
// DeviceEngine end to end without a GPU: staged collectives (buffer ranges, in-place layouts, slots, flags,
// the worker's hooks), the CUDA IPC direct all-reduce (setup and agreement, one-shot, two-shot, both
// parities, flag epochs over many calls), settings that differ between ranks, the warning when device all-reduces
// fall back to staging, group and stream rules, the device executor (its kernel run by CPU threads), and CUDA graph
// capture and replay (the fake records a capturing stream's work and replays it). What this cannot
// show: real CUDA semantics (asynchrony, memory ordering between processes, the kernels); tests/gpu/ does.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "../common/msccl_xml.h"
#include "bootstrap/bootstrap.h"
#include "bootstrap/unique_id.h"
#include "core/communicator.h"
#include "device/host_policy.h"
#include "device/proto.h"
#include "engine/device_engine.h"
#include "kernels/cuda_loader.h"
#include "kernels/reduce.h"
#include "strata/strata.h"
#include "test_util.h"
#include "util/config.h"
#include "util/error.h"
#include "util/tsan.h"

namespace strata {
namespace {

void* const kCapturingStream = reinterpret_cast<void*>(0xC0);
void* const kOtherDeviceStream = reinterpret_cast<void*>(0xD0);  // on device 2 when multiDevice is set
thread_local int tCurrentDevice = 0;                             // the fake's per-thread current device

class FakeCudaApi final : public CudaApi {
 public:
  int probe(int* n, int* d, int* r, std::string*) override {
    *n = 1;
    *d = *r = 13000;
    return 0;
  }
  const char* errorString(int) override { return "fake error"; }
  // multiDevice: the buffers and the ranks' streams are on device 1 while threads start on device 0, and an event
  // can only be recorded on a stream of the device it was created on (as in CUDA).
  int pointerDevice(const void* p) override { return p ? (multiDevice ? 1 : 0) : -1; }
  int getDevice(int* d) override {
    *d = tCurrentDevice;
    return 0;
  }
  int setDevice(int d) override {
    tCurrentDevice = d;
    return 0;
  }
  int deviceOf(void* s) const { return !multiDevice ? 0 : s == kOtherDeviceStream ? 2 : s ? 1 : tCurrentDevice; }
  int streamDevice(void* s, int* d) override {
    *d = deviceOf(s);
    return 0;
  }
  int streamIsCapturing(void* s, bool* c) override {
    std::lock_guard<std::mutex> lk(capMu);
    *c = s == kCapturingStream || captures.count(s) != 0;
    return 0;
  }
  int exchangeCaptureMode(int* mode) override {
    std::swap(*mode, tCaptureMode);
    return 0;
  }

  // ---- CUDA graphs, as far as the engine sees them: between beginCapture and endCapture, stream work on that stream
  // is recorded, not run; replay runs the recordings in order (a graph launch), with the arguments they had when
  // captured. Allocating on a thread that captures in global mode fails, as in CUDA, unless the thread relaxed it.
  using Graph = std::vector<std::function<void()>>;
  void beginCapture(void* s) {
    std::lock_guard<std::mutex> lk(capMu);
    captures[s];
    tCapturing = true;
  }
  Graph endCapture(void* s) {
    std::lock_guard<std::mutex> lk(capMu);
    Graph g = std::move(captures[s]);
    captures.erase(s);
    tCapturing = false;
    return g;
  }
  static void replay(const Graph& g) {
    for (const auto& f : g) f();
  }
  bool captured(void* s, std::function<void()> f) {
    std::lock_guard<std::mutex> lk(capMu);
    auto it = captures.find(s);
    if (it == captures.end()) return false;
    it->second.push_back(std::move(f));
    return true;
  }
  static bool allocForbidden() { return tCapturing && tCaptureMode != 2; }
  // Each created stream is its own handle, so a log of stream operations tells one rank's streams from another's.
  int streamCreate(void** s) override {
    *s = reinterpret_cast<void*>(0x70000000 + 0x10 * static_cast<uintptr_t>(++streamsCreated));
    return 0;
  }
  std::atomic<int> streamsCreated{0};
  int streamDestroy(void*) override { return 0; }
  int streamSynchronize(void*) override { return 0; }
  int eventCreate(void** e) override {
    *e = new int(tCurrentDevice);
    return 0;
  }
  int eventDestroy(void* e) override {
    delete static_cast<int*>(e);
    return 0;
  }
  int eventRecord(void* e, void* s) override {
    note('r', s, e);
    return *static_cast<int*>(e) == deviceOf(s) ? 0 : 400;  // cudaErrorInvalidResourceHandle
  }
  int streamWaitEvent(void* s, void* e) override {
    note('e', s, e);
    return 0;
  }
  int eventQuery(void*) override { return stuck ? 600 : 0; }  // stuck: the GPU never finishes
  int memcpyAsync(void* d, const void* s, size_t n, void* st) override {
    if (captured(st, [=, this] { memcpyAsync(d, s, n, nullptr); })) return 0;
    note('c', st, d, s);
    ++copies;
    copiedBytes += n;
    if (pinned(d) || pinned(s)) stagedBytes += n;
    if (pinned(s) && onDevice(d)) {
      std::lock_guard<std::mutex> lk(regionMu);
      toDevice[d] = n;  // perhaps a kernel's arguments (launchExecutor)
    }
    std::memmove(d, s, n);
    return 0;
  }
  int memsetAsync(void* d, int v, size_t n, void* st) override {
    if (captured(st, [=, this] { memsetAsync(d, v, n, nullptr); })) return 0;
    std::memset(d, v, n);
    return 0;
  }
  int launchHostFunc(void* st, void (*fn)(void*), void* arg) override {
    if (captured(st, [=] { fn(arg); })) return 0;
    fn(arg);
    return 0;
  }
  int allocate(void** p, size_t n) {
    if (allocForbidden()) return 900;  // cudaErrorStreamCaptureUnsupported
    *p = std::aligned_alloc(4096, (n + 4095) / 4096 * 4096);
    return *p ? 0 : 2;
  }
  // "Device" allocations are remembered, so a test can ask whether a pointer is device memory.
  int deviceMalloc(void** p, size_t n) override {
    const int e = allocate(p, n);
    if (e == 0) {
      std::lock_guard<std::mutex> lk(regionMu);
      deviceRegions[reinterpret_cast<uintptr_t>(*p)] = n;
    }
    return e;
  }
  static bool inRegions(const std::map<uintptr_t, size_t>& regions, const void* q) {
    const auto a = reinterpret_cast<uintptr_t>(q);
    auto it = regions.upper_bound(a);
    if (it == regions.begin()) return false;
    --it;
    return a < it->first + it->second;
  }
  bool onDevice(const void* q) {
    std::lock_guard<std::mutex> lk(regionMu);
    return inRegions(deviceRegions, q);
  }
  bool pinned(const void* q) {  // in pinned host memory (cudaHostAlloc)
    std::lock_guard<std::mutex> lk(regionMu);
    return inRegions(hostRegions, q);
  }
  int deviceFree(void* p) override {
    {
      std::lock_guard<std::mutex> lk(regionMu);
      deviceRegions.erase(reinterpret_cast<uintptr_t>(p));
    }
    std::free(p);
    return 0;
  }
  int hostAllocMapped(void** h, void** d, size_t n) override {
    const int e = allocate(h, n);
    *d = *h;
    if (e == 0) {
      std::lock_guard<std::mutex> lk(regionMu);
      hostRegions[reinterpret_cast<uintptr_t>(*h)] = n;
    }
    return e;
  }
  int hostFree(void* p) override {
    {
      std::lock_guard<std::mutex> lk(regionMu);
      hostRegions.erase(reinterpret_cast<uintptr_t>(p));
    }
    return deviceFree(p);
  }
  // One address space: the handle is the pointer. The handle travels through the bootstrap's sockets, which
  // ThreadSanitizer does not follow: the owner's writes before it made the handle come before the opener's
  // accesses, and it is told so (util/tsan.h), as the CUDA driver orders them on a GPU.
  int ipcGetMemHandle(void* handle, void* p) override {
    std::memset(handle, 0, kCudaIpcHandleBytes);
    std::memcpy(handle, &p, sizeof p);
    tsanRelease(reinterpret_cast<uintptr_t>(p));
    return 0;
  }
  int ipcOpenMemHandle(void** p, const void* handle) override {
    if (failIpcOpen) return 1;
    std::memcpy(p, handle, sizeof *p);
    tsanAcquire(reinterpret_cast<uintptr_t>(*p));
    ++ipcOpens;
    return 0;
  }
  int ipcCloseMemHandle(void*) override { return 0; }
  int streamWaitValue(void* st, void* addr, uint32_t value) override {
    note('w', st, addr);
    auto* w = static_cast<std::atomic<uint32_t>*>(addr);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (static_cast<int32_t>(w->load(std::memory_order_acquire) - value) < 0) {
      if (std::chrono::steady_clock::now() > until) return 3;  // a lost flag fails the test, not hangs it
      std::this_thread::yield();
    }
    return 0;
  }
  int streamWriteValue(void*, void* addr, uint32_t value) override {
    static_cast<std::atomic<uint32_t>*>(addr)->store(value, std::memory_order_release);
    return 0;
  }
  bool hasStreamMemOps() override { return true; }
  int reduce(void* dst, const void* const* srcs, int n, size_t count, strataDataType_t dt, ReduceKind op,
             void*) override {
    ++reduces;
    maxSources = std::max(maxSources.load(), n);
    if (n < 1 || n > kCudaMaxReduceSources) return 1;
    const size_t es = dtypeSize(dt);
    std::vector<char> acc(static_cast<const char*>(srcs[0]), static_cast<const char*>(srcs[0]) + count * es);
    for (int k = 1; k < n; ++k) reduce2(acc.data(), acc.data(), srcs[k], count, dt, op);
    std::memcpy(dst, acc.data(), count * es);
    return 0;
  }

  // The device executor's kernel, run by the CPU policy: one group of execThreads threads per block (lane), the
  // very runLane the GPU runs. Like every stream operation here, it runs at once on the calling thread.
  int launchExecutor(const void* laneArgs, int lanes, int blockThreads, int dtype, int op, void* st) override {
    if (captured(st, [=, this] { launchExecutor(laneArgs, lanes, blockThreads, dtype, op, nullptr); })) return 0;
    note('k', st, laneArgs);
    ++executorLaunches;
    for (int m = maxLanes.load(); m < lanes && !maxLanes.compare_exchange_weak(m, lanes);) {
    }
    {
      // The launch's own arguments, copied to device memory just before it, are no staged data.
      std::lock_guard<std::mutex> lk(regionMu);
      auto it = toDevice.find(laneArgs);
      if (it != toDevice.end()) {
        stagedBytes -= it->second;
        toDevice.erase(it);
      }
    }
    const auto* args = static_cast<const devproto::LaneArgs*>(laneArgs);
    for (int l = 0; l < lanes; ++l) {
      const devproto::LaneArgs& a = args[l];
      // What every thread of a lane reads (its arguments, its ops, the FIFO and buffer tables): device memory, or
      // every read would cross PCIe.
      const bool onDev = onDevice(&a) && onDevice(a.ops) && onDevice(a.recvMem) && onDevice(a.sendMem) &&
                         (a.bufTable == nullptr || onDevice(a.bufTable));
      ++(onDev ? lanesOpsOnDevice : lanesOpsMapped);
    }
    // The GPU launches the kernel of (dtype, op): a launch that names another pair than its lanes runs wrong code.
    for (int l = 0; l < lanes; ++l)
      if (static_cast<int>(args[l].dtype) != dtype || static_cast<int>(args[l].op) != op) return 1;
    const uint32_t per = execThreads;
    std::vector<std::unique_ptr<devproto::HostGroup>> groups;
    std::vector<std::thread> threads;
    for (int l = 0; l < lanes; ++l) groups.push_back(std::make_unique<devproto::HostGroup>(per));
    for (int l = 0; l < lanes; ++l) {
      for (uint32_t t = 0; t < per; ++t)
        threads.emplace_back([&, l, t] {
          devproto::runLane(devproto::HostPolicy{groups[static_cast<size_t>(l)].get(), t}, args[l]);
        });
    }
    for (auto& t : threads) t.join();
    return 0;
  }

  // The log of stream operations while `logging`: copies ('c': dst, src), flag waits ('w'), event records ('r') and
  // waits ('e'), executor kernels ('k'), each with its stream, in the order they were enqueued.
  struct StreamOp {
    char op;
    void* stream;
    const void* a;
    const void* b;
  };
  void note(char op, void* st, const void* a, const void* b = nullptr) {
    if (!logging) return;
    std::lock_guard<std::mutex> lk(logMu);
    opLog.push_back(StreamOp{op, st, a, b});
  }
  std::atomic<bool> logging{false};
  std::mutex logMu;
  std::vector<StreamOp> opLog;
  std::atomic<size_t> copiedBytes{0}, stagedBytes{0};  // all copies; those to or from pinned host memory
  std::atomic<int> copies{0}, reduces{0}, maxSources{0}, ipcOpens{0}, executorLaunches{0}, maxLanes{0};
  // Launched lanes whose arguments, ops and tables were all in device memory, or not.
  std::atomic<int> lanesOpsOnDevice{0}, lanesOpsMapped{0};
  std::mutex regionMu;
  std::map<uintptr_t, size_t> deviceRegions, hostRegions;
  std::map<const void*, size_t> toDevice;  // the latest copy from pinned host memory to each device address
  uint32_t execThreads = 2;
  std::atomic<bool> failIpcOpen{false};
  std::atomic<bool> multiDevice{false}, stuck{false};
  std::mutex capMu;
  std::map<void*, Graph> captures;
  static thread_local bool tCapturing;
  static thread_local int tCaptureMode;
};
thread_local bool FakeCudaApi::tCapturing = false;
thread_local int FakeCudaApi::tCaptureMode = 0;

// Small integers, exact in every type and every summation order.
double valueOf(int rank, size_t i) { return static_cast<double>((rank * 7 + static_cast<int>(i % 11)) % 5) - 2.0; }

// The fake CUDA, and the device path the test asks for: the direct and staged paths unless the test turns the
// executor on (ExecutorOn) or leaves the default (Defaults).
struct Fixture {
  FakeCudaApi api;
  explicit Fixture(bool executorDefault = false) {
    setCudaApiForTesting(&api);
    // Communicators made here with CommImpl::create, not through the C API, which installs the engine otherwise.
    setDeviceSideFactory(&makeDeviceEngine);
    if (!executorDefault && std::getenv("STRATA_GPU_EXECUTOR") == nullptr) {
      setenv("STRATA_GPU_EXECUTOR", "0", 1);
      setOff_ = true;
    }
  }
  ~Fixture() {
    setCudaApiForTesting(nullptr);
    if (setOff_) unsetenv("STRATA_GPU_EXECUTOR");
  }

 private:
  bool setOff_ = false;
};

// Runs body(rank, comm) on n thread ranks.
template <class F>
void onRanks(int n, F body) {
  strataUniqueId id;
  ASSERT_EQ(strataGetUniqueId(&id), strataSuccess);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      strataComm_t comm = nullptr;
      ASSERT_EQ(strataCommInitRank(&comm, n, id, r), strataSuccess) << strataGetLastError(nullptr);
      body(r, comm);
      EXPECT_EQ(strataCommDestroy(comm), strataSuccess);
    });
  for (auto& t : threads) t.join();
}

void* stream(int rank) { return reinterpret_cast<void*>(static_cast<uintptr_t>(0x1000 + rank)); }

// Every call on "device" buffers must give what the host path gives on the same inputs.
void checkAllReduce(int n, const std::vector<size_t>& counts, strataDataType_t dt, strataRedOp_t op) {
  onRanks(n, [&](int r, strataComm_t comm) {
    for (size_t count : counts) {
      for (int inPlace = 0; inPlace < 2; ++inPlace) {
        const size_t es = dtypeSize(dt);
        std::vector<char> in(count * es + 8), dev(count * es + 8), devOut(count * es + 8), host(count * es + 8);
        for (size_t i = 0; i < count; ++i) storeFromDouble(in.data(), i, dt, valueOf(r, i));
        dev = in;
        void* out = inPlace ? dev.data() : devOut.data();
        ASSERT_EQ(strataAllReduce(dev.data(), out, count, dt, op, comm, stream(r)), strataSuccess)
            << strataGetLastError(comm);
        ASSERT_EQ(strataAllReduce(in.data(), host.data(), count, dt, op, comm, nullptr), strataSuccess);
        ASSERT_EQ(std::memcmp(out, host.data(), count * es), 0)
            << "rank " << r << " n " << n << " count " << count << " " << dtypeName(dt) << " op " << op
            << (inPlace ? " in place" : " out of place");
        if (!inPlace) {
          std::vector<char> orig(count * es + 8);
          for (size_t i = 0; i < count; ++i) storeFromDouble(orig.data(), i, dt, valueOf(r, i));
          EXPECT_EQ(std::memcmp(dev.data(), orig.data(), count * es), 0) << "sendbuff changed";
        }
      }
    }
    strataResult_t async = strataInternalError;
    EXPECT_EQ(strataCommGetAsyncError(comm, &async), strataSuccess);
    EXPECT_EQ(async, strataSuccess);
  });
}

TEST(DeviceEngine, DirectOneShotAndTwoShotMatchHost) {
  Fixture f;
  // 1 KiB one-shot, 256 KiB+ two-shot, 5 MB in two rounds (above the 4 MiB regions); odd counts split unevenly.
  for (int n : {2, 3, 4}) {
    checkAllReduce(n, {1, 7, 257, 70001, 1300001}, strataFloat32, strataSum);
    checkAllReduce(n, {3, 70001}, strataBfloat16, strataMax);
    checkAllReduce(n, {5, 40000}, strataInt32, strataProd);
  }
  EXPECT_GT(f.api.ipcOpens.load(), 0);
  EXPECT_GE(f.api.maxSources.load(), 4);  // one-shot combined all four ranks in one reduce
}

// All-reduces larger than the IPC regions (here 64 KiB) run as two-shot rounds: many rounds, in place and out
// of place, a count that leaves a short last round.
TEST(DeviceEngine, LargeDirectAllReduceInRounds) {
  Fixture f;
  setenv("STRATA_GPU_DIRECT_BYTES", "65536", 1);
  checkAllReduce(3, {300001, 16384, 16385}, strataFloat32, strataSum);
  checkAllReduce(2, {100003}, strataBfloat16, strataSum);
  unsetenv("STRATA_GPU_DIRECT_BYTES");
  EXPECT_GT(f.api.reduces.load(), 3 * 2 * 18);  // 300001 floats: 19 rounds per rank and call
}

TEST(DeviceEngine, ManyCallsCycleParitiesAndEpochs) {
  Fixture f;
  onRanks(3, [&](int r, strataComm_t comm) {
    std::vector<float> x(1000), y(1000);
    for (int it = 0; it < 200; ++it) {
      for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(r + it + static_cast<int>(i));
      ASSERT_EQ(strataAllReduce(x.data(), y.data(), it % 2 ? 1000 : 999, strataFloat32, strataSum, comm, stream(r)),
                strataSuccess);
      for (size_t i = 0; i < (it % 2 ? 1000u : 999u); ++i)
        ASSERT_EQ(y[i], static_cast<float>(3 * (it + static_cast<int>(i)) + 3)) << "iteration " << it;
    }
  });
}

TEST(DeviceEngine, FailedIpcSetupFallsBackToStagedOnEveryRank) {
  Fixture f;
  f.api.failIpcOpen = true;
  checkAllReduce(3, {7, 70001}, strataFloat32, strataSum);
  EXPECT_EQ(f.api.ipcOpens.load(), 0);
  EXPECT_EQ(f.api.reduces.load(), 0);  // every all-reduce ran staged, with the host kernels
}

// A death-test child (threadsafe style: a fresh process, to read its whole log): 3 thread ranks whose CUDA IPC
// opens fail run float all-reduces of `counts` on device and host buffers; exits 0 when the log holds `phrase` once
// per rank, every device result equals the host path's and `ok(api)` holds.
template <class Ok>
[[noreturn]] void failedIpcChild(bool executorDefault, std::initializer_list<size_t> counts, const char* phrase,
                                 Ok ok) {
  Fixture f(executorDefault);
  f.api.failIpcOpen = true;
  constexpr int n = 3;
  std::atomic<int> wrong{0};
  testing::internal::CaptureStderr();
  onRanks(n, [&](int r, strataComm_t comm) {
    for (size_t count : counts) {
      std::vector<float> in(count), dev(count), host(count);
      for (size_t i = 0; i < count; ++i) in[i] = static_cast<float>(valueOf(r, i));
      if (strataAllReduce(in.data(), dev.data(), count, strataFloat32, strataSum, comm, stream(r)) != strataSuccess ||
          strataAllReduce(in.data(), host.data(), count, strataFloat32, strataSum, comm, nullptr) != strataSuccess ||
          dev != host)
        ++wrong;
    }
  });
  const std::string log = testing::internal::GetCapturedStderr();
  int warnings = 0;
  for (size_t at = log.find(phrase); at != std::string::npos; at = log.find(phrase, at + 1)) ++warnings;
  std::fprintf(stderr, "%s", log.c_str());
  std::fprintf(stderr, "child: %d warnings, %d wrong results, %d reduce kernels, %d executor launches\n", warnings,
               wrong.load(), f.api.reduces.load(), f.api.executorLaunches.load());
  std::_Exit(warnings == n && wrong == 0 && ok(f.api) ? 0 : 1);
}

// IPC set-up failure is a slow path the user did not ask for, so it is a WARN, once per communicator however many
// calls it slows, naming the CUDA call that failed and its error. Log settings are read once per process, so the
// check runs in a fresh process (a threadsafe death test re-executes this binary) with STRATA_DEBUG=WARN; the child
// captures its stderr, checks the results (staged, correct) and the warnings, and exits 0 only if all hold.
TEST(DeviceEngine, FailedIpcSetupWarnsOncePerCommunicator) {
  const std::string style = GTEST_FLAG_GET(death_test_style);
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  setenv("STRATA_DEBUG", "WARN", 1);
  // Four all-reduces: one warning per rank, no reduce kernel (everything staged).
  EXPECT_EXIT(failedIpcChild(false, {7, 70001, 7, 1000}, "CUDA IPC direct path off",
                             [](const FakeCudaApi& api) { return api.reduces == 0; }),
              testing::ExitedWithCode(0),
              "STRATA WARN [^\n]*CUDA IPC direct path off [^\n]*cudaIpcOpenMemHandle[^\n]*fake error \\(CUDA error "
              "1\\)[^\n]*staged through host memory");
  unsetenv("STRATA_DEBUG");
  GTEST_FLAG_SET(death_test_style, style);
}

// ---- the device executor (STRATA_GPU_EXECUTOR=1, the default) ------------------------------------------------

// With nothing set, device collectives on one host run in the executor: kernels launched, none of the direct path's
// reduce kernels, results as the host path's.
TEST(DeviceEngine, ExecutorIsTheDefault) {
  ASSERT_EQ(std::getenv("STRATA_GPU_EXECUTOR"), nullptr);
  Fixture f(/*executorDefault=*/true);
  checkAllReduce(3, {7, 70001}, strataFloat32, strataSum);
  checkAllReduce(2, {5, 40000}, strataInt32, strataMax);
  EXPECT_GT(f.api.executorLaunches.load(), 0);
  EXPECT_EQ(f.api.reduces.load(), 0);  // no one-shot or two-shot of the direct path
}

// When the executor's CUDA IPC set-up fails, each rank says so once, naming the CUDA call and the likely cause, and
// its device collectives still give the host path's results (on the direct or staged path). Death-test style, as
// FailedIpcSetupWarnsOncePerCommunicator, to read a fresh process's log.
TEST(DeviceEngine, FailedExecutorSetupWarnsOnceAndFallsBack) {
  const std::string style = GTEST_FLAG_GET(death_test_style);
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  setenv("STRATA_DEBUG", "WARN", 1);
  EXPECT_EXIT(failedIpcChild(true, {7, 70001, 7}, "device executor off",
                             [](const FakeCudaApi& api) { return api.executorLaunches == 0; }),
              testing::ExitedWithCode(0),
              "STRATA WARN [^\n]*device executor off [^\n]*cudaIpcOpenMemHandle[^\n]*fake error \\(CUDA error "
              "1\\)[^\n]*likely cause[^\n]*STRATA_GPU_EXECUTOR=0");
  unsetenv("STRATA_DEBUG");
  GTEST_FLAG_SET(death_test_style, style);
}

// The executor on, and the host path forced to the executor's algorithms, so both sum in the same order.
struct ExecutorOn {
  ExecutorOn() {
    setenv("STRATA_GPU_EXECUTOR", "1", 1);
    setenv("STRATA_ALGO", "allreduce:ring,reducescatter:ring,allgather:ring,broadcast:chain,reduce:chain", 1);
  }
  ~ExecutorOn() {
    unsetenv("STRATA_GPU_EXECUTOR");
    unsetenv("STRATA_ALGO");
  }
};

constexpr strataRedOp_t kPreMulSum = strataMaxRedOp;  // a marker (a valid value of the enum): create one per call

const CollKind kExecKinds[] = {CollKind::kAllReduce, CollKind::kReduceScatter, CollKind::kAllGather,
                               CollKind::kBroadcast, CollKind::kReduce,        CollKind::kAllToAll};

strataResult_t issueColl(CollKind k, const void* s, void* d, size_t count, strataDataType_t dt, strataRedOp_t op,
                         int root, strataComm_t comm, void* st) {
  switch (k) {
    case CollKind::kAllReduce: return strataAllReduce(s, d, count, dt, op, comm, st);
    case CollKind::kReduceScatter: return strataReduceScatter(s, d, count, dt, op, comm, st);
    case CollKind::kAllGather: return strataAllGather(s, d, count, dt, comm, st);
    case CollKind::kBroadcast: return strataBroadcast(s, d, count, dt, root, comm, st);
    case CollKind::kReduce: return strataReduce(s, d, count, dt, op, root, comm, st);
    default: return strataAllToAll(s, d, count, dt, comm, st);
  }
}

// Every collective through the engine's executor path (lanes as groups of 2 threads running the kernel's code),
// against the host path on the same communicator and inputs: bit for bit, in and out of place, Avg and PreMulSum
// (float and integer) included, a count larger than a FIFO (8 x 128 KiB), roots first and last. Every call runs in
// the kernel: none is staged, none takes the older direct path. Without LL128 (STRATA_GPU_LL128=auto: no NVLink
// here), then with it (on): ops of 16 KiB to 512 KiB in LL128 lines; then every op in LL (up to a piece) and every
// op in LL128 (STRATA_GPU_PROTO).
void executorRunsEveryCollective();
TEST(DeviceEngine, ExecutorRunsEveryCollectiveAsTheHostPath) {
  const std::pair<const char*, const char*> settings[] = {{"STRATA_GPU_LL128", "auto"},
                                                          {"STRATA_GPU_LL128", "on"},
                                                          {"STRATA_GPU_PROTO", "ll"},
                                                          {"STRATA_GPU_PROTO", "ll128"}};
  for (const auto& [name, value] : settings) {
    SCOPED_TRACE(std::string(name) + "=" + value);
    setenv(name, value, 1);
    executorRunsEveryCollective();
    unsetenv(name);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

void executorRunsEveryCollective() {
  Fixture f;
  ExecutorOn on;
  struct Combo {
    strataDataType_t dt;
    strataRedOp_t op;
    size_t count;
  };
  const Combo combos[] = {
      {strataFloat32, strataSum, 1},      {strataFloat32, strataSum, 300001},  {strataBfloat16, strataMax, 1001},
      {strataInt32, strataProd, 77},      {strataFloat32, strataAvg, 5003},    {strataInt64, strataAvg, 999},
      {strataFloat16, strataMin, 64},     {strataFloat8e4m3, strataSum, 4097}, {strataBfloat16, strataAvg, 333},
      {strataFloat32, kPreMulSum, 70001}, {strataInt32, kPreMulSum, 513},      {strataFloat16, kPreMulSum, 9}};
  std::atomic<int> checked{0};
  for (int n : {2, 3}) {
    onRanks(n, [&](int r, strataComm_t comm) {
      const size_t un = static_cast<size_t>(n), ur = static_cast<size_t>(r);
      for (CollKind kind : kExecKinds) {
        for (const Combo& c : combos) {
          for (int inPlace = 0; inPlace < 2; ++inPlace) {
            if (inPlace && kind == CollKind::kAllToAll) continue;
            // PreMulSum: a scalar per rank (they may differ, as NCCL allows), float or integer as the dtype.
            strataRedOp_t op = c.op;
            if (op == kPreMulSum) {
              char scalar[8] = {};
              storeFromDouble(scalar, 0, c.dt, dtypeIsFloat(c.dt) ? 0.5 + r : 3.0 - 2.0 * r);
              ASSERT_EQ(strataRedOpCreatePreMulSum(&op, scalar, c.dt, strataScalarHostImmediate, comm), strataSuccess)
                  << strataGetLastError(comm);
            }
            const size_t es = dtypeSize(c.dt);
            const bool rooted = kind == CollKind::kBroadcast || kind == CollKind::kReduce;
            const int root = rooted ? static_cast<int>(c.count % un) : 0;
            size_t sendN = c.count, recvN = c.count;
            if (kind == CollKind::kReduceScatter || kind == CollKind::kAllToAll) sendN = c.count * un;
            if (kind == CollKind::kAllGather || kind == CollKind::kAllToAll) recvN = c.count * un;
            // One area per path; in place: send and receive inside it as NCCL lays them out.
            const size_t areaN = std::max(sendN, recvN);
            std::vector<char> dev((areaN + sendN) * es + 8), host((areaN + sendN) * es + 8);
            auto layout = [&](std::vector<char>& a, const char** s, char** d) {
              char* base = a.data();
              if (!inPlace) {
                *s = base + areaN * es;
                *d = base;
              } else {
                *d = base;
                *s = base;
                if (kind == CollKind::kAllGather) *s = base + ur * c.count * es;
                if (kind == CollKind::kReduceScatter) *d = base + ur * c.count * es;
              }
              for (size_t i = 0; i < sendN; ++i) storeFromDouble(const_cast<char*>(*s), i, c.dt, valueOf(r, i));
            };
            const char *ds, *hs;
            char *dd, *hd;
            layout(dev, &ds, &dd);
            layout(host, &hs, &hd);
            const std::vector<char> sendBefore(ds, ds + sendN * es);
            ASSERT_EQ(issueColl(kind, ds, dd, c.count, c.dt, op, root, comm, stream(r)), strataSuccess)
                << strataGetLastError(comm);
            ASSERT_EQ(issueColl(kind, hs, hd, c.count, c.dt, op, root, comm, nullptr), strataSuccess)
                << strataGetLastError(comm);
            if (op != c.op) {
              ASSERT_EQ(strataRedOpDestroy(op, comm), strataSuccess);
            }
            const bool hasResult = !(kind == CollKind::kReduce && r != root);
            if (hasResult) {
              ASSERT_EQ(std::memcmp(dd, hd, recvN * es), 0)
                  << collName(kind) << " rank " << r << " n " << n << " count " << c.count << " " << dtypeName(c.dt)
                  << " op " << c.op << (inPlace ? " in place" : " out of place");
            }
            if (!inPlace) {
              EXPECT_EQ(std::memcmp(ds, sendBefore.data(), sendN * es), 0) << "sendbuff changed";
            }
            ++checked;
          }
        }
      }
      strataResult_t async = strataInternalError;
      EXPECT_EQ(strataCommGetAsyncError(comm, &async), strataSuccess);
      EXPECT_EQ(async, strataSuccess);
    });
  }
  EXPECT_GT(checked.load(), 0);
  EXPECT_EQ(f.api.executorLaunches.load(), checked.load());
  // Every lane read its arguments and its plan's ops from device memory (the ops copied there at the plan's first
  // call), none over PCIe.
  EXPECT_GT(f.api.lanesOpsOnDevice.load(), 0);
  EXPECT_EQ(f.api.lanesOpsMapped.load(), 0);
  EXPECT_GE(f.api.maxLanes.load(), 8) << "a 1.2 MB call runs in STRATA_GPU_CHANNELS=8 channels";
  EXPECT_EQ(f.api.reduces.load(), 0);
}

// Every other algorithm of the reductions forced in both paths (one-shot, two-shot, recursive halving/doubling at a
// power of two and not, tree): the kernel runs each plan as the host does, bit for bit. In place, Avg and PreMulSum
// run from a copy of the input with the out-of-place plan, as the host path does.
TEST(DeviceEngine, ExecutorRunsEveryAlgorithmInAndOutOfPlace) {
  Fixture f;
  ExecutorOn on;
  struct Forced {
    CollKind kind;
    const char* algo;
  };
  const Forced forced[] = {{CollKind::kAllReduce, "allreduce:oneshot"},     {CollKind::kAllReduce, "allreduce:twoshot"},
                           {CollKind::kAllReduce, "allreduce:rhd"},         {CollKind::kAllReduce, "allreduce:tree"},
                           {CollKind::kReduceScatter, "reducescatter:rhd"}, {CollKind::kAllGather, "allgather:rhd"}};
  const strataRedOp_t ops[] = {strataSum, strataAvg, kPreMulSum};
  std::atomic<int> checked{0};
  for (const Forced& fa : forced) {
    setenv("STRATA_ALGO", fa.algo, 1);
    for (int n : {3, 4}) {
      onRanks(n, [&](int r, strataComm_t comm) {
        const size_t un = static_cast<size_t>(n), ur = static_cast<size_t>(r);
        for (strataDataType_t dt : {strataFloat32, strataInt32}) {
          for (strataRedOp_t base : ops) {
            if (fa.kind == CollKind::kAllGather && base != strataSum) continue;
            for (size_t count : {size_t{1}, size_t{1003}, size_t{140001}}) {
              if (count > 1003 && dt != strataFloat32) continue;  // one large type is enough (sanitizer jobs' time)
              for (int inPlace = 0; inPlace < 2; ++inPlace) {
                strataRedOp_t op = base;
                if (op == kPreMulSum) {
                  char scalar[8] = {};
                  storeFromDouble(scalar, 0, dt, dtypeIsFloat(dt) ? 0.25 * (r + 1) : 2.0 + r);
                  ASSERT_EQ(strataRedOpCreatePreMulSum(&op, scalar, dt, strataScalarHostImmediate, comm),
                            strataSuccess);
                }
                const size_t es = dtypeSize(dt);
                const size_t sendN = fa.kind == CollKind::kReduceScatter ? count * un : count;
                const size_t recvN = fa.kind == CollKind::kAllGather ? count * un : count;
                const size_t areaN = std::max(sendN, recvN);
                std::vector<char> dev((areaN + sendN) * es), host((areaN + sendN) * es);
                auto layout = [&](std::vector<char>& a, const char** sp, char** dp) {
                  char* base = a.data();
                  *dp = base;
                  *sp = inPlace ? base : base + areaN * es;
                  if (inPlace && fa.kind == CollKind::kAllGather) *sp = base + ur * count * es;
                  if (inPlace && fa.kind == CollKind::kReduceScatter) *dp = base + ur * count * es;
                  for (size_t i = 0; i < sendN; ++i) storeFromDouble(const_cast<char*>(*sp), i, dt, valueOf(r, i));
                };
                const char *ds, *hs;
                char *dd, *hd;
                layout(dev, &ds, &dd);
                layout(host, &hs, &hd);
                ASSERT_EQ(issueColl(fa.kind, ds, dd, count, dt, op, 0, comm, stream(r)), strataSuccess)
                    << strataGetLastError(comm);
                ASSERT_EQ(issueColl(fa.kind, hs, hd, count, dt, op, 0, comm, nullptr), strataSuccess)
                    << strataGetLastError(comm);
                ASSERT_EQ(std::memcmp(dd, hd, recvN * es), 0)
                    << fa.algo << " rank " << r << " n " << n << " count " << count << " " << dtypeName(dt) << " op "
                    << base << (inPlace ? " in place" : " out of place");
                if (op != base) {
                  ASSERT_EQ(strataRedOpDestroy(op, comm), strataSuccess);
                }
                ++checked;
              }
            }
          }
        }
      });
    }
  }
  setenv("STRATA_ALGO", "allreduce:ring,reducescatter:ring,allgather:ring,broadcast:chain,reduce:chain", 1);
  EXPECT_EQ(f.api.executorLaunches.load(), checked.load());
}

// Loaded plan programs (STRATA_PLANS) that STRATA_ALGO forces run in the device executor on their own channels (a
// thread block per lane): a 2-channel ring all-reduce out of place, an all-pairs all-reduce in place whose reducing
// lane waits behind nops, a 3-channel ring all-gather in place; each device result equals the host path's, and the
// kernels ran with the programs' lanes (the built-ins would run one lane at these sizes). The other placement runs
// the built-ins.
TEST(DeviceEngine, ExecutorRunsLoadedPrograms) {
  Fixture f;
  ExecutorOn on;
  using namespace msccl_test;
  char dir[] = "/tmp/strata-devplans-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string d = dir;
  std::ofstream(d + "/ring.xml") << xml(ringAllReduce(4, 2, 1));
  std::ofstream(d + "/pairs.xml") << xml(allPairsAllReduce(4, 1, true));
  std::ofstream(d + "/ag.xml") << xml(ringAllGather(4, 3, 1, true));
  setenv("STRATA_PLANS", d.c_str(), 1);
  const char* forced[] = {"allreduce:ring_allreduce_n4_c2_m1,allgather:ring_allgather_n4_c3_m1_inplace",
                          "allreduce:allpairs_allreduce_n4_m1_nop"};
  std::atomic<int> checked{0};
  for (const char* algo : forced) {
    setenv("STRATA_ALGO", algo, 1);
    onRanks(4, [&](int r, strataComm_t comm) {
      const size_t ur = static_cast<size_t>(r);
      for (CollKind kind : {CollKind::kAllReduce, CollKind::kAllGather}) {
        for (size_t count : {size_t{1}, size_t{7}, size_t{1003}}) {
          for (int inPlace = 0; inPlace < 2; ++inPlace) {
            const strataDataType_t dt = strataFloat32;
            const size_t es = dtypeSize(dt);
            const size_t recvN = kind == CollKind::kAllGather ? count * 4 : count;
            std::vector<char> dev((recvN + count) * es), host((recvN + count) * es);
            auto layout = [&](std::vector<char>& a, const char** sp, char** dp) {
              char* base = a.data();
              *dp = base;
              *sp = inPlace ? base : base + recvN * es;
              if (inPlace && kind == CollKind::kAllGather) *sp = base + ur * count * es;
              for (size_t i = 0; i < count; ++i) storeFromDouble(const_cast<char*>(*sp), i, dt, valueOf(r, i));
            };
            const char *ds, *hs;
            char *dd, *hd;
            layout(dev, &ds, &dd);
            layout(host, &hs, &hd);
            ASSERT_EQ(issueColl(kind, ds, dd, count, dt, strataSum, 0, comm, stream(r)), strataSuccess)
                << strataGetLastError(comm);
            ASSERT_EQ(issueColl(kind, hs, hd, count, dt, strataSum, 0, comm, nullptr), strataSuccess)
                << strataGetLastError(comm);
            ASSERT_EQ(std::memcmp(dd, hd, recvN * es), 0) << algo << " " << collName(kind) << " rank " << r << " count "
                                                          << count << (inPlace ? " in place" : " out of place");
            ++checked;
          }
        }
      }
    });
  }
  unsetenv("STRATA_PLANS");
  setenv("STRATA_ALGO", "allreduce:ring,reducescatter:ring,allgather:ring,broadcast:chain,reduce:chain", 1);
  std::filesystem::remove_all(d);
  EXPECT_EQ(checked.load(), 2 * 4 * 2 * 3 * 2);
  EXPECT_GE(f.api.maxLanes.load(), 4) << "the programs' lanes never reached the executor";
}

// CUDA graphs: executor calls captured once and replayed many times give, at every replay, what the host path gives
// on that replay's inputs (the FIFO steps live on the device and advance with each replay; nothing per call is chosen
// by the host). Groups are captured too (a kernel per collective, then one for the sends and receives). Uncaptured
// calls between replays keep working. The first collective cannot be captured (it sets the executor up), nor can any
// call while the executor is off: each refusal says why.
TEST(DeviceEngine, ExecutorCallsCapturedIntoAGraphReplay) {
  Fixture f;
  ExecutorOn on;
  constexpr int n = 3;
  constexpr size_t kAr = 70001, kAg = 33, kRs = 515, kAvg = 1003;
  onRanks(n, [&](int r, strataComm_t comm) {
    void* st = stream(r);
    std::vector<float> x(kAr), y(kAr), hy(kAr), avg(kAvg), havg(kAvg);
    std::vector<int32_t> rs(kRs * n), hrs(kRs * n);
    std::vector<uint16_t> agIn(kAg), ag(kAg * n), hag(kAg * n);
    std::vector<int32_t> ring(40000), small(5), smallIn(5);
    std::vector<float> gx(513), gmax(513), gmin(513), hmax(513), hmin(513);
    auto expectRefused = [&](const char* what, auto call, const char* says) {
      f.api.beginCapture(st);
      const strataResult_t res = call();
      const std::string msg = strataGetLastError(comm);
      FakeCudaApi::Graph g = f.api.endCapture(st);
      EXPECT_EQ(res, strataInvalidUsage) << what;
      EXPECT_NE(msg.find("CUDA graph"), std::string::npos) << what << ": " << msg;
      EXPECT_NE(msg.find(says), std::string::npos) << what << ": " << msg;
      EXPECT_TRUE(g.empty()) << what << ": a refused call left work in the graph";
    };
    expectRefused(
        "the first call", [&] { return strataAllReduce(x.data(), y.data(), kAr, strataFloat32, strataSum, comm, st); },
        "warm-up");
    ASSERT_EQ(strataAllReduce(x.data(), y.data(), kAr, strataFloat32, strataSum, comm, st), strataSuccess);
    // The graph: an all-reduce (Simple, larger than a FIFO), an in-place integer PreMulSum reduce-scatter, a bf16
    // all-gather (LL), an in-place float Avg all-reduce (its input copied aside inside the graph).
    strataRedOp_t pms;
    int32_t scalar = 2 + r;
    ASSERT_EQ(strataRedOpCreatePreMulSum(&pms, &scalar, strataInt32, strataScalarHostImmediate, comm), strataSuccess);
    f.api.beginCapture(st);
    ASSERT_EQ(strataAllReduce(x.data(), y.data(), kAr, strataFloat32, strataSum, comm, st), strataSuccess)
        << strataGetLastError(comm);
    ASSERT_EQ(strataReduceScatter(rs.data(), rs.data() + r * kRs, kRs, strataInt32, pms, comm, st), strataSuccess)
        << strataGetLastError(comm);
    ASSERT_EQ(strataAllGather(agIn.data(), ag.data(), kAg, strataBfloat16, comm, st), strataSuccess);
    ASSERT_EQ(strataAllReduce(avg.data(), avg.data(), kAvg, strataFloat32, strataAvg, comm, st), strataSuccess);
    // A ring exchange by send/recv, in place (the send is copied aside inside the graph, then received over).
    strataGroupStart();
    strataSend(ring.data(), ring.size(), strataInt32, (r + 1) % n, comm, st);
    strataRecv(ring.data(), ring.size(), strataInt32, (r + n - 1) % n, comm, st);
    ASSERT_EQ(strataGroupEnd(), strataSuccess) << strataGetLastError(comm);
    // A group of two all-reduces and a send/recv pair: a kernel per collective, then one for the sends and receives.
    strataGroupStart();
    strataAllReduce(gx.data(), gmax.data(), gx.size(), strataFloat32, strataMax, comm, st);
    strataAllReduce(gx.data(), gmin.data(), gx.size(), strataFloat32, strataMin, comm, st);
    strataSend(small.data(), small.size(), strataInt32, (r + 1) % n, comm, st);
    strataRecv(smallIn.data(), smallIn.size(), strataInt32, (r + n - 1) % n, comm, st);
    ASSERT_EQ(strataGroupEnd(), strataSuccess) << strataGetLastError(comm);
    // A collective of 0 elements captures as nothing, and succeeds.
    ASSERT_EQ(strataAllReduce(x.data(), y.data(), 0, strataFloat32, strataSum, comm, st), strataSuccess);
    const FakeCudaApi::Graph graph = f.api.endCapture(st);
    ASSERT_FALSE(graph.empty());

    for (int replay = 0; replay < 6; ++replay) {
      // New inputs every replay, in the buffers the graph captured.
      const size_t shift = static_cast<size_t>(replay) * 13;
      for (size_t i = 0; i < kAr; ++i) x[i] = static_cast<float>(valueOf(r, i + shift));
      for (size_t i = 0; i < rs.size(); ++i) rs[i] = static_cast<int32_t>(valueOf(r, i + shift)) * (replay + 1);
      for (size_t i = 0; i < kAg; ++i) storeFromDouble(agIn.data(), i, strataBfloat16, valueOf(r, i + shift));
      for (size_t i = 0; i < kAvg; ++i) avg[i] = static_cast<float>(valueOf(r, i + 2 * shift));
      for (size_t i = 0; i < ring.size(); ++i) ring[i] = static_cast<int32_t>(r * 1000003 + replay * 31 + i);
      for (size_t i = 0; i < small.size(); ++i) small[i] = static_cast<int32_t>(r * 100 + replay * 10 + i);
      for (size_t i = 0; i < gx.size(); ++i) gx[i] = static_cast<float>(valueOf(r, i + 3 * shift));
      hrs = rs;
      havg = avg;
      FakeCudaApi::replay(graph);
      const int from = (r + n - 1) % n;
      for (size_t i = 0; i < small.size(); ++i)
        ASSERT_EQ(smallIn[i], static_cast<int32_t>(from * 100 + replay * 10 + i)) << "replay " << replay;
      ASSERT_EQ(strataAllReduce(gx.data(), hmax.data(), gx.size(), strataFloat32, strataMax, comm, nullptr),
                strataSuccess);
      ASSERT_EQ(strataAllReduce(gx.data(), hmin.data(), gx.size(), strataFloat32, strataMin, comm, nullptr),
                strataSuccess);
      EXPECT_EQ(gmax, hmax) << "replay " << replay;
      EXPECT_EQ(gmin, hmin) << "replay " << replay;
      for (size_t i = 0; i < ring.size(); ++i)
        ASSERT_EQ(ring[i], static_cast<int32_t>(from * 1000003 + replay * 31 + i)) << "replay " << replay << " i " << i;
      ASSERT_EQ(strataAllReduce(x.data(), hy.data(), kAr, strataFloat32, strataSum, comm, nullptr), strataSuccess);
      ASSERT_EQ(strataReduceScatter(hrs.data(), hrs.data() + r * kRs, kRs, strataInt32, pms, comm, nullptr),
                strataSuccess);
      ASSERT_EQ(strataAllGather(agIn.data(), hag.data(), kAg, strataBfloat16, comm, nullptr), strataSuccess);
      ASSERT_EQ(strataAllReduce(havg.data(), havg.data(), kAvg, strataFloat32, strataAvg, comm, nullptr),
                strataSuccess);
      EXPECT_EQ(y, hy) << "replay " << replay << " rank " << r;
      EXPECT_TRUE(std::equal(rs.begin() + r * kRs, rs.begin() + (r + 1) * kRs, hrs.begin() + r * kRs))
          << "replay " << replay << " rank " << r;
      EXPECT_EQ(ag, hag) << "replay " << replay << " rank " << r;
      EXPECT_EQ(avg, havg) << "replay " << replay << " rank " << r;
      // An uncaptured executor call between replays: the FIFOs' steps stay in agreement.
      std::vector<float> z(1001), hz(1001), w(1001);
      for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(valueOf(r, i + shift + 1));
      ASSERT_EQ(strataAllReduce(w.data(), z.data(), w.size(), strataFloat32, strataMax, comm, st), strataSuccess);
      ASSERT_EQ(strataAllReduce(w.data(), hz.data(), w.size(), strataFloat32, strataMax, comm, nullptr), strataSuccess);
      EXPECT_EQ(z, hz) << "uncaptured call after replay " << replay;
    }
    EXPECT_EQ(strataRedOpDestroy(pms, comm), strataSuccess);
    strataResult_t async = strataInternalError;
    EXPECT_EQ(strataCommGetAsyncError(comm, &async), strataSuccess);
    EXPECT_EQ(async, strataSuccess);
  });
  // Per rank: the warm-up, then per replay the 8 captured kernels and the uncaptured one; nothing ran at capture.
  EXPECT_EQ(f.api.executorLaunches.load(), n * (1 + 6 * 9));
  // Plans first seen while capturing, and the captured group, read their ops from device memory at every replay.
  EXPECT_GT(f.api.lanesOpsOnDevice.load(), 0);
  EXPECT_EQ(f.api.lanesOpsMapped.load(), 0);
}

TEST(DeviceEngine, CaptureNeedsTheExecutor) {
  Fixture f;
  onRanks(2, [&](int r, strataComm_t comm) {
    std::vector<float> x(64, 1.0f), y(64);
    ASSERT_EQ(strataAllReduce(x.data(), y.data(), 64, strataFloat32, strataSum, comm, stream(r)), strataSuccess);
    f.api.beginCapture(stream(r));
    EXPECT_EQ(strataAllReduce(x.data(), y.data(), 64, strataFloat32, strataSum, comm, stream(r)), strataInvalidUsage);
    const std::string msg = strataGetLastError(comm);
    EXPECT_TRUE(f.api.endCapture(stream(r)).empty());
    EXPECT_NE(msg.find("STRATA_GPU_EXECUTOR=1"), std::string::npos) << msg;
  });
}

// Groups of collectives run in the executor, a kernel per collective. Sends and receives on device buffers run
// in the executor's kernel once a collective has set it up, whatever else their group holds: single calls, a ring, an
// all-to-all of mixed element sizes, nccl-tests' in-place sendrecv (the send copied aside first), sends and receives to
// self, a collective and send/recv in one group. Before the first collective they are staged (nothing else has set the
// executor up on every rank).
TEST(DeviceEngine, ExecutorRunsGroupsAndSendRecv) {
  Fixture f;
  ExecutorOn on;
  constexpr int n = 4;
  std::atomic<int> before{-1};
  onRanks(n, [&](int r, strataComm_t comm) {
    void* st = stream(r);
    const int next = (r + 1) % n, prev = (r + n - 1) % n;
    auto value = [](int rank, size_t call, size_t i) { return static_cast<int32_t>(rank * 7919 + call * 131 + i); };
    // Staged: the executor is not set up yet.
    {
      std::vector<int32_t> a(1000), b(1000);
      for (size_t i = 0; i < a.size(); ++i) a[i] = value(r, 0, i);
      strataGroupStart();
      strataSend(a.data(), a.size(), strataInt32, next, comm, st);
      strataRecv(b.data(), b.size(), strataInt32, prev, comm, st);
      ASSERT_EQ(strataGroupEnd(), strataSuccess) << strataGetLastError(comm);
      for (size_t i = 0; i < b.size(); ++i) ASSERT_EQ(b[i], value(prev, 0, i));
    }
    if (r == 0) before = f.api.executorLaunches.load();
    std::vector<float> x(4096, 1.0f), y(4096);
    ASSERT_EQ(strataAllReduce(x.data(), y.data(), x.size(), strataFloat32, strataSum, comm, st), strataSuccess);
    // A ring larger than a FIFO (8 x 128 KiB), then one small.
    for (const size_t count : {size_t{300001}, size_t{3}}) {
      std::vector<int32_t> a(count), b(count, -1);
      for (size_t i = 0; i < count; ++i) a[i] = value(r, 1, i);
      strataGroupStart();
      strataSend(a.data(), count, strataInt32, next, comm, st);
      strataRecv(b.data(), count, strataInt32, prev, comm, st);
      ASSERT_EQ(strataGroupEnd(), strataSuccess) << strataGetLastError(comm);
      for (size_t i = 0; i < count; ++i) ASSERT_EQ(b[i], value(prev, 1, i)) << count << " at " << i;
    }
    // Single calls outside a group: rank 0 to rank 1, odd bytes.
    {
      std::vector<uint8_t> m(1001);
      for (size_t i = 0; i < m.size(); ++i) m[i] = static_cast<uint8_t>(i * 3);
      if (r == 0) {
        ASSERT_EQ(strataSend(m.data(), m.size(), strataUint8, 1, comm, st), strataSuccess);
      }
      if (r == 1) {
        std::vector<uint8_t> got(m.size());
        ASSERT_EQ(strataRecv(got.data(), got.size(), strataUint8, 0, comm, st), strataSuccess);
        EXPECT_EQ(got, m);
      }
    }
    // All-to-all by send/recv (torch's NCCL backend's way), self included, in int8 (odd counts) and float64.
    {
      std::vector<std::vector<int8_t>> out8(n), in8(n);
      std::vector<std::vector<double>> out64(n), in64(n);
      strataGroupStart();
      for (int p = 0; p < n; ++p) {
        const size_t c8 = 1 + 37 * static_cast<size_t>(r + p), c64 = 20000 + static_cast<size_t>(p);
        out8[p].resize(c8);
        for (size_t i = 0; i < c8; ++i) out8[p][i] = static_cast<int8_t>(value(r, p, i));
        in8[p].assign(1 + 37 * static_cast<size_t>(r + p), 0);
        out64[p].resize(c64);
        for (size_t i = 0; i < c64; ++i) out64[p][i] = value(r, 100 + p, i) * 0.5;
        in64[p].assign(20000 + static_cast<size_t>(r), 0);
        strataSend(out8[p].data(), c8, strataInt8, p, comm, st);
        strataRecv(in8[p].data(), in8[p].size(), strataInt8, p, comm, st);
        strataSend(out64[p].data(), c64, strataFloat64, p, comm, st);
        strataRecv(in64[p].data(), in64[p].size(), strataFloat64, p, comm, st);
      }
      ASSERT_EQ(strataGroupEnd(), strataSuccess) << strataGetLastError(comm);
      for (int p = 0; p < n; ++p) {
        for (size_t i = 0; i < in8[p].size(); ++i) ASSERT_EQ(in8[p][i], static_cast<int8_t>(value(p, r, i)));
        for (size_t i = 0; i < in64[p].size(); ++i) ASSERT_EQ(in64[p][i], value(p, 100 + r, i) * 0.5);
      }
    }
    // nccl-tests' in-place sendrecv: one buffer sent to the next rank and received from the previous.
    {
      std::vector<float> buf(300001);  // more than a FIFO holds: the send is still reading when the receive writes
      for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<float>(value(r, 5, i));
      strataGroupStart();
      strataSend(buf.data(), buf.size(), strataFloat32, next, comm, st);
      strataRecv(buf.data(), buf.size(), strataFloat32, prev, comm, st);
      ASSERT_EQ(strataGroupEnd(), strataSuccess) << strataGetLastError(comm);
      for (size_t i = 0; i < buf.size(); ++i) ASSERT_EQ(buf[i], static_cast<float>(value(prev, 5, i))) << i;
    }
    // A group of collectives: one kernel each, in issue order.
    {
      std::vector<float> in(3 * n + 1), rs(3), ag(3 * n), hrs(3), hag(3 * n);
      for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(valueOf(r, i));
      strataGroupStart();
      strataReduceScatter(in.data(), rs.data(), 3, strataFloat32, strataSum, comm, st);
      strataAllGather(in.data(), ag.data(), 3, strataFloat32, comm, st);
      ASSERT_EQ(strataGroupEnd(), strataSuccess) << strataGetLastError(comm);
      ASSERT_EQ(strataReduceScatter(in.data(), hrs.data(), 3, strataFloat32, strataSum, comm, nullptr), strataSuccess);
      ASSERT_EQ(strataAllGather(in.data(), hag.data(), 3, strataFloat32, comm, nullptr), strataSuccess);
      EXPECT_EQ(rs, hrs);
      EXPECT_EQ(ag, hag);
    }
    // A collective and send/recv in one group: the collective first, then the sends and receives.
    {
      std::vector<float> ax(5000), ay(5000), hy(5000);
      for (size_t i = 0; i < ax.size(); ++i) ax[i] = static_cast<float>(valueOf(r, i));
      std::vector<int64_t> a(777), b(777);
      for (size_t i = 0; i < a.size(); ++i) a[i] = value(r, 9, i);
      strataGroupStart();
      strataAllReduce(ax.data(), ay.data(), ax.size(), strataFloat32, strataSum, comm, st);
      strataSend(a.data(), a.size(), strataInt64, prev, comm, st);
      strataRecv(b.data(), b.size(), strataInt64, next, comm, st);
      ASSERT_EQ(strataGroupEnd(), strataSuccess) << strataGetLastError(comm);
      ASSERT_EQ(strataAllReduce(ax.data(), hy.data(), ax.size(), strataFloat32, strataSum, comm, nullptr),
                strataSuccess);
      EXPECT_EQ(ay, hy);
      for (size_t i = 0; i < b.size(); ++i) ASSERT_EQ(b[i], value(next, 9, i));
    }
    strataResult_t async = strataInternalError;
    EXPECT_EQ(strataCommGetAsyncError(comm, &async), strataSuccess);
    EXPECT_EQ(async, strataSuccess);
  });
  // Nothing ran in the kernel before the first collective; then per rank: the all-reduce, two rings, the single
  // call (ranks 0 and 1), the all-to-all, the in-place exchange, the group of two collectives, the group's
  // all-reduce and its send/recv.
  EXPECT_EQ(before.load(), 0);
  EXPECT_EQ(f.api.executorLaunches.load(), n * 9 + 2);
  // A group's ops (lowered per call, never cached) reach the kernel in device memory too, with its buffer table.
  EXPECT_GT(f.api.lanesOpsOnDevice.load(), 0);
  EXPECT_EQ(f.api.lanesOpsMapped.load(), 0);
}

// A receive that expects other bytes than its message has fails the call on the receiving rank, naming the peer and
// both sizes (as the host path's stamps do), instead of returning a message cut short or waiting for the deadline.
TEST(DeviceEngine, ExecutorSendRecvOfOtherSizesFails) {
  Fixture f;
  ExecutorOn on;
  onRanks(2, [&](int r, strataComm_t comm) {
    // The failed communicator's destroy leaves its executor FIFOs allocated on purpose (a peer's kernel may still
    // write them); LeakSanitizer is told per thread, and this thread makes them.
    strata::test::LeakExpected leaks;
    void* st = stream(r);
    std::vector<float> x(64, 1.0f), y(64);
    ASSERT_EQ(strataAllReduce(x.data(), y.data(), x.size(), strataFloat32, strataSum, comm, st), strataSuccess);
    const int before = f.api.executorLaunches.load();
    std::vector<float> m(100, 2.0f);
    if (r == 0) {
      EXPECT_EQ(strataSend(m.data(), 100, strataFloat32, 1, comm, st), strataSuccess);
    }
    if (r == 1) {
      EXPECT_EQ(strataRecv(m.data(), 50, strataFloat32, 0, comm, st), strataSuccess);  // enqueued: the error is async
      strataResult_t async = strataSuccess;
      EXPECT_EQ(strataCommGetAsyncError(comm, &async), strataSuccess);
      EXPECT_EQ(async, strataInvalidUsage);
      // The failed communicator refuses the next call with the failure's words.
      EXPECT_NE(strataAllReduce(x.data(), y.data(), x.size(), strataFloat32, strataSum, comm, st), strataSuccess);
      const std::string msg = strataGetLastError(comm);
      EXPECT_NE(msg.find("rank 0's message has 400 bytes, but the recv it meets expects 200"), std::string::npos)
          << msg;
      EXPECT_GT(f.api.executorLaunches.load(), before);
    }
  });
}

// A group whose sends and receives the executor would refuse (a send to self without its receive) is refused
// before anything of it is enqueued: its collective does not run either, and the communicator goes on.
TEST(DeviceEngine, ExecutorRefusesABadGroupBeforeEnqueueing) {
  Fixture f;
  ExecutorOn on;
  onRanks(2, [&](int r, strataComm_t comm) {
    void* st = stream(r);
    std::vector<float> x(64, 1.0f), y(64);
    ASSERT_EQ(strataAllReduce(x.data(), y.data(), x.size(), strataFloat32, strataSum, comm, st), strataSuccess);
    strataGroupStart();
    strataAllReduce(x.data(), y.data(), x.size(), strataFloat32, strataSum, comm, st);
    strataSend(x.data(), 4, strataFloat32, r, comm, st);
    EXPECT_EQ(strataGroupEnd(), strataInvalidUsage);
    const std::string msg = strataGetLastError(nullptr);
    EXPECT_NE(msg.find("send(s) to self but 0 recv(s) from self"), std::string::npos) << msg;
    std::fill(y.begin(), y.end(), 0.0f);
    ASSERT_EQ(strataAllReduce(x.data(), y.data(), x.size(), strataFloat32, strataSum, comm, st), strataSuccess)
        << strataGetLastError(comm);
    EXPECT_EQ(y[5], 2.0f);
  });
  // Per rank: the first and the last all-reduce; nothing of the refused group.
  EXPECT_EQ(f.api.executorLaunches.load(), 4);
}

// A collective whose peer never comes: strataCommAbort from another thread raises the rank's abort word (the
// communicator's failure state holds it), and the kernel leaves its waits within 2 s; with no abort, the kernel's own
// deadline (STRATA_TIMEOUT_MS, on the device's clock) ends it and the timeout becomes the asynchronous error.
TEST(DeviceEngine, ExecutorKernelsLeaveOnAbortAndOnTheDeadline) {
  Fixture f;
  ExecutorOn on;
  for (const bool abortIt : {true, false}) {
    if (!abortIt) setenv("STRATA_TIMEOUT_MS", "1000", 1);
    constexpr int n = 3;
    strataUniqueId id;
    ASSERT_EQ(strataGetUniqueId(&id), strataSuccess);
    std::vector<strataComm_t> comms(n, nullptr);
    std::vector<double> took(n, -1);
    std::vector<strataResult_t> async(n, strataSuccess);
    std::atomic<int> ready{0}, left{0};
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) {
      threads.emplace_back([&, r] {
        // After an abort the FIFOs stay allocated on purpose (a peer's kernel may still write them); LeakSanitizer
        // is told per thread, and this thread makes them.
        strata::test::LeakExpected leaks;
        strataComm_t& comm = comms[static_cast<size_t>(r)];
        ASSERT_EQ(strataCommInitRank(&comm, n, id, r), strataSuccess) << strataGetLastError(nullptr);
        std::vector<float> x(100000, 1.0f), y(100000);
        // One call together first: the executor is set up on every rank.
        ASSERT_EQ(strataAllReduce(x.data(), y.data(), 1000, strataFloat32, strataSum, comm, stream(r)), strataSuccess);
        ++ready;
        if (r == n - 1) return;  // the peer that never comes to the second call
        while (ready.load() < n) std::this_thread::yield();
        const auto t0 = std::chrono::steady_clock::now();
        strataAllReduce(x.data(), y.data(), x.size(), strataFloat32, strataSum, comm, stream(r));
        took[static_cast<size_t>(r)] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (!abortIt) strataCommGetAsyncError(comm, &async[static_cast<size_t>(r)]);
        ++left;
      });
    }
    while (ready.load() < n) std::this_thread::yield();
    if (abortIt) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      for (int r = 0; r < n - 1; ++r) strataCommAbort(comms[static_cast<size_t>(r)]);
    }
    for (auto& t : threads) t.join();
    for (int r = 0; r < n - 1; ++r) {
      EXPECT_GT(took[static_cast<size_t>(r)], 0.2) << "rank " << r << " did not wait";
      EXPECT_LT(took[static_cast<size_t>(r)], abortIt ? 2.3 : 3.0)
          << "rank " << r << (abortIt ? ": abort" : ": the deadline") << " took " << took[static_cast<size_t>(r)]
          << " s to end the kernel";
      if (!abortIt) {
        // The first rank to time out reports strataTimeout and tells the others, whose abort words then end their
        // kernels: strataRemoteError there, unless their own deadline came first.
        EXPECT_TRUE(async[static_cast<size_t>(r)] == strataTimeout ||
                    async[static_cast<size_t>(r)] == strataRemoteError)
            << "rank " << r << ": " << async[static_cast<size_t>(r)];
        strataCommAbort(comms[static_cast<size_t>(r)]);
      }
    }
    if (!abortIt) {
      EXPECT_TRUE(async[0] == strataTimeout || async[1] == strataTimeout);
    }
    strataCommAbort(comms[n - 1]);
    unsetenv("STRATA_TIMEOUT_MS");
  }
}

// Large staged all-reduces run as a pipeline of chunk all-reduces (here 4 KiB chunks, CUDA IPC off): in
// place and out of place, counts that do not divide into chunks, and an integer Avg (divided per chunk).
TEST(DeviceEngine, StagedAllReduceInChunks) {
  Fixture f;
  setenv("STRATA_GPU_STAGE_CHUNK_BYTES", "4096", 1);
  setenv("STRATA_GPU_DIRECT_BYTES", "0", 1);
  const int copiesBefore = f.api.copies.load();
  checkAllReduce(3, {70001, 3000}, strataFloat32, strataSum);
  checkAllReduce(2, {50001}, strataInt32, strataAvg);
  checkAllReduce(2, {9999}, strataBfloat16, strataMin);
  unsetenv("STRATA_GPU_STAGE_CHUNK_BYTES");
  unsetenv("STRATA_GPU_DIRECT_BYTES");
  EXPECT_EQ(f.api.reduces.load(), 0);
  // 70001 floats in 4 KiB chunks: 69 chunks in and 69 out per rank and call, not one copy each way.
  EXPECT_GT(f.api.copies.load() - copiesBefore, 3 * 2 * 2 * 69);
}

// A staged all-reduce in chunks copies its inputs in on the caller's stream and its results out on the engine's own
// stream, each chunk after its flag, so the two directions overlap on the copy engines (on a GPU; the fake runs each
// operation at once); the caller's stream then waits for an event recorded after the last copy out, so later work on
// it sees the results.
TEST(DeviceEngine, StagedCopiesInAndOutOnTwoStreams) {
  Fixture f;
  setenv("STRATA_GPU_STAGE_CHUNK_BYTES", "4096", 1);
  setenv("STRATA_GPU_DIRECT_BYTES", "0", 1);
  constexpr int n = 2;
  constexpr size_t kCount = 10000;  // 40000 bytes: 10 chunks
  std::vector<std::vector<float>> in(n, std::vector<float>(kCount)), out(n, std::vector<float>(kCount));
  f.api.logging = true;
  onRanks(n, [&](int r, strataComm_t comm) {
    for (size_t i = 0; i < kCount; ++i) in[r][i] = static_cast<float>(valueOf(r, i));
    ASSERT_EQ(strataAllReduce(in[r].data(), out[r].data(), kCount, strataFloat32, strataSum, comm, stream(r)),
              strataSuccess);
  });
  f.api.logging = false;
  unsetenv("STRATA_GPU_STAGE_CHUNK_BYTES");
  unsetenv("STRATA_GPU_DIRECT_BYTES");
  for (int r = 0; r < n; ++r) {
    for (size_t i = 0; i < kCount; ++i) ASSERT_EQ(out[r][i], static_cast<float>(valueOf(0, i) + valueOf(1, i)));
    auto inside = [](const void* p, const std::vector<float>& v) {
      return p >= static_cast<const void*>(v.data()) && p < static_cast<const void*>(v.data() + v.size());
    };
    int ins = 0, outs = 0;
    void* outStream = nullptr;
    size_t lastOut = 0;
    for (size_t k = 0; k < f.api.opLog.size(); ++k) {
      const auto& o = f.api.opLog[k];
      if (o.op != 'c') continue;
      if (inside(o.b, in[r])) {
        ++ins;
        EXPECT_EQ(o.stream, stream(r)) << "rank " << r << ": an input copied on another stream";
      }
      if (inside(o.a, out[r])) {
        ++outs;
        EXPECT_NE(o.stream, stream(r)) << "rank " << r << ": a result copied back on the caller's stream";
        if (outStream) {
          EXPECT_EQ(o.stream, outStream);
        }
        outStream = o.stream;
        lastOut = k;
      }
    }
    EXPECT_EQ(ins, 10) << "rank " << r;
    EXPECT_EQ(outs, 10) << "rank " << r;
    // After the last copy out: an event recorded on that stream, which the caller's stream then waits for.
    const void* event = nullptr;
    bool waited = false;
    for (size_t k = lastOut + 1; k < f.api.opLog.size(); ++k) {
      const auto& o = f.api.opLog[k];
      if (!event && o.op == 'r' && o.stream == outStream) event = o.a;
      if (event && o.op == 'e' && o.stream == stream(r) && o.a == event) waited = true;
    }
    EXPECT_TRUE(waited) << "rank " << r << ": the caller's stream does not wait for the copies out";
  }
}

// Ranks with a Config each (strataCommInitRank reads the one environment of this process), called through the
// communicator's device entry point, as the C API calls it.
template <class F>
void onConfiguredRanks(const std::vector<Config>& configs, F body) {
  strataUniqueId id;
  ASSERT_EQ(strataGetUniqueId(&id), strataSuccess);
  const UniqueIdInfo info = decodeUniqueId(id);
  const int n = static_cast<int>(configs.size());
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      const Config& c = configs[static_cast<size_t>(r)];
      try {
        std::shared_ptr<CommImpl> comm = CommImpl::create(c, Bootstrap::connect(c, info, r, n));
        body(r, *comm);
        comm->destroy();
      } catch (const std::exception& e) {
        ADD_FAILURE() << "rank " << r << ": " << e.what();
      }
    });
  for (auto& t : threads) t.join();
}

Config gpuTestConfig() {
  Config c = Config::fromEnv();
  c.timeoutMs = 20000;  // a mismatch that slipped through fails the test instead of hanging it
  return c;
}

// A device all-reduce through the engine (in place or not) and the same on the host; true if both succeed and agree.
bool deviceMatchesHost(CommImpl& comm, int r, size_t count, strataRedOp_t op, strataDataType_t dt = strataFloat32,
                       bool inPlace = false) {
  const size_t es = dtypeSize(dt);
  std::vector<char> in(count * es), dev(count * es), host(count * es);
  for (size_t i = 0; i < count; ++i) storeFromDouble(in.data(), i, dt, valueOf(r, i));
  if (inPlace) dev = in;
  CollCall d{CollKind::kAllReduce, inPlace ? dev.data() : in.data(), dev.data(), count, dt, op, 0, -1};
  d.device = true;
  d.stream = stream(r);
  CollCall h{CollKind::kAllReduce, in.data(), host.data(), count, dt, op, 0, -1};
  comm.runDevice(std::span<const CollCall>(&d, 1));
  comm.run(std::span<const CollCall>(&h, 1));
  return dev == host;
}

struct GpuSetting {
  const char* name;
  size_t Config::*field;
  size_t value;  // what one rank sets
};
const GpuSetting kGpuSettings[] = {
    {"STRATA_GPU_DIRECT_BYTES", &Config::gpuDirectMaxBytes, 65536},
    {"STRATA_GPU_DIRECT_BYTES", &Config::gpuDirectMaxBytes, 0},  // the path off on one rank only
    {"STRATA_GPU_ONESHOT_BYTES", &Config::gpuOneShotMaxBytes, 1024},
    {"STRATA_GPU_STAGE_CHUNK_BYTES", &Config::gpuStageChunkBytes, 4096},
    {"STRATA_GPU_CHANNELS", &Config::gpuChannels, 2},
};

// The device path's choices (direct or staged, one-shot or two-shot, round and chunk sizes) follow the STRATA_GPU_*
// settings, so ranks that differ would wait for each other's flags forever or combine different pieces. The first
// device all-reduce compares them: every rank fails it (and every later one) with InvalidUsage naming the setting,
// its own value and a rank that differs with that rank's value, and nothing is enqueued; host calls still work.
TEST(DeviceEngine, GpuSettingsThatDifferFailOnEveryRank) {
  Fixture f;
  constexpr int n = 3, odd = 2;  // rank 2 differs
  // `configs` differ at rank `odd`; expected(r, other) is rank r's message about rank `other`.
  auto expectRefused = [&](const std::vector<Config>& configs, const std::function<std::string(int, int)>& expected) {
    onConfiguredRanks(configs, [&](int r, CommImpl& comm) {
      const std::string want = expected(r, r == odd ? 0 : odd);
      for (size_t count : {1000, 70001}) {  // the first call compares; the second fails the same way
        try {
          deviceMatchesHost(comm, r, count, strataSum);
          ADD_FAILURE() << "rank " << r << ": " << want << ", yet a device all-reduce of " << count
                        << " floats was accepted";
        } catch (const InvalidUsage& e) {
          EXPECT_NE(std::string(e.what()).find(want), std::string::npos)
              << "rank " << r << ": " << e.what() << "\nexpected: " << want;
        }
      }
      // Nothing was enqueued: the communicator still runs host calls.
      std::vector<float> x(64, 1.0f), y(64, 0.0f);
      CollCall h{CollKind::kAllReduce, x.data(), y.data(), 64, strataFloat32, strataSum, 0, -1};
      comm.run(std::span<const CollCall>(&h, 1));
      EXPECT_EQ(y[63], static_cast<float>(n));
    });
  };
  for (const GpuSetting& s : kGpuSettings) {
    std::vector<Config> configs(n, gpuTestConfig());
    configs[odd].*s.field = s.value;
    expectRefused(configs, [&](int r, int other) {
      return strprintf("rank %d has %s=%zu but rank %d has %zu", r, s.name, configs[static_cast<size_t>(r)].*s.field,
                       other, configs[static_cast<size_t>(other)].*s.field);
    });
  }
  // A word setting: the protocol set the executor's FIFOs are laid out for.
  std::vector<Config> configs(n, gpuTestConfig());
  configs[odd].gpuLL128 = "on";
  expectRefused(configs, [&](int r, int other) {
    return strprintf("rank %d has STRATA_GPU_LL128=%s but rank %d has %s", r,
                     configs[static_cast<size_t>(r)].gpuLL128.c_str(), other,
                     configs[static_cast<size_t>(other)].gpuLL128.c_str());
  });
  EXPECT_EQ(f.api.reduces.load(), 0);  // no rank ran the direct path
}

// Equal settings, none of them the default, agree: direct one-shot and two-shot in 64 KiB rounds, staged chunks.
TEST(DeviceEngine, EqualGpuSettingsAgree) {
  Fixture f;
  std::vector<Config> configs(3, gpuTestConfig());
  for (const GpuSetting& s : kGpuSettings)
    if (s.value)
      for (Config& c : configs) c.*s.field = s.value;
  onConfiguredRanks(configs, [&](int r, CommImpl& comm) {
    for (size_t count : {100, 1000, 70001}) EXPECT_TRUE(deviceMatchesHost(comm, r, count, strataSum)) << count;
    EXPECT_TRUE(deviceMatchesHost(comm, r, 70001, strataAvg, strataInt32));  // staged in 4 KiB chunks
  });
  EXPECT_GT(f.api.reduces.load(), 0);
}

TEST(DeviceEngine, AvgAndPreMulSumAreStaged) {
  Fixture f;
  checkAllReduce(2, {9, 1000}, strataFloat32, strataAvg);
  EXPECT_EQ(f.api.reduces.load(), 0);
}

TEST(DeviceEngine, EveryCollectiveStagedInAndOutOfPlace) {
  Fixture f;
  constexpr int n = 3;
  constexpr size_t count = 1001;
  onRanks(n, [&](int r, strataComm_t comm) {
    std::vector<float> send(n * count), recv(n * count), hostRecv(n * count);
    for (size_t i = 0; i < send.size(); ++i) send[i] = static_cast<float>(valueOf(r, i));
    auto both = [&](auto call, const char* what) {
      std::fill(recv.begin(), recv.end(), -99.f);
      std::fill(hostRecv.begin(), hostRecv.end(), -99.f);
      ASSERT_EQ(call(send.data(), recv.data(), stream(r)), strataSuccess) << what << ": " << strataGetLastError(comm);
      ASSERT_EQ(call(send.data(), hostRecv.data(), nullptr), strataSuccess) << what;
      EXPECT_EQ(recv, hostRecv) << what << " on rank " << r;
    };
    both([&](float* s, float* d,
             void* st) { return strataReduceScatter(s, d, count, strataFloat32, strataSum, comm, st); },
         "reducescatter");
    both([&](float* s, float* d, void* st) { return strataAllGather(s, d, count, strataFloat32, comm, st); },
         "allgather");
    both([&](float* s, float* d, void* st) { return strataBroadcast(s, d, count, strataFloat32, 1, comm, st); },
         "broadcast");
    both([&](float* s, float* d, void* st) { return strataReduce(s, d, count, strataFloat32, strataMax, 2, comm, st); },
         "reduce");
    both([&](float* s, float* d, void* st) { return strataAllToAll(s, d, count, strataFloat32, comm, st); },
         "alltoall");
    both(
        [&](float* s, float* d, void* st) {
          strataGroupStart();
          strataSend(s, count, strataFloat32, (r + 1) % n, comm, st);
          strataRecv(d, count, strataFloat32, (r + n - 1) % n, comm, st);
          return strataGroupEnd();
        },
        "sendrecv");
    // In place: reduce-scatter into this rank's block, all-gather from it.
    std::vector<float> a = send, b = send;
    ASSERT_EQ(strataReduceScatter(a.data(), a.data() + r * count, count, strataFloat32, strataSum, comm, stream(r)),
              strataSuccess);
    ASSERT_EQ(strataReduceScatter(b.data(), b.data() + r * count, count, strataFloat32, strataSum, comm, nullptr),
              strataSuccess);
    EXPECT_TRUE(std::equal(a.begin() + r * count, a.begin() + (r + 1) * count, b.begin() + r * count));
    ASSERT_EQ(strataAllGather(a.data() + r * count, a.data(), count, strataFloat32, comm, stream(r)), strataSuccess);
    ASSERT_EQ(strataAllGather(b.data() + r * count, b.data(), count, strataFloat32, comm, nullptr), strataSuccess);
    EXPECT_EQ(a, b);
    ASSERT_EQ(strataBarrier(comm, stream(r)), strataSuccess);
  });
}

// One rank: every collective is a device copy (or nothing), except PreMulSum, which is staged.
TEST(DeviceEngine, OneRankCopies) {
  Fixture f;
  checkAllReduce(1, {0, 1, 1001}, strataFloat32, strataSum);
  checkAllReduce(1, {1001}, strataInt32, strataAvg);
  onRanks(1, [&](int, strataComm_t comm) {
    std::vector<float> x(64, 3.0f), y(64, 0.0f), z(64, 0.0f);
    EXPECT_EQ(strataAllGather(x.data(), y.data(), 64, strataFloat32, comm, stream(0)), strataSuccess);
    EXPECT_EQ(y, x);
    EXPECT_EQ(strataBroadcast(x.data(), z.data(), 64, strataFloat32, 0, comm, stream(0)), strataSuccess);
    EXPECT_EQ(z, x);
    float two = 2.0f;
    strataRedOp_t op;
    ASSERT_EQ(strataRedOpCreatePreMulSum(&op, &two, strataFloat32, strataScalarHostImmediate, comm), strataSuccess);
    EXPECT_EQ(strataAllReduce(x.data(), y.data(), 64, strataFloat32, op, comm, stream(0)), strataSuccess);
    EXPECT_EQ(y[63], 6.0f);  // staged: the host path pre-multiplies
    EXPECT_EQ(strataRedOpDestroy(op, comm), strataSuccess);
  });
  EXPECT_EQ(f.api.reduces.load(), 0);
}

TEST(DeviceEngine, CaptureAndMixedGroupsAreRefused) {
  Fixture f;
  onRanks(1, [&](int, strataComm_t comm) {
    float x[4] = {1, 2, 3, 4}, y[4];
    // One rank: a captured collective is a device copy in the graph, done at each replay.
    f.api.beginCapture(stream(0));
    EXPECT_EQ(strataAllReduce(x, y, 4, strataFloat32, strataSum, comm, stream(0)), strataSuccess)
        << strataGetLastError(comm);
    const FakeCudaApi::Graph g = f.api.endCapture(stream(0));
    EXPECT_EQ(g.size(), 1u);
    FakeCudaApi::replay(g);
    EXPECT_EQ(y[3], 4.0f);
    // PreMulSum on one rank is staged through host threads, which a graph cannot capture: refused, saying so.
    float two = 2.0f;
    strataRedOp_t op;
    ASSERT_EQ(strataRedOpCreatePreMulSum(&op, &two, strataFloat32, strataScalarHostImmediate, comm), strataSuccess);
    f.api.beginCapture(stream(0));
    EXPECT_EQ(strataAllReduce(x, y, 4, strataFloat32, op, comm, stream(0)), strataInvalidUsage);
    EXPECT_NE(std::string(strataGetLastError(comm)).find("CUDA graph"), std::string::npos);
    EXPECT_TRUE(f.api.endCapture(stream(0)).empty());
    EXPECT_EQ(strataRedOpDestroy(op, comm), strataSuccess);
    // One group, two streams.
    strataGroupStart();
    strataAllReduce(x, y, 4, strataFloat32, strataSum, comm, stream(0));
    strataAllReduce(x, y, 4, strataFloat32, strataSum, comm, stream(1));
    EXPECT_EQ(strataGroupEnd(), strataInvalidUsage);
    EXPECT_NE(std::string(strataGetLastError(nullptr)).find("one CUDA stream"), std::string::npos);
    // One group, host and device buffers.
    strataGroupStart();
    strataAllReduce(x, y, 4, strataFloat32, strataSum, comm, stream(0));
    strataAllReduce(x, y, 4, strataFloat32, strataSum, comm, nullptr);
    EXPECT_EQ(strataGroupEnd(), strataInvalidUsage);
    EXPECT_NE(std::string(strataGetLastError(nullptr)).find("mixes host buffers and device buffers"),
              std::string::npos);
    // Still usable.
    EXPECT_EQ(strataAllReduce(x, y, 4, strataFloat32, strataSum, comm, stream(0)), strataSuccess);
    EXPECT_EQ(y[3], 4.0f);
  });
}

// The engine works on the device of the caller's stream, not on the thread's current device: here every rank's
// thread has device 0 current and its stream and buffers are on device 1. The engine's events must be created on
// device 1 (CUDA refuses to record an event on another device's stream), the thread's current device is left as
// it was, and a call on a third device is refused with a clear error.
TEST(DeviceEngine, UsesTheStreamsDeviceNotTheCurrentOne) {
  Fixture f;
  f.api.multiDevice = true;
  checkAllReduce(2, {7, 70001}, strataFloat32, strataSum);  // one-shot, two-shot
  onRanks(2, [&](int r, strataComm_t comm) {
    std::vector<float> x(64, 1.0f), y(128, 0.0f);
    EXPECT_EQ(strataAllGather(x.data(), y.data(), 64, strataFloat32, comm, stream(r)), strataSuccess)
        << strataGetLastError(comm);  // staged
    EXPECT_EQ(tCurrentDevice, 0);
    EXPECT_EQ(strataAllReduce(x.data(), y.data(), 64, strataFloat32, strataSum, comm, kOtherDeviceStream),
              strataInvalidUsage);
    EXPECT_NE(std::string(strataGetLastError(comm)).find("one device per rank"), std::string::npos)
        << strataGetLastError(comm);
    EXPECT_EQ(strataAllReduce(x.data(), y.data(), 64, strataFloat32, strataSum, comm, stream(r)), strataSuccess);
    EXPECT_EQ(y[0], 2.0f);
  });
  f.api.multiDevice = false;
}

// ---- across hosts: the hierarchical all-reduce ------------------------------------------------------------------

// Ranks on several hosts (STRATA_HOSTID per rank: rank r on host hostOf[r]), each with this process's settings.
std::vector<Config> hostConfigs(const std::vector<int>& hostOf) {
  std::vector<Config> configs;
  for (int h : hostOf) {
    Config c = gpuTestConfig();
    c.hostId = "host" + std::to_string(h);
    configs.push_back(c);
  }
  return configs;
}

// A device reduce-scatter or all-gather of `count` per rank through the engine (in place as NCCL lays it out, or not)
// and the same on the host; true if both succeed and agree.
bool deviceBlocksMatchHost(CommImpl& comm, int r, CollKind kind, size_t count, strataRedOp_t op, strataDataType_t dt,
                           bool inPlace) {
  const size_t es = dtypeSize(dt), n = static_cast<size_t>(comm.size()), ur = static_cast<size_t>(r);
  const size_t sendN = kind == CollKind::kReduceScatter ? count * n : count;
  const size_t recvN = kind == CollKind::kAllGather ? count * n : count;
  const size_t areaN = std::max(sendN, recvN);
  std::vector<char> dev(2 * areaN * es), host(2 * areaN * es);
  auto issue = [&](std::vector<char>& a, bool device) {
    char* send = inPlace ? a.data() : a.data() + areaN * es;
    char* recv = a.data();
    if (inPlace && kind == CollKind::kAllGather) send = a.data() + ur * count * es;
    if (inPlace && kind == CollKind::kReduceScatter) recv = a.data() + ur * count * es;
    for (size_t i = 0; i < sendN; ++i) storeFromDouble(send, i, dt, valueOf(r, i));
    CollCall c{kind, send, recv, count, dt, op, 0, -1};
    c.device = device;
    c.stream = device ? stream(r) : nullptr;
    if (device) comm.runDevice(std::span<const CollCall>(&c, 1));
    else comm.run(std::span<const CollCall>(&c, 1));
    return recv;
  };
  const char* d = issue(dev, true);
  const char* h = issue(host, false);
  return std::memcmp(d, h, recvN * es) == 0;
}

// Across hosts of L ranks each, a device all-reduce runs its intra-host phases (reduce-scatter, all-gather) in the
// executor and stages only each rank's 1/L shard between hosts, in pieces that pipeline; a reduce-scatter and an
// all-gather regroup their blocks by rail and stage only the rail's part. Bit for bit the host path's result (small
// integers, exact in any order), for counts below L, not divisible by L and of many pieces.
TEST(DeviceEngine, ExecutorAcrossHostsStagesOnlyTheShard) {
  Fixture f;
  ExecutorOn on;
  setenv("STRATA_GPU_STAGE_CHUNK_BYTES", "1024", 1);  // 4 KiB of shard per piece: many pieces
  struct Combo {
    strataDataType_t dt;
    strataRedOp_t op;
  };
  // Avg of a float type and PreMulSum (a scalar per rank) pre-multiply in the first phase; an integer Avg is staged
  // whole (it divides the whole sum). Float Avg only where 1/n is exact (n = 4): the phases sum in another order.
  const Combo combos[] = {{strataFloat32, strataSum},  {strataInt32, strataMax},    {strataBfloat16, strataMin},
                          {strataFloat32, strataProd}, {strataInt64, strataAvg},    {strataFloat32, strataAvg},
                          {strataBfloat16, strataAvg}, {strataFloat32, kPreMulSum}, {strataInt32, kPreMulSum}};
  // Two hosts, ranks interleaved; three hosts of two in blocks.
  for (const std::vector<int>& hostOf : {std::vector<int>{0, 1, 0, 1}, std::vector<int>{0, 0, 1, 1, 2, 2}}) {
    const int n = static_cast<int>(hostOf.size());
    const int launchesBefore = f.api.executorLaunches.load();
    std::atomic<int> wrong{0};
    onConfiguredRanks(hostConfigs(hostOf), [&](int r, CommImpl& comm) {
      for (CollKind kind : {CollKind::kAllReduce, CollKind::kReduceScatter, CollKind::kAllGather})
        for (size_t count : {size_t{1}, size_t{3}, size_t{4096}, size_t{20001}})
          for (const Combo& c : combos)
            for (bool inPlace : {false, true}) {
              if (c.op == strataAvg && dtypeIsFloat(c.dt) && n != 4) continue;
              if (kind == CollKind::kAllGather && c.op != strataSum && c.op != strataMax && c.op != strataMin) continue;
              if (kind != CollKind::kAllReduce && count == 20001 && c.dt != strataFloat32) continue;
              const strataRedOp_t op =
                  c.op == kPreMulSum ? comm.createPreMulSum(0.5 + r, 3 - 2 * static_cast<int64_t>(r)) : c.op;
              const bool same = kind == CollKind::kAllReduce
                                    ? deviceMatchesHost(comm, r, count, op, c.dt, inPlace)
                                    : deviceBlocksMatchHost(comm, r, kind, count, op, c.dt, inPlace);
              if (!same) {
                ++wrong;
                ADD_FAILURE() << collName(kind) << " rank " << r << " of " << n << ": count " << count << " "
                              << dtypeName(c.dt) << " op " << c.op << (inPlace ? " in place" : " out of place");
              }
              if (op != c.op) comm.destroyRedOp(op);
            }
      EXPECT_EQ(comm.asyncError(), strataSuccess) << "rank " << r;
    });
    EXPECT_EQ(wrong.load(), 0);
    EXPECT_GT(f.api.executorLaunches.load(), launchesBefore) << "the intra-host phases ran in the executor";
  }

  // What crosses host memory: one call of B bytes on two hosts of two. Staged whole, every rank would copy B in and B
  // out; hierarchically, its shard of B/2 each way. The call after the first (whose plans are then cached).
  constexpr size_t kCount = 70000;  // 35000 floats of shard per rank: 35 pieces of 4 KiB
  constexpr int n = 4;
  std::vector<std::vector<float>> in(n, std::vector<float>(kCount)), out(n, std::vector<float>(kCount));
  std::vector<std::vector<float>> avg(n, std::vector<float>(kCount));
  // Copied to or from pinned host memory by the second of two calls (all ranks).
  size_t sumBytes = 0, avgBytes = 0, rsBytes = 0, agBytes = 0;
  constexpr size_t kBlock = 5000;
  std::vector<std::vector<float>> blocks(n, std::vector<float>(n * kBlock));
  onConfiguredRanks(hostConfigs({0, 1, 0, 1}), [&](int r, CommImpl& comm) {
    for (size_t i = 0; i < kCount; ++i) in[r][i] = static_cast<float>(valueOf(r, i));
    // A warm-up call, then the measured one (the sum's stream operations logged); rank 0 reads the counters between
    // barriers.
    auto measure = [&](CollCall d, bool log, size_t* bytes) {
      comm.runDevice(std::span<const CollCall>(&d, 1));
      comm.barrier();
      if (r == 0) {
        *bytes = f.api.stagedBytes.load();
        f.api.logging = log;
      }
      comm.barrier();
      comm.runDevice(std::span<const CollCall>(&d, 1));
      comm.barrier();
      if (r == 0) {
        *bytes = f.api.stagedBytes.load() - *bytes;
        f.api.logging = false;
      }
      comm.barrier();
    };
    CollCall d{CollKind::kAllReduce, in[r].data(), out[r].data(), kCount, strataFloat32, strataSum, 0, -1};
    d.device = true;
    d.stream = stream(r);
    measure(d, true, &sumBytes);
    // A float Avg (pre-multiplied by 1/4 in the host phase) crosses as its shard too.
    d.op = strataAvg;
    d.recvbuff = avg[r].data();
    measure(d, false, &avgBytes);
    // A reduce-scatter and an all-gather of kBlock per rank: H kBlock in and kBlock out, or the reverse.
    d = CollCall{CollKind::kReduceScatter, in[r].data(), blocks[r].data(), kBlock, strataFloat32, strataSum, 0, -1};
    d.device = true;
    d.stream = stream(r);
    measure(d, false, &rsBytes);
    d.kind = CollKind::kAllGather;
    measure(d, false, &agBytes);
  });
  unsetenv("STRATA_GPU_STAGE_CHUNK_BYTES");
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < kCount; ++i) {
      const double sum = valueOf(0, i) + valueOf(1, i) + valueOf(2, i) + valueOf(3, i);
      ASSERT_EQ(out[r][i], static_cast<float>(sum));
      ASSERT_EQ(avg[r][i], static_cast<float>(sum / 4));
    }
  EXPECT_EQ(sumBytes, n * 2 * (kCount / 2) * sizeof(float))
      << "each rank stages its half of the call (in and out), not all of it";
  EXPECT_EQ(avgBytes, n * 2 * (kCount / 2) * sizeof(float)) << "avg: staged whole";
  // Staged whole: n + 1 blocks per rank. Hierarchically: H + 1 = 3.
  EXPECT_EQ(rsBytes, n * 3 * kBlock * sizeof(float)) << "reduce-scatter: more than the rail's blocks staged";
  EXPECT_EQ(agBytes, n * 3 * kBlock * sizeof(float)) << "all-gather: more than the rail's blocks staged";
  // The pipeline, on each rank's stream: the reduce-scatter of piece 1 is launched before the stream waits for
  // piece 0's cross-host phase (an event recorded on another stream), and the shards cross on other streams.
  for (int r = 0; r < n; ++r) {
    std::map<const void*, void*> recordedOn;  // event -> the stream of its latest record
    int kernels = 0, kernelsBeforeFirstWait = -1, shardCopies = 0;
    for (const auto& o : f.api.opLog) {
      if (o.op == 'r') recordedOn[o.a] = o.stream;
      if (o.stream == stream(r) && o.op == 'k') ++kernels;
      if (o.stream == stream(r) && o.op == 'e' && kernelsBeforeFirstWait < 0 && recordedOn.count(o.a) &&
          recordedOn[o.a] != stream(r))
        kernelsBeforeFirstWait = kernels;
      const auto inside = [&](const void* p) {
        return p >= static_cast<const void*>(out[r].data()) && p < static_cast<const void*>(out[r].data() + kCount);
      };
      if (o.op == 'c' && (inside(o.a) || inside(o.b))) {
        ++shardCopies;
        EXPECT_NE(o.stream, stream(r)) << "rank " << r << ": a shard staged on the caller's stream";
      }
    }
    EXPECT_EQ(kernels, 2 * 35) << "rank " << r << ": a reduce-scatter and an all-gather per piece";
    EXPECT_EQ(kernelsBeforeFirstWait, 2) << "rank " << r << ": piece 1 is reduce-scattered while piece 0 crosses";
    EXPECT_EQ(shardCopies, 2 * 35 * 4) << "rank " << r << ": each piece's shard staged in and out, in 4 chunks";
  }
}

// Hosts with different numbers of ranks, or one rank per host: device all-reduces, reduce-scatters and all-gathers are
// staged whole, and right.
TEST(DeviceEngine, ExecutorAcrossUnevenHostsIsStagedWhole) {
  Fixture f;
  ExecutorOn on;
  for (const std::vector<int>& hostOf : {std::vector<int>{0, 0, 1}, std::vector<int>{0, 1}}) {
    const size_t before = f.api.stagedBytes.load();
    const int n = static_cast<int>(hostOf.size());
    onConfiguredRanks(hostConfigs(hostOf), [&](int r, CommImpl& comm) {
      EXPECT_TRUE(deviceMatchesHost(comm, r, 1001, strataSum)) << "rank " << r;
      EXPECT_TRUE(deviceBlocksMatchHost(comm, r, CollKind::kReduceScatter, 7, strataSum, strataFloat32, false));
      EXPECT_TRUE(deviceBlocksMatchHost(comm, r, CollKind::kAllGather, 7, strataSum, strataFloat32, true));
    });
    // The all-reduce's 1001 floats in and out; the reduce-scatter's n + 1 blocks; the in-place all-gather's n blocks
    // in (its send block lies inside them) and out.
    EXPECT_EQ(f.api.stagedBytes.load() - before,
              static_cast<size_t>(n) * (2 * 1001 + (n + 1) * 7 + 2 * n * 7) * sizeof(float));
  }
}

// A device call across hosts is not captured: its cross-host phase runs on the host (the shard staged through host
// memory and sent by the communicator's worker, per call), which a CUDA graph cannot replay. The refusal says so,
// leaves nothing in the graph, and the same call outside the capture still runs hierarchically.
TEST(DeviceEngine, CaptureAcrossHostsIsRefusedSayingWhy) {
  Fixture f;
  ExecutorOn on;
  onConfiguredRanks(hostConfigs({0, 0, 1, 1}), [&](int r, CommImpl& comm) {
    EXPECT_TRUE(deviceMatchesHost(comm, r, 1001, strataSum)) << "rank " << r;  // sets the executor up
    std::vector<float> x(1001, 1.0f), y(1001, 0.0f);
    CollCall c{CollKind::kAllReduce, x.data(), y.data(), x.size(), strataFloat32, strataSum, 0, -1};
    c.device = true;
    c.stream = stream(r);
    f.api.beginCapture(c.stream);
    try {
      comm.runDevice(std::span<const CollCall>(&c, 1));
      ADD_FAILURE() << "rank " << r << ": a captured all-reduce across hosts was accepted";
    } catch (const InvalidUsage& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("CUDA graph"), std::string::npos) << msg;
      EXPECT_NE(msg.find("across hosts"), std::string::npos) << msg;
      EXPECT_NE(msg.find("cannot replay"), std::string::npos) << msg;
    }
    EXPECT_TRUE(f.api.endCapture(c.stream).empty()) << "a refused call left work in the graph";
    EXPECT_TRUE(deviceMatchesHost(comm, r, 1001, strataSum)) << "rank " << r << " after the refusal";
  });
}

// A hierarchical call that waits for a peer that never comes ends on every waiting rank, whether in a host kernel or
// in the cross-host phase: by strataCommAbort within 2 s, or by the deadline, and then the failure of the
// sub-communicator where it happened is the communicator's asynchronous error.
TEST(DeviceEngine, ExecutorAcrossHostsLeavesOnAbortAndOnTheDeadline) {
  Fixture f;
  ExecutorOn on;
  for (const bool abortIt : {true, false}) {
    constexpr int n = 4;
    std::vector<Config> configs = hostConfigs({0, 1, 0, 1});
    for (Config& c : configs) c.timeoutMs = abortIt ? 20000 : 1000;
    strataUniqueId id;
    ASSERT_EQ(strataGetUniqueId(&id), strataSuccess);
    const UniqueIdInfo info = decodeUniqueId(id);
    std::vector<std::shared_ptr<CommImpl>> comms(n);
    std::vector<double> took(n, -1);
    std::vector<strataResult_t> async(n, strataSuccess);
    std::atomic<int> ready{0};
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r)
      threads.emplace_back([&, r] {
        strata::test::LeakExpected leaks;  // an aborted or failed executor leaves its FIFOs allocated on purpose
        const Config& c = configs[static_cast<size_t>(r)];
        comms[static_cast<size_t>(r)] = CommImpl::create(c, Bootstrap::connect(c, info, r, n));
        CommImpl& comm = *comms[static_cast<size_t>(r)];
        std::vector<float> x(100000, 1.0f), y(100000);
        CollCall d{CollKind::kAllReduce, x.data(), y.data(), 1000, strataFloat32, strataSum, 0, -1};
        d.device = true;
        d.stream = stream(r);
        comm.runDevice(std::span<const CollCall>(&d, 1));  // together first: everything set up
        comm.barrier();  // every rank's first call done before the deadline can run out on any
        ++ready;
        if (r == n - 1) return;  // the peer that never comes to the second call
        while (ready.load() < n) std::this_thread::yield();
        d.count = x.size();
        const auto t0 = std::chrono::steady_clock::now();
        try {
          comm.runDevice(std::span<const CollCall>(&d, 1));
        } catch (const Error&) {
        }
        took[static_cast<size_t>(r)] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (!abortIt) {
          // The error arrives asynchronously (a stream's host function, a peer's report): within the deadline.
          const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
          while (comm.asyncError() == strataSuccess && std::chrono::steady_clock::now() < until)
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
          async[static_cast<size_t>(r)] = comm.asyncError();
        }
      });
    while (ready.load() < n) std::this_thread::yield();
    if (abortIt) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      for (int r = 0; r < n - 1; ++r) comms[static_cast<size_t>(r)]->abort();
    }
    for (auto& t : threads) t.join();
    for (int r = 0; r < n - 1; ++r) {
      EXPECT_GT(took[static_cast<size_t>(r)], 0.2) << "rank " << r << " did not wait";
      EXPECT_LT(took[static_cast<size_t>(r)], abortIt ? 2.3 : 8.0)
          << "rank " << r << (abortIt ? ": the abort" : ": the deadline") << " took " << took[static_cast<size_t>(r)]
          << " s to end its call";
      if (!abortIt) {
        EXPECT_TRUE(async[static_cast<size_t>(r)] == strataTimeout ||
                    async[static_cast<size_t>(r)] == strataRemoteError)
            << "rank " << r << ": asynchronous error " << async[static_cast<size_t>(r)];
      }
    }
    for (auto& c : comms) c->abort();
  }
}

// strataCommAbort with device work that never finishes (a stream stuck on a dead peer): the engine leaks what the
// GPU still holds instead of waiting for the whole STRATA_TIMEOUT_MS.
TEST(DeviceEngine, AbortDoesNotWaitForStuckDeviceWork) {
  Fixture f;
  setenv("STRATA_TIMEOUT_MS", "60000", 1);
  strataUniqueId id;
  ASSERT_EQ(strataGetUniqueId(&id), strataSuccess);
  strataComm_t comm = nullptr;
  ASSERT_EQ(strataCommInitRank(&comm, 1, id, 0), strataSuccess);
  unsetenv("STRATA_TIMEOUT_MS");
  std::vector<float> x(64, 1.0f), y(64, 0.0f);
  float two = 2.0f;
  strataRedOp_t op;
  ASSERT_EQ(strataRedOpCreatePreMulSum(&op, &two, strataFloat32, strataScalarHostImmediate, comm), strataSuccess);
  {
    strata::test::LeakExpected leaks;  // the slot this call makes is what abort leaves to the stuck device
    ASSERT_EQ(strataAllReduce(x.data(), y.data(), 64, strataFloat32, op, comm, stream(0)), strataSuccess);  // staged
  }
  EXPECT_EQ(y[0], 2.0f);
  f.api.stuck = true;
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(strataCommAbort(comm), strataSuccess);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  f.api.stuck = false;
  EXPECT_LT(s, 10.0) << "abort waited for the device deadline";
}

}  // namespace
}  // namespace strata
