// The NCCL drop-in's communicator creation: versions and unique ids, then creation blocking, non-blocking (on a
// detached thread), inside a group (at the outermost ncclGroupEnd), from several ids, for all devices; split,
// shrink and grow.
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "api/c_api_internal.h"
#include "kernels/cuda_loader.h"
#include "nccl/nccl_env.h"
#include "nccl/nccl_state.h"
#include "util/error.h"

static_assert(sizeof(ncclUniqueId) == sizeof(strataUniqueId), "NCCL's unique id and Strata's have one size");
static_assert(NCCL_SPLIT_NOCOLOR == STRATA_SPLIT_NOCOLOR);
static_assert(NCCL_SHRINK_DEFAULT == STRATA_SHRINK_DEFAULT && NCCL_SHRINK_ABORT == STRATA_SHRINK_ABORT);

namespace strata::nccl {
namespace {

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

// Makes the Strata communicator with the settings Strata takes from the NCCL config (strataConfig_t).
using Make = std::function<strataResult_t(strataComm_t*, const strataConfig_t*)>;

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
  strataConfig_t config = STRATA_CONFIG_INITIALIZER;
  config.commName = st->name.empty() ? nullptr : st->name.c_str();  // blocking: this layer runs non-blocking ones
  strataResult_t r = make(&c, &config);
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
  if (apiGroupDepth() > 0) {
    GroupExtras& g = groupExtras();
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

}  // namespace
}  // namespace strata::nccl

using namespace strata;
using namespace strata::nccl;

// ---- versions and ids ------------------------------------------------------------------------------------

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

// ---- creation ------------------------------------------------------------------------------------------

STRATA_NCCL_API(ncclResult_t, ncclCommInitRankConfig, ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                ncclConfig_t* config) {
  ensureEnvironment();
  const strataUniqueId id = toStrata(commId);
  return create(comm, config, "ncclCommInitRankConfig", [=](strataComm_t* c, const strataConfig_t* cfg) {
    return prepareRoot(commId, rank) ? strataCommInitRankConfig(c, nranks, id, rank, cfg) : strataSystemError;
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
      newcomm, config, "ncclCommSplit",
      [=](strataComm_t* c, const strataConfig_t* cfg) { return strataCommSplit(s, color, key, c, cfg); }, parent);
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
      [=](strataComm_t* c, const strataConfig_t* cfg) {
        return strataCommShrink(s, excluded.data(), excludeRanksCount, c, cfg, shrinkFlags);
      },
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
    return create(newcomm, config, "ncclCommGrow", [=](strataComm_t* c, const strataConfig_t* cfg) {
      return strataCommInitRankConfig(c, nRanks, id, rank, cfg);
    });
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
      newcomm, config, "ncclCommGrow",
      [=](strataComm_t* c, const strataConfig_t* cfg) { return strataCommInitRankConfig(c, nRanks, sid, me, cfg); },
      st);
}
