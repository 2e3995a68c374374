// The NCCL drop-in's communicator handles and their life after creation: the handle registry (a destroyed handle
// is refused, not read after free), errors, finalize, destroy, abort, revoke, queries, suspend and resume.
#include <cctype>
#include <chrono>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_set>

#include "api/c_api_internal.h"
#include "nccl/nccl_state.h"
#include "util/error.h"
#include "util/log.h"

static_assert(NCCL_REVOKE_DEFAULT == STRATA_REVOKE_DEFAULT);
static_assert(int(ncclSuccess) == int(strataSuccess) && int(ncclUnhandledCudaError) == int(strataUnhandledCudaError) &&
              int(ncclSystemError) == int(strataSystemError) && int(ncclInternalError) == int(strataInternalError) &&
              int(ncclInvalidArgument) == int(strataInvalidArgument) &&
              int(ncclInvalidUsage) == int(strataInvalidUsage) && int(ncclRemoteError) == int(strataRemoteError) &&
              int(ncclInProgress) == int(strataInProgress) && int(ncclNumResults) == int(strataNumResults));

namespace strata::nccl {
namespace {

// Handles ever returned and not destroyed. The objects themselves are never freed (see ncclComm), so a stale
// handle reads "dead" rather than freed memory; each is 24 bytes.
std::mutex gHandlesMutex;
std::unordered_set<ncclComm_t>& liveHandles() {
  static auto* s = new std::unordered_set<ncclComm_t>();
  return *s;
}

// Waits for the works a non-blocking communicator issued; returns the first failure.
ncclResult_t drainPending(CommState& st) {
  std::vector<PendingWork> works;
  {
    std::lock_guard<std::mutex> lk(st.mu);
    works.swap(st.pending);
  }
  ncclResult_t first = ncclSuccess;
  for (const PendingWork& w : works) {
    const strataResult_t r = strataWorkWait(w.get(), -1);
    if (r != strataSuccess && first == ncclSuccess) first = asNccl(r);
  }
  return first;
}

// Ends a handle: destroy or abort what it holds (an unfinished creation frees its own result).
ncclResult_t release(ncclComm_t comm, bool abort, const char* what) {
  if (!comm) return ncclSuccess;  // as NCCL
  std::shared_ptr<CommState> st;
  {
    std::lock_guard<std::mutex> lk(gHandlesMutex);
    if (!liveHandles().count(comm))
      return fail(nullptr, ncclInvalidArgument,
                  std::string(what) + ": invalid communicator (destroyed, or never created)");
    st = comm->state;
  }
  {
    std::lock_guard<std::mutex> lk(st->mu);
    if (st->createResult.load() == ncclInProgress) {
      st->abandoned.store(true);
      retireHandle(comm);
      return ncclSuccess;
    }
  }
  ncclResult_t r = ncclSuccess;
  if (st->comm) {
    if (abort) {
      r = fromStrata(strataCommAbort(st->comm));
      std::lock_guard<std::mutex> lk(st->mu);
      st->pending.clear();
    } else {
      r = drainPending(*st);
      const ncclResult_t d = fromStrata(strataCommDestroy(st->comm));
      if (r == ncclSuccess) r = d;
    }
  }
  retireHandle(comm);
  return r;
}

}  // namespace

PendingWork adoptWork(strataWork_t work) {
  return PendingWork(work, [](strataWork_t w) { strataWorkFree(w); });
}

ncclComm_t newHandle(std::shared_ptr<CommState> state) {
  auto* h = new ncclComm;
  h->state = std::move(state);
  h->magic.store(kLiveComm, std::memory_order_release);
  std::lock_guard<std::mutex> lk(gHandlesMutex);
  liveHandles().insert(h);
  return h;
}

bool retireHandle(ncclComm_t comm) {
  std::lock_guard<std::mutex> lk(gHandlesMutex);
  if (!liveHandles().erase(comm)) return false;
  comm->magic.store(kDeadComm, std::memory_order_release);
  comm->state.reset();
  return true;
}

CommState* usable(ncclComm_t comm, const char* what, ncclResult_t* err) {
  if (!comm) {
    *err = fail(nullptr, ncclInvalidArgument, std::string(what) + ": comm is NULL");
    return nullptr;
  }
  if (comm->magic.load(std::memory_order_acquire) != kLiveComm) {
    // NCCL's code for a destroyed handle (its CommCheck: "corrupted comm object").
    *err = fail(nullptr, ncclInvalidArgument, std::string(what) + ": invalid communicator (destroyed or aborted)");
    return nullptr;
  }
  CommState* st = comm->state.get();
  int r = st->createResult.load(std::memory_order_acquire);
  // A call on a communicator still being made (non-blocking) waits for it, as NCCL's calls would block on it.
  while (r == ncclInProgress) {
    if (apiGroupDepth() > 0 && !st->comm) {
      *err = fail(nullptr, ncclInvalidUsage,
                  std::string(what) + ": the communicator is created in this group; use it after ncclGroupEnd");
      return nullptr;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    r = st->createResult.load(std::memory_order_acquire);
  }
  if (r != ncclSuccess) {
    *err = fail(nullptr, static_cast<ncclResult_t>(r),
                std::string(what) + ": the communicator's creation failed: " + st->createError);
    return nullptr;
  }
  return st;
}

CommState* active(ncclComm_t comm, const char* what, ncclResult_t* err) {
  CommState* st = usable(comm, what, err);
  if (st && st->suspended.load(std::memory_order_relaxed)) {
    *err = fail(comm, ncclInvalidUsage,
                std::string(what) + ": the communicator is suspended (ncclCommSuspend); ncclCommResume it first");
    return nullptr;
  }
  return st;
}

ncclResult_t renameError(strataResult_t r) {
  // Strata's names in the message become NCCL's: "strata" followed by a capital (strataAllReduce,
  // strataScalarHostImmediate, strataRemoteError) is "nccl" there. STRATA_* variables keep their names.
  const std::string text = strataGetLastError(nullptr);
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const bool word = i == 0 || !std::isalnum(static_cast<unsigned char>(text[i - 1]));
    if (word && text.compare(i, 6, "strata") == 0 && i + 6 < text.size() &&
        std::isupper(static_cast<unsigned char>(text[i + 6]))) {
      out += "nccl";
      i += 5;
      continue;
    }
    out += text[i];
  }
  return static_cast<ncclResult_t>(recordApiError(nullptr, r, out));
}

ncclResult_t fail(ncclComm_t comm, ncclResult_t code, const std::string& message) {
  strataComm_t s = nullptr;
  if (comm && comm->magic.load(std::memory_order_acquire) == kLiveComm && comm->state) s = comm->state->comm;
  return static_cast<ncclResult_t>(recordApiError(s, static_cast<strataResult_t>(code), message));
}

}  // namespace strata::nccl

using namespace strata;
using namespace strata::nccl;

// ---- errors ----------------------------------------------------------------------------------------------

STRATA_NCCL_API(const char*, ncclGetErrorString, ncclResult_t result) {
  switch (static_cast<int>(result)) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the Strata developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    case ncclTimeout: return "operation timed out (STRATA_TIMEOUT_MS)";
    default: return "unknown result code";
  }
}

STRATA_NCCL_API(const char*, ncclGetLastError, ncclComm_t comm) {
  if (comm && comm->magic.load(std::memory_order_acquire) == kLiveComm) {
    CommState* st = comm->state.get();
    if (st->createResult.load() != ncclSuccess && st->createResult.load() != ncclInProgress) {
      thread_local std::string text;
      std::lock_guard<std::mutex> lk(st->mu);
      text = st->createError;
      return text.c_str();
    }
    if (st->comm) return strataGetLastError(st->comm);
  }
  return strataGetLastError(nullptr);
}

// ---- the end of a communicator ------------------------------------------------------------------------------

STRATA_NCCL_API(ncclResult_t, ncclCommFinalize, ncclComm_t comm) {
  ncclResult_t err;
  CommState* st = active(comm, "ncclCommFinalize", &err);
  if (!st) return err;
  if (st->revoked.load())
    return fail(comm, ncclInvalidUsage,
                "ncclCommFinalize after ncclCommRevoke is invalid (NCCL's rule): shrink, destroy or abort it");
  return drainPending(*st);
}

STRATA_NCCL_API(ncclResult_t, ncclCommDestroy, ncclComm_t comm) { return release(comm, false, "ncclCommDestroy"); }

STRATA_NCCL_API(ncclResult_t, ncclCommAbort, ncclComm_t comm) { return release(comm, true, "ncclCommAbort"); }

STRATA_NCCL_API(ncclResult_t, ncclCommRevoke, ncclComm_t comm, int revokeFlags) {
  ncclResult_t err;
  CommState* st = usable(comm, "ncclCommRevoke", &err);
  if (!st) return err;
  const ncclResult_t r = fromStrata(strataCommRevoke(st->comm, revokeFlags));
  if (r == ncclSuccess) st->revoked.store(true);  // Strata's revoke returns once the communicator is quiescent
  return r;
}

// ---- queries --------------------------------------------------------------------------------------------

STRATA_NCCL_API(ncclResult_t, ncclCommGetAsyncError, ncclComm_t comm, ncclResult_t* asyncError) {
  if (!comm || !asyncError)
    return fail(nullptr, ncclInvalidArgument, "ncclCommGetAsyncError: comm or asyncError is NULL");
  if (comm->magic.load(std::memory_order_acquire) != kLiveComm)
    return fail(nullptr, ncclInvalidArgument, "ncclCommGetAsyncError: invalid communicator (destroyed or aborted)");
  CommState* st = comm->state.get();
  const int created = st->createResult.load(std::memory_order_acquire);
  if (created != ncclSuccess) {
    *asyncError = static_cast<ncclResult_t>(created);
    return ncclSuccess;
  }
  {
    std::lock_guard<std::mutex> lk(st->mu);
    for (auto it = st->pending.begin(); it != st->pending.end();) {
      int done = 0;
      const strataResult_t r = strataWorkTest(it->get(), &done);
      if (!done && r == strataSuccess) {
        *asyncError = ncclInProgress;
        return ncclSuccess;
      }
      it = st->pending.erase(it);
      if (r != strataSuccess) {
        *asyncError = asNccl(r);
        return ncclSuccess;
      }
    }
  }
  // NCCL: a revoked communicator's state is ncclInProgress until it is quiescent, then ncclSuccess (then shrink,
  // split or destroy proceed). Strata's revoke returns once it is quiescent.
  if (st->revoked.load()) {
    *asyncError = ncclSuccess;
    return ncclSuccess;
  }
  strataResult_t r = strataSuccess;
  if (strataResult_t q = strataCommGetAsyncError(st->comm, &r); q != strataSuccess) return fromStrata(q);
  *asyncError = asNccl(r);
  return ncclSuccess;
}

STRATA_NCCL_API(ncclResult_t, ncclCommCount, const ncclComm_t comm, int* count) {
  ncclResult_t err;
  CommState* st = usable(comm, "ncclCommCount", &err);
  if (!st) return err;
  return fromStrata(strataCommCount(st->comm, count));
}

STRATA_NCCL_API(ncclResult_t, ncclCommUserRank, const ncclComm_t comm, int* rank) {
  ncclResult_t err;
  CommState* st = usable(comm, "ncclCommUserRank", &err);
  if (!st) return err;
  return fromStrata(strataCommUserRank(st->comm, rank));
}

STRATA_NCCL_API(ncclResult_t, ncclCommCuDevice, const ncclComm_t comm, int* device) {
  ncclResult_t err;
  CommState* st = usable(comm, "ncclCommCuDevice", &err);
  if (!st) return err;
  if (!device) return fail(comm, ncclInvalidArgument, "ncclCommCuDevice: device is NULL");
  *device = st->cudaDev;  // -1: made in a process that had not loaded CUDA (host buffers only)
  return ncclSuccess;
}

// ---- suspend and resume -----------------------------------------------------------------------------------
// Strata has no way yet to give back a communicator's device buffers and re-create them, so suspend releases
// nothing: it waits for the communicator's work and marks it, and its calls are refused until resume.

STRATA_NCCL_API(ncclResult_t, ncclCommSuspend, ncclComm_t comm, int flags) {
  ncclResult_t err;
  CommState* st = active(comm, "ncclCommSuspend", &err);
  if (!st) return err;
  if (flags & ~NCCL_SUSPEND_MEM)
    return fail(comm, ncclInvalidArgument, strprintf("ncclCommSuspend: unknown flags 0x%x", flags));
  if (ncclResult_t r = drainPending(*st); r != ncclSuccess) return r;
  st->suspended.store(true);
  STRATA_INFO(kLogInit,
              "ncclCommSuspend: communicator suspended (its calls are refused until ncclCommResume; Strata "
              "releases no memory on suspend)");
  return ncclSuccess;
}

STRATA_NCCL_API(ncclResult_t, ncclCommResume, ncclComm_t comm) {
  ncclResult_t err;
  CommState* st = usable(comm, "ncclCommResume", &err);
  if (!st) return err;
  if (!st->suspended.exchange(false))
    return fail(comm, ncclInvalidUsage, "ncclCommResume: the communicator is not suspended");
  return ncclSuccess;
}

STRATA_NCCL_API(ncclResult_t, ncclCommMemStats, ncclComm_t comm, ncclCommMemStat_t stat, uint64_t* value) {
  ncclResult_t err;
  CommState* st = usable(comm, "ncclCommMemStats", &err);
  if (!st) return err;
  if (!value) return fail(comm, ncclInvalidArgument, "ncclCommMemStats: value is NULL");
  int raw;
  std::memcpy(&raw, &stat, sizeof(raw));
  switch (raw) {
    case ncclStatGpuMemSuspended: *value = st->suspended.load() ? 1 : 0; return ncclSuccess;
    case ncclStatGpuMemSuspend:
    case ncclStatGpuMemPersist:
    case ncclStatGpuMemTotal:
      return fail(comm, ncclInvalidUsage,
                  "ncclCommMemStats: Strata does not account GPU memory per communicator (its device buffers belong "
                  "to the communicator's device engine and are not released by ncclCommSuspend)");
    default: return fail(comm, ncclInvalidArgument, strprintf("ncclCommMemStats: unknown statistic %d", raw));
  }
}
