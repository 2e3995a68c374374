// The C ABI: argument checks, exception-to-status translation, groups and the communicator registry.
#include <pthread.h>
#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <iterator>
#include <mutex>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>

#include "bootstrap/bootstrap.h"
#include "core/c_api_internal.h"
#include "core/communicator.h"
#include "kernels/cuda_loader.h"
#include "kernels/reduce.h"
#include "strata/strata.h"
#include "util/error.h"
#include "util/log.h"

struct strataComm {
  std::shared_ptr<strata::CommImpl> impl;
  std::atomic<int> held{0};  // API calls using this handle now (strata::Held); release() frees it at 0
  std::mutex errorMutex;
  std::string lastError;
  uint64_t lastErrorSeq = 0;    // when lastError was recorded, in gErrorSeq's order
  uint32_t forkGeneration = 0;  // gForkGeneration when created: another value means this process is a forked child
  pid_t creator = 0;            // the process that created it
};

struct strataWork {
  std::vector<std::shared_ptr<strata::Task>> tasks;
  std::atomic<bool> failureRecorded{false};  // strataWorkTest records a failure once, not on every poll
  uint32_t forkGeneration = 0;
};

namespace strata {
namespace {

thread_local std::string tLastError;
thread_local uint64_t tLastErrorSeq = 0;
// Orders every recorded error, so strataGetLastError(comm) can return the newer of the calling thread's
// last error and the communicator's (which an asynchronous failure on its worker thread may have set).
std::atomic<uint64_t> gErrorSeq{0};

// Live communicators: calls on anything else (destroyed or garbage) get strataInvalidUsage, not a crash.
std::mutex gRegistryMutex;
std::unordered_set<strataComm*>& registry() {
  static auto* s = new std::unordered_set<strataComm*>();
  return *s;
}

// Live work handles (strataGroupEndAsync), owned here: a freed or garbage handle is refused, and a thread
// still waiting on work another thread frees keeps it alive until it returns.
std::mutex gWorkMutex;
std::unordered_map<strataWork*, std::shared_ptr<strataWork>>& workRegistry() {
  static auto* s = new std::unordered_map<strataWork*, std::shared_ptr<strataWork>>();
  return *s;
}

// Threads between "is the handle live?" and counting themselves in its `held`: release() frees a handle only
// once it has seen none, so no thread can count itself in freed memory.
std::atomic<int> gEntering{0};

// Bumped in the child of every fork(). A communicator made before the fork belongs to the parent: its shm
// slots, sockets and progress threads are the parent's (the threads do not even exist in the child), so
// the child is refused every call on it, as NCCL refuses a communicator used after fork.
std::atomic<uint32_t> gForkGeneration{0};

// The registries' locks are taken around fork() so that the child never inherits one held by a thread that
// does not exist there; the child also forgets the parent's threads that were entering a call.
void lockRegistriesForFork() {
  gRegistryMutex.lock();
  gWorkMutex.lock();
}
void unlockRegistriesAfterFork() {
  gWorkMutex.unlock();
  gRegistryMutex.unlock();
}
void startForkedChild() {
  gForkGeneration.fetch_add(1);
  gEntering.store(0);
  unlockRegistriesAfterFork();
}
[[maybe_unused]] const int gAtFork = pthread_atfork(lockRegistriesForFork, unlockRegistriesAfterFork, startForkedChild);

// Bumped whenever a communicator leaves the registry. A thread that found a handle live remembers it with
// the epoch; while no communicator has been destroyed since, the same handle is still live, and the next
// call skips the lock and the lookup (a training loop calls with the same communicator every time).
std::atomic<uint64_t> gRegistryEpoch{1};
struct LiveCache {
  strataComm* comm = nullptr;
  uint64_t epoch = 0;
};
thread_local LiveCache tLive;

bool isLive(strataComm* c) {
  if (!c) return false;
  LiveCache& cache = tLive;
  // Sequentially consistent: Held relies on this load being ordered after its gEntering increment.
  if (cache.comm == c && cache.epoch == gRegistryEpoch.load()) return true;
  std::lock_guard<std::mutex> lk(gRegistryMutex);
  if (!registry().count(c)) return false;
  cache.comm = c;
  cache.epoch = gRegistryEpoch.load(std::memory_order_relaxed);
  return true;
}

/// A handle in use by one API call, from construction to destruction: strataCommDestroy or strataCommAbort on
/// another thread does not free it meanwhile. False if the handle is not live (NULL, destroyed, garbage) or
/// was inherited through fork(); refuse() says which.
class Held {
 public:
  explicit Held(strataComm* c) {
    gEntering.fetch_add(1);
    if (isLive(c)) {
      if (c->forkGeneration != gForkGeneration.load(std::memory_order_relaxed)) {
        inherited_ = c;
      } else {
        c->held.fetch_add(1);
        comm_ = c;
      }
    }
    gEntering.fetch_sub(1);
  }
  ~Held() {
    if (comm_) comm_->held.fetch_sub(1, std::memory_order_release);
  }
  Held(const Held&) = delete;
  Held& operator=(const Held&) = delete;
  explicit operator bool() const { return comm_ != nullptr; }
  /// Records and returns the error for a call `what` on a handle that is not held.
  strataResult_t refuse(const char* what) const;

 private:
  strataComm* comm_ = nullptr;
  strataComm* inherited_ = nullptr;  // live, but created in the parent of this forked process
};

/// Waits until no API call holds `c` (taken out of the registry already: no new call can hold it).
void waitUnheld(strataComm* c) {
  while (gEntering.load() != 0 || c->held.load(std::memory_order_acquire) != 0) {
    timespec ts{0, 50000};
    nanosleep(&ts, nullptr);
  }
}

/// Takes a communicator out of the registry; false if it was not there (never created, or already
/// destroyed, perhaps by another thread a moment ago).
bool unregister(strataComm* c) {
  std::lock_guard<std::mutex> lk(gRegistryMutex);
  if (!c || !registry().erase(c)) return false;
  gRegistryEpoch.fetch_add(1);
  return true;
}

strataResult_t record(strataComm* comm, strataResult_t code, const std::string& msg) {
  const uint64_t seq = gErrorSeq.fetch_add(1, std::memory_order_relaxed) + 1;
  tLastError = msg;
  tLastErrorSeq = seq;
  if (comm && isLive(comm)) {
    std::lock_guard<std::mutex> lk(comm->errorMutex);
    comm->lastError = msg;
    comm->lastErrorSeq = seq;
  }
  STRATA_WARN(kLogAll, "%s: %s", strataGetErrorString(code), msg.c_str());
  return code;
}

std::string inheritedMessage(const char* what, pid_t creator) {
  return strprintf(
      "%s: the communicator was created by process %d, and this is process %d, forked from it: a forked child "
      "cannot use its parent's communicators (create its own with a new unique id, or start workers with spawn "
      "instead of fork)",
      what, static_cast<int>(creator), static_cast<int>(getpid()));
}

strataResult_t Held::refuse(const char* what) const {
  if (inherited_) return record(nullptr, strataInvalidUsage, inheritedMessage(what, inherited_->creator));
  return record(nullptr, strataInvalidUsage,
                strprintf("%s: invalid communicator (NULL, destroyed, or never initialised)", what));
}

template <typename F>
strataResult_t guarded(strataComm* comm, F&& f) {
  try {
    f();
    return strataSuccess;
  } catch (const Error& e) {
    return record(comm, e.code(), e.what());
  } catch (const std::bad_alloc&) {
    return record(comm, strataSystemError, "out of memory");
  } catch (const std::exception& e) {
    return record(comm, strataInternalError, e.what());
  }
}

// ---- groups -------------------------------------------------------------------------------------------

struct GroupState {
  int depth = 0;
  std::vector<std::pair<std::shared_ptr<CommImpl>, CollCall>> calls;
  strataResult_t error = strataSuccess;
  std::string errorMessage;
};
thread_local GroupState tGroup;

// Runs the calls of a finished group: one batch per communicator, in first-use order.
std::vector<std::shared_ptr<Task>> launchGroup(std::vector<std::pair<std::shared_ptr<CommImpl>, CollCall>> calls,
                                               bool async) {
  std::vector<std::pair<std::shared_ptr<CommImpl>, std::vector<CollCall>>> batches;
  for (auto& [comm, call] : calls) {
    auto it = std::find_if(batches.begin(), batches.end(), [&](auto& b) { return b.first == comm; });
    if (it == batches.end()) {
      batches.emplace_back(comm, std::vector<CollCall>{});
      it = batches.end() - 1;
    }
    it->second.push_back(call);
  }
  std::vector<std::shared_ptr<Task>> tasks;
  // Device batches are enqueued on their stream and never block the host, so they need no task.
  for (auto it = batches.begin(); it != batches.end();) {
    const bool anyDevice =
        std::any_of(it->second.begin(), it->second.end(), [](const CollCall& c) { return c.device; });
    if (!anyDevice) {
      ++it;
      continue;
    }
    if (!std::all_of(it->second.begin(), it->second.end(), [](const CollCall& c) { return c.device; }))
      throw InvalidUsage(
          strprintf("rank %d: a group mixes host buffers and device buffers on one communicator", it->first->rank()));
    it->first->runDevice(it->second);
    it = batches.erase(it);
  }
  if (batches.empty()) return tasks;
  if (!async && batches.size() == 1) {
    batches[0].first->run(batches[0].second);
    return tasks;
  }
  // Several communicators (or async): each runs on its own worker so that none waits on another.
  for (auto& [comm, batch] : batches) tasks.push_back(comm->submit(std::move(batch)));
  return tasks;
}

// A call is a device call when it passes a CUDA stream, or when a buffer is device memory (NCCL's callers
// often pass stream 0, the legacy default stream). The pointer check never loads CUDA: while the process has
// not loaded the CUDA driver no pointer can be device memory, so host callers pay one cheap check.
void classify(CollCall& call, strataStream_t stream) {
  if (stream) {
    cudaApi();  // throws CudaError naming why CUDA cannot be used (no driver, no device, no CUDA build)
    call.device = true;
    call.stream = stream;
    return;
  }
  // One driver check per call (it walks the loader's list head), then the pointers.
  if (!cudaDriverLoaded()) return;
  if (devicePointerOwner(call.sendbuff) >= 0 || devicePointerOwner(call.recvbuff) >= 0) {
    call.device = true;
    call.stream = nullptr;
  }
}

// The value a caller passed for an enum parameter, read as bytes: a C caller may pass any int, and loading an
// out-of-range value as the enum type is undefined in C++ (UBSan: "not a valid value for type"), so every
// enum from the ABI is checked through this before it is used as an enum.
template <typename E>
int rawEnum(const E& e) {
  std::underlying_type_t<E> v;
  std::memcpy(&v, &e, sizeof(v));
  return static_cast<int>(v);
}

strataResult_t checkDtype(const char* what, strataComm* comm, const strataDataType_t& datatype) {
  const int raw = rawEnum(datatype);
  if (dtypeValid(raw)) return strataSuccess;
  return record(comm, strataInvalidArgument, strprintf("%s: invalid datatype %d", what, raw));
}

strataResult_t issue(const char* what, strataComm* comm, CollCall call, strataStream_t stream) {
  Held held(comm);
  if (!held) return held.refuse(what);
  return guarded(comm, [&] {
    classify(call, stream);
    // The one validation of the call: a group member's error belongs to it, not to strataGroupEnd, and device
    // work, which completes later on the stream, reports bad arguments now.
    comm->impl->validate(call);
    if (tGroup.depth > 0) {
      tGroup.calls.emplace_back(comm->impl, call);
    } else if (call.device) {
      comm->impl->runDevice(std::span<const CollCall>(&call, 1));
    } else {
      comm->impl->run(std::span<const CollCall>(&call, 1));
    }
  });
}

}  // namespace
}  // namespace strata

using namespace strata;

extern "C" {

const char* strataGetErrorString(strataResult_t r) {
  switch (r) {
    case strataSuccess: return "no error";
    case strataUnhandledCudaError: return "unhandled cuda error (run with STRATA_DEBUG=WARN for details)";
    case strataSystemError: return "unhandled system error (run with STRATA_DEBUG=WARN for details)";
    case strataInternalError: return "internal error - please report this issue to the Strata developers";
    case strataInvalidArgument: return "invalid argument (run with STRATA_DEBUG=WARN for details)";
    case strataInvalidUsage: return "invalid usage (run with STRATA_DEBUG=WARN for details)";
    case strataRemoteError: return "remote process exited or there was a network error";
    case strataInProgress: return "Strata operation in progress";
    case strataTimeout: return "operation timed out (STRATA_TIMEOUT_MS)";
    default: return "unknown result code";
  }
}

const char* strataGetLastError(strataComm_t comm) {
  Held held(comm);
  if (held) {
    std::lock_guard<std::mutex> lk(comm->errorMutex);
    if (comm->lastErrorSeq > tLastErrorSeq) {
      tLastError = comm->lastError;
      tLastErrorSeq = comm->lastErrorSeq;
    }
  }
  return tLastError.c_str();
}

strataResult_t strataGetVersion(int* version) {
  if (!version) return record(nullptr, strataInvalidArgument, "strataGetVersion: version is NULL");
  *version = STRATA_VERSION_CODE;
  return strataSuccess;
}

strataResult_t strataGetUniqueId(strataUniqueId* uniqueId) {
  if (!uniqueId) return record(nullptr, strataInvalidArgument, "strataGetUniqueId: uniqueId is NULL");
  return guarded(nullptr, [&] {
    Config config = Config::fromEnv();
    std::array<uint8_t, 16> secret = randomSecret();
    UniqueIdInfo info = startRootService(config, "", 0, secret, -1);
    *uniqueId = encodeUniqueId(info);
  });
}

static strataResult_t finishInit(strataComm_t* comm, std::shared_ptr<CommImpl> impl) {
  auto* c = new strataComm();
  c->impl = std::move(impl);
  c->forkGeneration = gForkGeneration.load();
  c->creator = getpid();
  logSetRank(c->impl->rank());
  {
    std::lock_guard<std::mutex> lk(gRegistryMutex);
    registry().insert(c);
  }
  *comm = c;
  return strataSuccess;
}

strataResult_t strataCommInitRank(strataComm_t* comm, int nranks, strataUniqueId commId, int rank) {
  if (!comm) return record(nullptr, strataInvalidArgument, "strataCommInitRank: comm is NULL");
  if (nranks < 1)
    return record(nullptr, strataInvalidArgument, strprintf("strataCommInitRank: nranks %d is < 1", nranks));
  if (rank < 0 || rank >= nranks)
    return record(nullptr, strataInvalidArgument,
                  strprintf("strataCommInitRank: rank %d is not in [0, %d)", rank, nranks));
  std::shared_ptr<CommImpl> impl;
  strataResult_t r = guarded(nullptr, [&] {
    Config config = Config::fromEnv();
    UniqueIdInfo info = decodeUniqueId(commId);
    auto boot = Bootstrap::connect(config, info, rank, nranks);
    impl = CommImpl::create(config, std::move(boot));
  });
  if (r != strataSuccess) return r;
  return finishInit(comm, std::move(impl));
}

strataResult_t strataCommInitFromEnv(strataComm_t* comm) {
  if (!comm) return record(nullptr, strataInvalidArgument, "strataCommInitFromEnv: comm is NULL");
  std::shared_ptr<CommImpl> impl;
  strataResult_t r = guarded(nullptr, [&] {
    Config config = Config::fromEnv();
    EnvLaunch launch = discoverEnvLaunch();
    impl = CommImpl::create(config, connectFromEnv(config, launch));
  });
  if (r != strataSuccess) return r;
  return finishInit(comm, std::move(impl));
}

strataResult_t strataCommSplit(strataComm_t comm, int color, int key, strataComm_t* newcomm, void* config) {
  Held held(comm);
  if (!held) return held.refuse("strataCommSplit");
  if (!newcomm) return record(comm, strataInvalidArgument, "strataCommSplit: newcomm is NULL");
  if (config) return record(comm, strataInvalidArgument, "strataCommSplit: config must be NULL");
  if (color < 0 && color != STRATA_SPLIT_NOCOLOR)
    return record(comm, strataInvalidArgument, strprintf("strataCommSplit: color %d is negative", color));
  *newcomm = nullptr;
  std::shared_ptr<CommImpl> child;
  strataResult_t r = guarded(comm, [&] { child = comm->impl->split(color, key); });
  if (r != strataSuccess || !child) return r;
  return finishInit(newcomm, std::move(child));
}

strataResult_t strataCommShrink(strataComm_t comm, const int* excludeRanks, int excludeCount, strataComm_t* newcomm,
                                void* config, int flags) {
  Held held(comm);
  if (!held) return held.refuse("strataCommShrink");
  if (!newcomm) return record(comm, strataInvalidArgument, "strataCommShrink: newcomm is NULL");
  *newcomm = nullptr;
  if (config) return record(comm, strataInvalidArgument, "strataCommShrink: config must be NULL");
  if (flags != STRATA_SHRINK_DEFAULT && flags != STRATA_SHRINK_ABORT)
    return record(
        comm, strataInvalidArgument,
        strprintf("strataCommShrink: flags %d is neither STRATA_SHRINK_DEFAULT (0) nor STRATA_SHRINK_ABORT (1)",
                  flags));
  const int n = comm->impl->size();
  if (excludeCount < 0 || excludeCount >= n)
    return record(comm, strataInvalidArgument,
                  strprintf("strataCommShrink: excludeCount %d is out of range [0, %d) (communicator of %d ranks)",
                            excludeCount, n, n));
  if (excludeCount > 0 && !excludeRanks)
    return record(comm, strataInvalidArgument,
                  strprintf("strataCommShrink: excludeRanks is NULL with excludeCount %d", excludeCount));
  std::vector<int> excluded(excludeRanks, excludeRanks + excludeCount);
  std::shared_ptr<CommImpl> child;
  strataResult_t r = guarded(comm, [&] { child = comm->impl->shrink(excluded, (flags & STRATA_SHRINK_ABORT) != 0); });
  if (r != strataSuccess || !child) return r;
  return finishInit(newcomm, std::move(child));
}

strataResult_t strataCommRevoke(strataComm_t comm, int flags) {
  Held held(comm);
  if (!held) return held.refuse("strataCommRevoke");
  if (flags != STRATA_REVOKE_DEFAULT)
    return record(comm, strataInvalidArgument,
                  strprintf("strataCommRevoke: flags %d must be STRATA_REVOKE_DEFAULT (0)", flags));
  return guarded(comm, [&] { comm->impl->revoke(); });
}

static strataResult_t release(strataComm_t comm, bool abort) {
  if (!unregister(comm)) return record(nullptr, strataInvalidUsage, "invalid communicator (NULL or already destroyed)");
  if (comm->forkGeneration != gForkGeneration.load()) {
    // Inherited through fork(): the connections, segments and threads are the parent's, which goes on using
    // them. The child lets go of the handle and touches nothing (no flush, no unlink, no join of threads
    // that do not exist here); what the handle owned stays mapped until this process exits.
    STRATA_INFO(kLogInit,
                "%s of a communicator inherited from process %d through fork(): the handle is released, "
                "its resources are left to the parent",
                abort ? "strataCommAbort" : "strataCommDestroy", static_cast<int>(comm->creator));
    new std::shared_ptr<CommImpl>(std::move(comm->impl));  // deliberately never destroyed
    return strataSuccess;
  }
  strataResult_t r = guarded(nullptr, [&] {
    if (abort) comm->impl->abort();
    else comm->impl->destroy();
  });
  waitUnheld(comm);
  delete comm;
  return r;
}

strataResult_t strataCommDestroy(strataComm_t comm) { return release(comm, false); }
strataResult_t strataCommAbort(strataComm_t comm) { return release(comm, true); }

strataResult_t strataCommDumpFlightRecorder(strataComm_t comm, const char* dir) {
  Held held(comm);
  if (!held) return held.refuse("strataCommDumpFlightRecorder");
  const std::string where = dir ? dir : comm->impl->config().flightRecorderDir;
  if (where.empty())
    return record(comm, strataInvalidArgument,
                  "strataCommDumpFlightRecorder: dir is NULL and STRATA_FLIGHT_RECORDER_DIR is not set");
  return guarded(comm, [&] { comm->impl->dumpFlightRecorder(where, "strataCommDumpFlightRecorder"); });
}

strataResult_t strataCommGetAsyncError(strataComm_t comm, strataResult_t* asyncError) {
  Held held(comm);
  if (!held) return held.refuse("strataCommGetAsyncError");
  if (!asyncError) return record(comm, strataInvalidArgument, "strataCommGetAsyncError: asyncError is NULL");
  *asyncError = comm->impl->asyncError();
  return strataSuccess;
}

strataResult_t strataCommCount(const strataComm_t comm, int* count) {
  Held held(comm);
  if (!held) return held.refuse("strataCommCount");
  if (!count) return record(comm, strataInvalidArgument, "strataCommCount: count is NULL");
  *count = comm->impl->size();
  return strataSuccess;
}

strataResult_t strataCommUserRank(const strataComm_t comm, int* rank) {
  Held held(comm);
  if (!held) return held.refuse("strataCommUserRank");
  if (!rank) return record(comm, strataInvalidArgument, "strataCommUserRank: rank is NULL");
  *rank = comm->impl->rank();
  return strataSuccess;
}

strataResult_t strataCommExplain(strataComm_t comm, strataCollective_t collective, size_t count,
                                 strataDataType_t datatype, char* algorithm, size_t algorithmLen, double* predictedUs) {
  Held held(comm);
  if (!held) return held.refuse("strataCommExplain");
  static const CollKind kinds[] = {CollKind::kAllReduce, CollKind::kReduceScatter, CollKind::kAllGather,
                                   CollKind::kBroadcast, CollKind::kReduce,        CollKind::kAllToAll};
  const int c = rawEnum(collective);
  if (c < 0 || c >= static_cast<int>(std::size(kinds)))
    return record(comm, strataInvalidArgument, strprintf("strataCommExplain: invalid collective %d", c));
  if (strataResult_t r = checkDtype("strataCommExplain", comm, datatype); r != strataSuccess) return r;
  if (algorithm && algorithmLen == 0)
    return record(comm, strataInvalidArgument, "strataCommExplain: algorithmLen is 0");
  return guarded(comm, [&] {
    CollCall call;
    call.kind = kinds[c];
    call.count = count;
    call.dtype = datatype;
    const Prediction p = comm->impl->chooseAlgorithm(call);
    if (algorithm) std::snprintf(algorithm, algorithmLen, "%s", p.algorithm.c_str());
    if (predictedUs) *predictedUs = p.us;
  });
}

strataResult_t strataRedOpCreatePreMulSum(strataRedOp_t* op, void* scalar, strataDataType_t datatype,
                                          strataScalarResidence_t residence, strataComm_t comm) {
  Held held(comm);
  if (!held) return held.refuse("strataRedOpCreatePreMulSum");
  if (!op || !scalar) return record(comm, strataInvalidArgument, "strataRedOpCreatePreMulSum: op or scalar is NULL");
  if (strataResult_t r = checkDtype("strataRedOpCreatePreMulSum", comm, datatype); r != strataSuccess) return r;
  if (rawEnum(residence) != strataScalarHostImmediate)
    return record(comm, strataInvalidArgument,
                  "strataRedOpCreatePreMulSum: only strataScalarHostImmediate is supported for host buffers");
  return guarded(comm, [&] {
    const double s = loadAsDouble(scalar, 0, datatype);
    // Integer types multiply in the type (as NCCL): the scalar as the type holds it, not through a double.
    int64_t i = 0;
    switch (datatype) {
      case strataInt8: i = *static_cast<const int8_t*>(scalar); break;
      case strataUint8: i = *static_cast<const uint8_t*>(scalar); break;
      case strataInt32: i = *static_cast<const int32_t*>(scalar); break;
      case strataUint32: i = *static_cast<const uint32_t*>(scalar); break;
      case strataInt64: i = *static_cast<const int64_t*>(scalar); break;
      case strataUint64: i = static_cast<int64_t>(*static_cast<const uint64_t*>(scalar)); break;
      default: break;
    }
    *op = comm->impl->createPreMulSum(s, i);
  });
}

strataResult_t strataRedOpDestroy(strataRedOp_t op, strataComm_t comm) {
  Held held(comm);
  if (!held) return held.refuse("strataRedOpDestroy");
  return guarded(comm, [&] { comm->impl->destroyRedOp(op); });
}

strataResult_t strataAllReduce(const void* sendbuff, void* recvbuff, size_t count, strataDataType_t datatype,
                               strataRedOp_t op, strataComm_t comm, strataStream_t stream) {
  if (strataResult_t r = checkDtype("strataAllReduce", comm, datatype); r != strataSuccess) return r;
  CollCall c{CollKind::kAllReduce, sendbuff, recvbuff, count, datatype, op, 0, -1};
  return issue("strataAllReduce", comm, c, stream);
}

strataResult_t strataReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, strataDataType_t datatype,
                                   strataRedOp_t op, strataComm_t comm, strataStream_t stream) {
  if (strataResult_t r = checkDtype("strataReduceScatter", comm, datatype); r != strataSuccess) return r;
  CollCall c{CollKind::kReduceScatter, sendbuff, recvbuff, recvcount, datatype, op, 0, -1};
  return issue("strataReduceScatter", comm, c, stream);
}

strataResult_t strataAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, strataDataType_t datatype,
                               strataComm_t comm, strataStream_t stream) {
  if (strataResult_t r = checkDtype("strataAllGather", comm, datatype); r != strataSuccess) return r;
  CollCall c{CollKind::kAllGather, sendbuff, recvbuff, sendcount, datatype, strataSum, 0, -1};
  return issue("strataAllGather", comm, c, stream);
}

strataResult_t strataBroadcast(const void* sendbuff, void* recvbuff, size_t count, strataDataType_t datatype, int root,
                               strataComm_t comm, strataStream_t stream) {
  if (strataResult_t r = checkDtype("strataBroadcast", comm, datatype); r != strataSuccess) return r;
  CollCall c{CollKind::kBroadcast, sendbuff, recvbuff, count, datatype, strataSum, root, -1};
  return issue("strataBroadcast", comm, c, stream);
}

strataResult_t strataReduce(const void* sendbuff, void* recvbuff, size_t count, strataDataType_t datatype,
                            strataRedOp_t op, int root, strataComm_t comm, strataStream_t stream) {
  if (strataResult_t r = checkDtype("strataReduce", comm, datatype); r != strataSuccess) return r;
  CollCall c{CollKind::kReduce, sendbuff, recvbuff, count, datatype, op, root, -1};
  return issue("strataReduce", comm, c, stream);
}

strataResult_t strataAllToAll(const void* sendbuff, void* recvbuff, size_t count, strataDataType_t datatype,
                              strataComm_t comm, strataStream_t stream) {
  if (strataResult_t r = checkDtype("strataAllToAll", comm, datatype); r != strataSuccess) return r;
  CollCall c{CollKind::kAllToAll, sendbuff, recvbuff, count, datatype, strataSum, 0, -1};
  return issue("strataAllToAll", comm, c, stream);
}

strataResult_t strataSend(const void* sendbuff, size_t count, strataDataType_t datatype, int peer, strataComm_t comm,
                          strataStream_t stream) {
  if (strataResult_t r = checkDtype("strataSend", comm, datatype); r != strataSuccess) return r;
  CollCall c{CollKind::kSend, sendbuff, nullptr, count, datatype, strataSum, 0, peer};
  if (tGroup.depth == 0) {
    Held held(comm);
    if (held && peer == comm->impl->rank() && count > 0)
      return record(comm, strataInvalidUsage, "strataSend to self outside a group has no matching receive");
  }
  return issue("strataSend", comm, c, stream);
}

strataResult_t strataRecv(void* recvbuff, size_t count, strataDataType_t datatype, int peer, strataComm_t comm,
                          strataStream_t stream) {
  if (strataResult_t r = checkDtype("strataRecv", comm, datatype); r != strataSuccess) return r;
  CollCall c{CollKind::kRecv, nullptr, recvbuff, count, datatype, strataSum, 0, peer};
  if (tGroup.depth == 0) {
    Held held(comm);
    if (held && peer == comm->impl->rank() && count > 0)
      return record(comm, strataInvalidUsage, "strataRecv from self outside a group has no matching send");
  }
  return issue("strataRecv", comm, c, stream);
}

strataResult_t strataBarrier(strataComm_t comm, strataStream_t stream) {
  CollCall c{CollKind::kBarrier, nullptr, nullptr, 0, strataInt8, strataSum, 0, -1};
  return issue("strataBarrier", comm, c, stream);
}

strataResult_t strataGroupStart(void) {
  ++tGroup.depth;
  return strataSuccess;
}

static strataResult_t groupEnd(strataWork_t* work) {
  if (tGroup.depth <= 0) return record(nullptr, strataInvalidUsage, "strataGroupEnd without strataGroupStart");
  if (--tGroup.depth > 0) {
    if (work) *work = nullptr;
    return strataSuccess;
  }
  auto calls = std::move(tGroup.calls);
  tGroup.calls.clear();
  std::vector<std::shared_ptr<Task>> tasks;
  strataResult_t r = guarded(nullptr, [&] { tasks = launchGroup(std::move(calls), work != nullptr); });
  if (r != strataSuccess) return r;
  if (work) {
    auto w = std::make_shared<strataWork>();
    w->tasks = std::move(tasks);
    w->forkGeneration = gForkGeneration.load();
    std::lock_guard<std::mutex> lk(gWorkMutex);
    workRegistry().emplace(w.get(), w);
    *work = w.get();
    return strataSuccess;
  }
  for (auto& t : tasks) {
    t->wait(-1);
    if (t->result() != strataSuccess) return record(nullptr, t->result(), t->error());
  }
  return strataSuccess;
}

strataResult_t strataGroupEnd(void) { return groupEnd(nullptr); }

strataResult_t strataGroupEndAsync(strataWork_t* work) {
  if (!work) return record(nullptr, strataInvalidArgument, "strataGroupEndAsync: work is NULL");
  *work = nullptr;
  if (tGroup.depth != 1) return record(nullptr, strataInvalidUsage, "strataGroupEndAsync must end the outermost group");
  return groupEnd(work);
}

// The first failed task of finished work, or null. A finished task's result and error never change, so
// several threads may read them at once.
static const Task* firstFailure(const strataWork& work) {
  for (auto& t : work.tasks)
    if (t->done() && t->result() != strataSuccess) return t.get();
  return nullptr;
}

// The live work behind a handle, or null (the caller records why). Holding the pointer keeps the work
// alive even if another thread frees the handle meanwhile.
static std::shared_ptr<strataWork> liveWork(strataWork_t work) {
  std::lock_guard<std::mutex> lk(gWorkMutex);
  auto it = workRegistry().find(work);
  if (it == workRegistry().end()) return nullptr;
  return it->second;
}

static strataResult_t refuseWork(const char* what, strataWork_t work) {
  return record(nullptr, strataInvalidUsage,
                strprintf("%s: invalid work handle %p (already freed by strataWorkFree, or never returned by "
                          "strataGroupEndAsync)",
                          what, static_cast<void*>(work)));
}

strataResult_t strataWorkWait(strataWork_t handle, int64_t timeoutMs) {
  if (!handle) return record(nullptr, strataInvalidArgument, "strataWorkWait: work is NULL");
  std::shared_ptr<strataWork> work = liveWork(handle);
  if (!work) return refuseWork("strataWorkWait", handle);
  // One deadline for the whole work, not timeoutMs per task.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(std::max<int64_t>(timeoutMs, 0));
  for (auto& t : work->tasks) {
    int64_t left = -1;
    if (timeoutMs >= 0) {
      left = std::max<int64_t>(
          0,
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count());
    }
    if (!t->wait(left)) return strataInProgress;
  }
  if (const Task* f = firstFailure(*work)) return record(nullptr, f->result(), f->error());
  return strataSuccess;
}

strataResult_t strataWorkTest(strataWork_t handle, int* done) {
  if (!handle || !done) return record(nullptr, strataInvalidArgument, "strataWorkTest: work or done is NULL");
  std::shared_ptr<strataWork> work = liveWork(handle);
  if (!work) return refuseWork("strataWorkTest", handle);
  *done = 0;
  for (auto& t : work->tasks)
    if (!t->done()) return strataSuccess;
  *done = 1;
  // A failure is returned on every poll, but recorded (strataGetLastError, the log) only on the first.
  if (const Task* f = firstFailure(*work)) {
    if (!work->failureRecorded.exchange(true)) return record(nullptr, f->result(), f->error());
    return f->result();
  }
  return strataSuccess;
}

const char* strataWorkError(strataWork_t handle) {
  std::shared_ptr<strataWork> work = liveWork(handle);
  if (!work) return "";
  const Task* f = firstFailure(*work);
  return f ? f->error().c_str() : "";  // the task outlives this call while the handle is not freed
}

strataResult_t strataWorkFree(strataWork_t handle) {
  if (!handle) return strataSuccess;  // as free(NULL)
  std::shared_ptr<strataWork> work;
  {
    std::lock_guard<std::mutex> lk(gWorkMutex);
    auto it = workRegistry().find(handle);
    if (it == workRegistry().end()) return refuseWork("strataWorkFree", handle);
    work = std::move(it->second);
    workRegistry().erase(it);
  }
  if (work->forkGeneration != gForkGeneration.load()) {
    new std::shared_ptr<strataWork>(std::move(work));  // its tasks run on the parent's threads: leave them be
  }
  return strataSuccess;
}

}  // extern "C"

namespace strata {

strataResult_t recordApiError(strataComm_t comm, strataResult_t code, const std::string& message) {
  return record(comm, code, message);
}

int apiGroupDepth() { return tGroup.depth; }

strataResult_t discardApiGroup() {
  if (tGroup.depth <= 0) return record(nullptr, strataInvalidUsage, "group end without a group start");
  if (--tGroup.depth == 0) tGroup.calls.clear();
  return strataSuccess;
}

}  // namespace strata
