// The NCCL drop-in's communicators: versions and ids, creation (blocking, non-blocking, inside a group, several
// ids, all devices, grow), split and shrink, finalize, destroy, abort, revoke, queries, errors, suspend.
#include <cctype>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_set>

#include "core/c_api_internal.h"
#include "kernels/cuda_loader.h"
#include "nccl/nccl_env.h"
#include "nccl/nccl_state.h"
#include "util/error.h"
#include "util/log.h"

static_assert(sizeof(ncclUniqueId) == sizeof(strataUniqueId), "NCCL's unique id and Strata's have one size");
static_assert(NCCL_SPLIT_NOCOLOR == STRATA_SPLIT_NOCOLOR);
static_assert(NCCL_SHRINK_DEFAULT == STRATA_SHRINK_DEFAULT && NCCL_SHRINK_ABORT == STRATA_SHRINK_ABORT);
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

int currentDevice() {
  if (!cudaDriverLoaded()) return -1;  // a process that never loaded CUDA has no current device to bind
  try {
    int d = -1;
    return cudaApi().getDevice(&d) == 0 ? d : -1;
  } catch (const Error&) {
    return -1;
  }
}

strataUniqueId toStrata(const ncclUniqueId& id) {
  strataUniqueId s;
  std::memcpy(&s, &id, sizeof(s));
  return s;
}

using Make = std::function<strataResult_t(strataComm_t*)>;

// Runs one creation; the result lands in the state (and the caller's thread's last error, if it failed).
void runCreation(const std::shared_ptr<CommState>& st, const Make& make) {
  // On another thread (non-blocking, or a group's): the device the caller had current when it asked.
  if (st->cudaDev >= 0) {
    try {
      cudaApi().setDevice(st->cudaDev);
    } catch (const Error&) {
    }
  }
  strataComm_t c = nullptr;
  strataResult_t r = make(&c);
  std::lock_guard<std::mutex> lk(st->mu);
  if (r != strataSuccess) st->createError = strataGetLastError(nullptr);
  if (r == strataSuccess && st->abandoned.load()) {
    if (c) strataCommAbort(c);  // destroyed or aborted while it was being made
    c = nullptr;
  }
  st->comm = c;
  st->createResult.store(r, std::memory_order_release);
}

// Creates what `make` makes as the config asks: now (blocking), on a detached thread (non-blocking: the handle is
// returned with ncclInProgress and ncclCommGetAsyncError reports the end), or at the outermost ncclGroupEnd when
// called inside a group. `inherit`: the state whose settings a NULL config keeps (split, shrink).
ncclResult_t create(ncclComm_t* out, const ncclConfig_t* config, const char* what, Make make,
                    const CommState* inherit = nullptr) {
  if (!out) return fail(nullptr, ncclInvalidArgument, std::string(what) + ": the communicator pointer is NULL");
  *out = nullptr;
  auto st = std::make_shared<CommState>();
  if (inherit && !config) {
    st->blocking = inherit->blocking;
    st->name = inherit->name;
  }
  if (ncclResult_t r = applyConfig(config, *st, what); r != ncclSuccess) return r;
  st->cudaDev = currentDevice();
  ThreadGroup& g = threadGroup();
  if (g.depth > 0) {
    st->createResult.store(ncclInProgress);
    g.creations.push_back([st, make] {
      runCreation(st, make);
      return static_cast<ncclResult_t>(st->createResult.load());
    });
    g.creationStates.push_back(st);
    *out = newHandle(st);
    return ncclSuccess;
  }
  if (st->blocking) {
    runCreation(st, make);
    const int r = st->createResult.load();
    if (r != ncclSuccess) return static_cast<ncclResult_t>(r);  // Strata recorded why on this thread
    if (!st->comm) return ncclSuccess;                          // NCCL_SPLIT_NOCOLOR: *out stays NULL
    *out = newHandle(st);
    logComm(*st, what);
    return ncclSuccess;
  }
  st->createResult.store(ncclInProgress);
  *out = newHandle(st);
  std::thread([st, make, what] {
    runCreation(st, make);
    if (st->createResult.load() == ncclSuccess && st->comm) logComm(*st, what);
  }).detach();
  return ncclInProgress;
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
    if (threadGroup().depth > 0 && !st->comm) {
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

ncclResult_t applyConfig(const ncclConfig_t* config, CommState& state, const char* what) {
  if (!config) return ncclSuccess;
  if (config->size < offsetof(ncclConfig_t, blocking) + sizeof(int) || config->magic != NCCL_API_MAGIC) {
    return fail(nullptr, ncclInvalidArgument,
                strprintf("%s: the config (size %zu, magic 0x%x) was not initialised with NCCL_CONFIG_INITIALIZER",
                          what, config->size, config->magic));
  }
  auto has = [&](size_t offset, size_t bytes) { return config->size >= offset + bytes; };
  if (config->blocking != NCCL_CONFIG_UNDEF_INT) {
    if (config->blocking != 0 && config->blocking != 1)
      return fail(nullptr, ncclInvalidArgument,
                  strprintf("%s: config blocking %d is neither 0 nor 1", what, config->blocking));
    state.blocking = config->blocking == 1;
  }
  if (has(offsetof(ncclConfig_t, commName), sizeof(char*)) && config->commName) state.name = config->commName;
  // The rest shapes NCCL's kernels and networks (CTAs, clusters, traffic class, NVLS, ...): accepted, and named
  // once so that nobody wonders whether it took effect.
  static std::once_flag once;
  std::call_once(once, [&] {
    std::string unused;
    // Each field is read only if the caller's struct (possibly an older, smaller one) reaches it.
    auto note = [&](const char* name, size_t offset) {
      int v = NCCL_CONFIG_UNDEF_INT;
      if (!has(offset, sizeof(int))) return;
      std::memcpy(&v, reinterpret_cast<const char*>(config) + offset, sizeof(int));
      if (v != NCCL_CONFIG_UNDEF_INT) unused += std::string(unused.empty() ? "" : ", ") + name;
    };
    note("cgaClusterSize", offsetof(ncclConfig_t, cgaClusterSize));
    note("minCTAs", offsetof(ncclConfig_t, minCTAs));
    note("maxCTAs", offsetof(ncclConfig_t, maxCTAs));
    if (has(offsetof(ncclConfig_t, netName), sizeof(char*)) && config->netName)
      unused += std::string(unused.empty() ? "" : ", ") + "netName";
    note("splitShare", offsetof(ncclConfig_t, splitShare));
    note("trafficClass", offsetof(ncclConfig_t, trafficClass));
    note("collnetEnable", offsetof(ncclConfig_t, collnetEnable));
    note("CTAPolicy", offsetof(ncclConfig_t, CTAPolicy));
    note("shrinkShare", offsetof(ncclConfig_t, shrinkShare));
    note("nvlsCTAs", offsetof(ncclConfig_t, nvlsCTAs));
    note("nChannelsPerNetPeer", offsetof(ncclConfig_t, nChannelsPerNetPeer));
    note("nvlinkCentricSched", offsetof(ncclConfig_t, nvlinkCentricSched));
    note("graphUsageMode", offsetof(ncclConfig_t, graphUsageMode));
    note("numRmaCtx", offsetof(ncclConfig_t, numRmaCtx));
    note("maxP2pPeers", offsetof(ncclConfig_t, maxP2pPeers));
    note("graphStreamOrdering", offsetof(ncclConfig_t, graphStreamOrdering));
    if (!unused.empty())
      STRATA_INFO(kLogInit, "NCCL config fields that Strata does not use (accepted, no effect): %s", unused.c_str());
  });
  return ncclSuccess;
}

}  // namespace strata::nccl

using namespace strata;
using namespace strata::nccl;

// ---- versions, ids, errors -----------------------------------------------------------------------------

STRATA_NCCL_API(ncclResult_t, ncclGetVersion, int* version) {
  ensureEnvironment();
  if (!version) return fail(nullptr, ncclInvalidArgument, "ncclGetVersion: version is NULL");
  *version = NCCL_VERSION_CODE;  // the API this library implements: stacks gate features on it
  return ncclSuccess;
}

STRATA_NCCL_API(ncclResult_t, ncclGetUniqueId, ncclUniqueId* uniqueId) {
  ensureEnvironment();
  if (!uniqueId) return fail(nullptr, ncclInvalidArgument, "ncclGetUniqueId: uniqueId is NULL");
  if (commIdFromEnvironment(uniqueId)) return ncclSuccess;  // NCCL_COMM_ID
  return fromStrata(strataGetUniqueId(reinterpret_cast<strataUniqueId*>(uniqueId)));
}

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

// ---- creation ------------------------------------------------------------------------------------------

STRATA_NCCL_API(ncclResult_t, ncclCommInitRankConfig, ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                ncclConfig_t* config) {
  ensureEnvironment();
  const strataUniqueId id = toStrata(commId);
  return create(comm, config, "ncclCommInitRankConfig", [=](strataComm_t* c) {
    return prepareRoot(commId, rank) ? strataCommInitRank(c, nranks, id, rank) : strataSystemError;
  });
}

STRATA_NCCL_API(ncclResult_t, ncclCommInitRank, ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  return pncclCommInitRankConfig(comm, nranks, commId, rank, nullptr);
}

STRATA_NCCL_API(ncclResult_t, ncclCommInitRankScalable, ncclComm_t* newcomm, int nranks, int myrank, int nId,
                ncclUniqueId* commIds, ncclConfig_t* config) {
  ensureEnvironment();
  if (nId < 1 || !commIds)
    return fail(nullptr, ncclInvalidArgument,
                strprintf("ncclCommInitRankScalable: nId %d with commIds %p: at least one id is needed", nId,
                          static_cast<void*>(commIds)));
  // One Strata root serves any number of ranks: the first id is the rendezvous, the others are not needed.
  return pncclCommInitRankConfig(newcomm, nranks, commIds[0], myrank, config);
}

STRATA_NCCL_API(ncclResult_t, ncclCommInitAll, ncclComm_t* comms, int ndev, const int* devlist) {
  ensureEnvironment();
  if (!comms || ndev < 1)
    return fail(nullptr, ncclInvalidArgument,
                strprintf("ncclCommInitAll: comms %p, ndev %d (must be >= 1)", static_cast<void*>(comms), ndev));
  int count = 0;
  try {
    int driver = 0, runtime = 0;
    std::string why;
    if (cudaApi().probe(&count, &driver, &runtime, &why) != 0) throw CudaError(why);
  } catch (const Error& e) {
    return fail(nullptr, ncclUnhandledCudaError,
                strprintf("ncclCommInitAll makes one communicator per CUDA device of this process, and CUDA cannot be "
                          "used here (%s). For host buffers, make one communicator per process or thread with "
                          "ncclCommInitRank",
                          e.what()));
  }
  for (int i = 0; i < ndev; ++i) {
    const int dev = devlist ? devlist[i] : i;
    if (dev < 0 || dev >= count)
      return fail(
          nullptr, ncclInvalidArgument,
          strprintf("ncclCommInitAll: device %d (entry %d) is not one of this process's %d devices", dev, i, count));
  }
  ncclUniqueId id;
  if (ncclResult_t r = pncclGetUniqueId(&id); r != ncclSuccess) return r;
  std::vector<ncclResult_t> results(static_cast<size_t>(ndev), ncclSuccess);
  std::vector<std::thread> threads;
  for (int i = 0; i < ndev; ++i) {
    threads.emplace_back([&, i] {
      cudaApi().setDevice(devlist ? devlist[i] : i);
      results[static_cast<size_t>(i)] = pncclCommInitRank(&comms[i], ndev, id, i);
    });
  }
  for (auto& t : threads) t.join();
  for (ncclResult_t r : results)
    if (r != ncclSuccess) {
      for (int i = 0; i < ndev; ++i) pncclCommAbort(comms[i]);
      return fail(nullptr, r, "ncclCommInitAll: a communicator could not be created");
    }
  return ncclSuccess;
}

STRATA_NCCL_API(ncclResult_t, ncclCommSplit, ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                ncclConfig_t* config) {
  ncclResult_t err;
  CommState* parent = active(comm, "ncclCommSplit", &err);
  if (!parent) return err;
  strataComm_t s = parent->comm;
  if (color == NCCL_SPLIT_NOCOLOR) {
    // Takes part in the split and gets no communicator: done now whatever the config says.
    if (!newcomm) return fail(comm, ncclInvalidArgument, "ncclCommSplit: newcomm is NULL");
    *newcomm = nullptr;
    strataComm_t none = nullptr;
    return fromStrata(strataCommSplit(s, STRATA_SPLIT_NOCOLOR, key, &none, nullptr));
  }
  return create(
      newcomm, config, "ncclCommSplit", [=](strataComm_t* c) { return strataCommSplit(s, color, key, c, nullptr); },
      parent);
}

STRATA_NCCL_API(ncclResult_t, ncclCommShrink, ncclComm_t comm, int* excludeRanksList, int excludeRanksCount,
                ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags) {
  ncclResult_t err;
  CommState* parent = active(comm, "ncclCommShrink", &err);
  if (!parent) return err;
  strataComm_t s = parent->comm;
  std::vector<int> excluded;
  if (excludeRanksList && excludeRanksCount > 0)
    excluded.assign(excludeRanksList, excludeRanksList + excludeRanksCount);
  if (excludeRanksCount > 0 && !excludeRanksList)
    return fail(comm, ncclInvalidArgument, "ncclCommShrink: excludeRanksList is NULL");
  return create(
      newcomm, config, "ncclCommShrink",
      [=](strataComm_t* c) { return strataCommShrink(s, excluded.data(), excludeRanksCount, c, nullptr, shrinkFlags); },
      parent);
}

STRATA_NCCL_API(ncclResult_t, ncclCommGetUniqueId, ncclComm_t comm, ncclUniqueId* uniqueId) {
  ncclResult_t err;
  CommState* st = active(comm, "ncclCommGetUniqueId", &err);
  if (!st) return err;
  if (!uniqueId) return fail(comm, ncclInvalidArgument, "ncclCommGetUniqueId: uniqueId is NULL");
  std::lock_guard<std::mutex> lk(st->mu);
  if (st->growIdIssued)
    return fail(comm, ncclInvalidUsage,
                "ncclCommGetUniqueId: the id given before has not been used by ncclCommGrow yet");
  if (strataResult_t r = strataGetUniqueId(reinterpret_cast<strataUniqueId*>(uniqueId)); r != strataSuccess)
    return fromStrata(r);
  st->growIdIssued = true;
  return ncclSuccess;
}

// Grow: a new communicator of nRanks, made by a new rendezvous that the existing ranks (keeping their ranks) and
// the new ones (ranks from the old size up) join. The existing root passes the id from ncclCommGetUniqueId; the
// other existing ranks pass NULL and get it from the root over the old communicator.
STRATA_NCCL_API(ncclResult_t, ncclCommGrow, ncclComm_t comm, int nRanks, const ncclUniqueId* uniqueId, int rank,
                ncclComm_t* newcomm, ncclConfig_t* config) {
  ensureEnvironment();
  if (!comm) {
    if (!uniqueId || rank < 0 || rank >= nRanks)
      return fail(nullptr, ncclInvalidArgument,
                  strprintf("ncclCommGrow (a new rank): needs the unique id and a rank in [0, %d); got id %p, rank %d",
                            nRanks, static_cast<const void*>(uniqueId), rank));
    const strataUniqueId id = toStrata(*uniqueId);
    return create(newcomm, config, "ncclCommGrow",
                  [=](strataComm_t* c) { return strataCommInitRank(c, nRanks, id, rank); });
  }
  ncclResult_t err;
  CommState* st = active(comm, "ncclCommGrow", &err);
  if (!st) return err;
  int me = 0, size = 0;
  strataCommUserRank(st->comm, &me);
  strataCommCount(st->comm, &size);
  if (rank != -1 || nRanks <= size)
    return fail(comm, ncclInvalidArgument,
                strprintf("ncclCommGrow on rank %d of %d: an existing rank passes rank -1 and nRanks > %d (got rank "
                          "%d, nRanks %d)",
                          me, size, size, rank, nRanks));
  if (me == 0 && !uniqueId)
    return fail(comm, ncclInvalidArgument, "ncclCommGrow on rank 0: the root passes the id of ncclCommGetUniqueId");
  ncclUniqueId id{};
  if (me == 0) id = *uniqueId;
  if (strataResult_t r = strataBroadcast(&id, &id, sizeof(id), strataUint8, 0, st->comm, nullptr); r != strataSuccess)
    return fromStrata(r);
  if (me == 0) {
    std::lock_guard<std::mutex> lk(st->mu);
    st->growIdIssued = false;
  }
  const strataUniqueId sid = toStrata(id);
  return create(
      newcomm, config, "ncclCommGrow", [=](strataComm_t* c) { return strataCommInitRank(c, nRanks, sid, me); }, st);
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
