// What the files of the C ABI share: what a strataComm_t points to, the registries of live communicators and work
// handles (a call on a destroyed or garbage handle is refused, not a crash), the pin that keeps a communicator
// alive through one call (Held), fork safety, the error record, and the argument checks every entry point makes.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <type_traits>

#include "api/c_api_internal.h"
#include "strata/strata.h"
#include "util/dtype.h"
#include "util/error.h"

namespace strata {
class CommImpl;

/// The creation of a communicator made with strataConfig_t.blocking = 0, running on `thread`. When `done`, the
/// handle's impl is set (success) or `result` and `error` say why not. Guarded by `mutex`; the thread sets impl
/// before done, so whoever saw done under the mutex may read impl.
struct PendingCreation {
  std::mutex mutex;
  std::condition_variable cv;
  bool done = false;
  strataResult_t result = strataInProgress;
  std::string error;
  std::thread thread;  // joined by strataCommDestroy/Abort
};
}  // namespace strata

struct strataComm {
  std::shared_ptr<strata::CommImpl> impl;
  std::atomic<int> held{0};  // API calls using this handle now (strata::Held); release() frees it at 0
  std::mutex errorMutex;
  std::string lastError;
  uint64_t lastErrorSeq = 0;    // when lastError was recorded, in the error record's order
  uint32_t forkGeneration = 0;  // forkGeneration() when created: another value means this process is a forked child
  pid_t creator = 0;            // the process that created it
  /// Set for a non-blocking creation (strataCommInitRankConfig with blocking 0), from registration on.
  std::shared_ptr<strata::PendingCreation> pending;
};

namespace strata {

// ---- communicator handles --------------------------------------------------------------------------------

/// A new handle for `impl`, live (registered) from now on; written to *comm. Returns strataSuccess.
strataResult_t registerComm(strataComm_t* comm, std::shared_ptr<CommImpl> impl);
/// A new live handle, written to *comm, whose communicator `make` creates on a thread of its own (non-blocking
/// creation): the handle's impl is set when it succeeds; its failure is recorded for the handle. Returns
/// strataInProgress.
strataResult_t registerPendingComm(strataComm_t* comm, std::function<std::shared_ptr<CommImpl>()> make);
/// Waits for a non-blocking creation of `c` to end (at once if there is none): strataSuccess once impl is set,
/// else the creation's error.
strataResult_t waitCreated(strataComm* c);

/// Takes a communicator out of the registry; false if it was not there (never created, or already destroyed,
/// perhaps by another thread a moment ago).
bool unregisterComm(strataComm* c);

/// Waits until no API call holds `c` (taken out of the registry already: no new call can hold it).
void waitUnheld(strataComm* c);

/// A handle in use by one API call, from construction to destruction: strataCommDestroy or strataCommAbort on
/// another thread does not free it meanwhile. False if the handle is not live (NULL, destroyed, garbage) or was
/// inherited through fork(); refuse() says which. A handle still being created (non-blocking) is waited for, and is
/// false if its creation failed, unless held with kNoWait (the caller then checks `pending` itself).
class Held {
 public:
  enum WaitForCreation { kWait, kNoWait };
  explicit Held(strataComm* c, WaitForCreation wait = kWait);
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
  strataComm* failed_ = nullptr;     // live, but its non-blocking creation failed
};

// ---- fork safety -----------------------------------------------------------------------------------------

/// Counts the fork() calls this process is a child of. A handle made with another value was made before a fork
/// and belongs to the parent: its shm slots, sockets and progress threads are the parent's (the threads do not even
/// exist in the child), so the child is refused every call on it, as NCCL refuses a communicator used after fork.
uint32_t forkGeneration();

// ---- work handles ----------------------------------------------------------------------------------------

/// Makes `work` live: the registry owns it until takeWork.
void registerWork(std::shared_ptr<strataWork> work);
/// The live work behind a handle, or null (the caller records why). Holding the pointer keeps the work alive even
/// if another thread frees the handle meanwhile.
std::shared_ptr<strataWork> liveWork(strataWork_t work);
/// Takes a handle's work out of the registry (strataWorkFree); null if it was not live.
std::shared_ptr<strataWork> takeWork(strataWork_t work);

// ---- errors and argument checks --------------------------------------------------------------------------

/// Runs `f`, translating its exceptions into the status code they stand for (recorded: recordApiError).
template <typename F>
strataResult_t guarded(strataComm* comm, F&& f) {
  try {
    f();
    return strataSuccess;
  } catch (const Error& e) {
    return recordApiError(comm, e.code(), e.what());
  } catch (const std::bad_alloc&) {
    return recordApiError(comm, strataSystemError, "out of memory");
  } catch (const std::exception& e) {
    return recordApiError(comm, strataInternalError, e.what());
  }
}

/// The value a caller passed for an enum parameter, read as bytes: a C caller may pass any int, and loading an
/// out-of-range value as the enum type is undefined in C++ (UBSan: "not a valid value for type"), so every enum
/// from the ABI is checked through this before it is used as an enum.
template <typename E>
int rawEnum(const E& e) {
  std::underlying_type_t<E> v;
  std::memcpy(&v, &e, sizeof(v));
  return static_cast<int>(v);
}

/// strataSuccess, or the recorded error of a call `what` with an invalid datatype.
inline strataResult_t checkDtype(const char* what, strataComm* comm, const strataDataType_t& datatype) {
  const int raw = rawEnum(datatype);
  if (dtypeValid(raw)) return strataSuccess;
  return recordApiError(comm, strataInvalidArgument, strprintf("%s: invalid datatype %d", what, raw));
}

}  // namespace strata
