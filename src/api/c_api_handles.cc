// The C ABI's handles: the registries of live communicators and work handles, the pin of one call (Held), fork
// safety, and the error record behind strataGetLastError.
#include "api/c_api_handles.h"

#include <pthread.h>
#include <unistd.h>

#include <ctime>
#include <unordered_map>
#include <unordered_set>

#include "core/communicator.h"
#include "engine/device_engine.h"
#include "util/log.h"

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

// Bumped in the child of every fork() (forkGeneration()).
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

std::string inheritedMessage(const char* what, pid_t creator) {
  return strprintf(
      "%s: the communicator was created by process %d, and this is process %d, forked from it: a forked child "
      "cannot use its parent's communicators (create its own with a new unique id, or start workers with spawn "
      "instead of fork)",
      what, static_cast<int>(creator), static_cast<int>(getpid()));
}

}  // namespace

// ---- communicator handles --------------------------------------------------------------------------------

strataResult_t registerComm(strataComm_t* comm, std::shared_ptr<CommImpl> impl) {
  setDeviceSideFactory(&makeDeviceEngine);  // before the communicator's first device call (core/host_side.h)
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

bool unregisterComm(strataComm* c) {
  std::lock_guard<std::mutex> lk(gRegistryMutex);
  if (!c || !registry().erase(c)) return false;
  gRegistryEpoch.fetch_add(1);
  return true;
}

void waitUnheld(strataComm* c) {
  while (gEntering.load() != 0 || c->held.load(std::memory_order_acquire) != 0) {
    timespec ts{0, 50000};
    nanosleep(&ts, nullptr);
  }
}

strataResult_t registerPendingComm(strataComm_t* comm, std::function<std::shared_ptr<CommImpl>()> make) {
  setDeviceSideFactory(&makeDeviceEngine);
  auto* c = new strataComm();
  auto pending = std::make_shared<PendingCreation>();
  c->pending = pending;
  c->forkGeneration = gForkGeneration.load();
  c->creator = getpid();
  *comm = c;
  // The thread only touches c through impl (before done) and the error record; release() joins it before c goes.
  // Registered and started under the registry's lock, so no strataCommDestroy can find the handle before its thread
  // is there to join.
  std::lock_guard<std::mutex> registered(gRegistryMutex);
  registry().insert(c);
  pending->thread = std::thread([c, pending, make = std::move(make)] {
    std::shared_ptr<CommImpl> impl;
    const strataResult_t r = guarded(c, [&] { impl = make(); });
    std::lock_guard<std::mutex> lk(pending->mutex);
    if (r == strataSuccess) {
      c->impl = std::move(impl);
      logSetRank(c->impl->rank());
    } else {
      pending->error = tLastError;  // guarded() recorded it on this thread
    }
    pending->result = r;
    pending->done = true;
    pending->cv.notify_all();
  });
  return strataInProgress;
}

strataResult_t waitCreated(strataComm* c) {
  if (!c->pending) return strataSuccess;
  std::unique_lock<std::mutex> lk(c->pending->mutex);
  c->pending->cv.wait(lk, [&] { return c->pending->done; });  // the creation's own deadline bounds it
  return c->pending->result;
}

Held::Held(strataComm* c, WaitForCreation wait) {
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
  if (comm_ && wait == kWait && waitCreated(comm_) != strataSuccess) {
    failed_ = comm_;
    comm_->held.fetch_sub(1, std::memory_order_release);
    comm_ = nullptr;
  }
}

strataResult_t Held::refuse(const char* what) const {
  if (inherited_) return recordApiError(nullptr, strataInvalidUsage, inheritedMessage(what, inherited_->creator));
  if (failed_)
    return recordApiError(
        nullptr, failed_->pending->result,
        strprintf("%s: the communicator's non-blocking creation failed: %s", what, failed_->pending->error.c_str()));
  return recordApiError(nullptr, strataInvalidUsage,
                        strprintf("%s: invalid communicator (NULL, destroyed, or never initialised)", what));
}

// ---- fork safety and work handles ------------------------------------------------------------------------

uint32_t forkGeneration() { return gForkGeneration.load(); }

void registerWork(std::shared_ptr<strataWork> work) {
  std::lock_guard<std::mutex> lk(gWorkMutex);
  strataWork* handle = work.get();
  workRegistry().emplace(handle, std::move(work));
}

std::shared_ptr<strataWork> liveWork(strataWork_t work) {
  std::lock_guard<std::mutex> lk(gWorkMutex);
  auto it = workRegistry().find(work);
  if (it == workRegistry().end()) return nullptr;
  return it->second;
}

std::shared_ptr<strataWork> takeWork(strataWork_t work) {
  std::lock_guard<std::mutex> lk(gWorkMutex);
  auto it = workRegistry().find(work);
  if (it == workRegistry().end()) return nullptr;
  std::shared_ptr<strataWork> taken = std::move(it->second);
  workRegistry().erase(it);
  return taken;
}

// ---- the error record ------------------------------------------------------------------------------------

strataResult_t recordApiError(strataComm_t comm, strataResult_t code, const std::string& message) {
  const uint64_t seq = gErrorSeq.fetch_add(1, std::memory_order_relaxed) + 1;
  tLastError = message;
  tLastErrorSeq = seq;
  if (comm && isLive(comm)) {
    std::lock_guard<std::mutex> lk(comm->errorMutex);
    comm->lastError = message;
    comm->lastErrorSeq = seq;
  }
  STRATA_WARN(kLogAll, "%s: %s", strataGetErrorString(code), message.c_str());
  return code;
}

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

}  // extern "C"
