// The C ABI's communicators: unique ids, creation (from an id, from the environment, split, shrink), revoke, destroy
// and abort, the flight recorder, queries, the cost model's choice (strataCommExplain) and reduction operators.
#include <array>
#include <cstdio>
#include <iterator>

#include "api/c_api_handles.h"
#include "bootstrap/bootstrap.h"
#include "core/comm_config.h"
#include "core/communicator.h"
#include "kernels/reduce.h"
#include "strata/strata.h"
#include "util/error.h"
#include "util/log.h"

using namespace strata;

extern "C" {

strataResult_t strataGetVersion(int* version) {
  if (!version) return recordApiError(nullptr, strataInvalidArgument, "strataGetVersion: version is NULL");
  *version = STRATA_VERSION_CODE;
  return strataSuccess;
}

strataResult_t strataGetUniqueId(strataUniqueId* uniqueId) {
  if (!uniqueId) return recordApiError(nullptr, strataInvalidArgument, "strataGetUniqueId: uniqueId is NULL");
  return guarded(nullptr, [&] {
    Config config = Config::fromEnv();
    std::array<uint8_t, 16> secret = randomSecret();
    UniqueIdInfo info = startRootService(config, "", 0, secret, -1);
    *uniqueId = encodeUniqueId(info);
  });
}

strataResult_t strataCommInitRankConfig(strataComm_t* comm, int nranks, strataUniqueId commId, int rank,
                                        const strataConfig_t* config) {
  if (!comm) return recordApiError(nullptr, strataInvalidArgument, "strataCommInitRank: comm is NULL");
  *comm = nullptr;
  if (nranks < 1)
    return recordApiError(nullptr, strataInvalidArgument, strprintf("strataCommInitRank: nranks %d is < 1", nranks));
  if (rank < 0 || rank >= nranks)
    return recordApiError(nullptr, strataInvalidArgument,
                          strprintf("strataCommInitRank: rank %d is not in [0, %d)", rank, nranks));
  CommSettings settings;
  strataResult_t r =
      guarded(nullptr, [&] { settings = applyCommConfig(config, Config::fromEnv(), "", "strataCommInitRankConfig"); });
  if (r != strataSuccess) return r;
  auto make = [settings, commId, rank, nranks] {
    UniqueIdInfo info = decodeUniqueId(commId);
    auto boot = Bootstrap::connect(settings.config, info, rank, nranks);
    return CommImpl::create(settings.config, std::move(boot), settings.name);
  };
  if (!settings.blocking) return registerPendingComm(comm, make);
  std::shared_ptr<CommImpl> impl;
  r = guarded(nullptr, [&] { impl = make(); });
  if (r != strataSuccess) return r;
  return registerComm(comm, std::move(impl));
}

strataResult_t strataCommInitRank(strataComm_t* comm, int nranks, strataUniqueId commId, int rank) {
  return strataCommInitRankConfig(comm, nranks, commId, rank, nullptr);
}

strataResult_t strataCommInitFromEnv(strataComm_t* comm) {
  if (!comm) return recordApiError(nullptr, strataInvalidArgument, "strataCommInitFromEnv: comm is NULL");
  std::shared_ptr<CommImpl> impl;
  strataResult_t r = guarded(nullptr, [&] {
    Config config = Config::fromEnv();
    EnvLaunch launch = discoverEnvLaunch();
    impl = CommImpl::create(config, connectFromEnv(config, launch));
  });
  if (r != strataSuccess) return r;
  return registerComm(comm, std::move(impl));
}

strataResult_t strataCommSplit(strataComm_t comm, int color, int key, strataComm_t* newcomm,
                               const strataConfig_t* config) {
  Held held(comm);
  if (!held) return held.refuse("strataCommSplit");
  if (!newcomm) return recordApiError(comm, strataInvalidArgument, "strataCommSplit: newcomm is NULL");
  if (color < 0 && color != STRATA_SPLIT_NOCOLOR)
    return recordApiError(comm, strataInvalidArgument, strprintf("strataCommSplit: color %d is negative", color));
  *newcomm = nullptr;
  std::shared_ptr<CommImpl> child;
  strataResult_t r = guarded(comm, [&] {
    CommImpl& parent = *comm->impl;
    const CommSettings settings = applyCommConfig(config, parent.config(), parent.name(), "strataCommSplit");
    child = parent.split(color, key, &settings.config, &settings.name);
  });
  if (r != strataSuccess || !child) return r;
  return registerComm(newcomm, std::move(child));
}

strataResult_t strataCommShrink(strataComm_t comm, const int* excludeRanks, int excludeCount, strataComm_t* newcomm,
                                const strataConfig_t* config, int flags) {
  Held held(comm);
  if (!held) return held.refuse("strataCommShrink");
  if (!newcomm) return recordApiError(comm, strataInvalidArgument, "strataCommShrink: newcomm is NULL");
  *newcomm = nullptr;
  if (flags != STRATA_SHRINK_DEFAULT && flags != STRATA_SHRINK_ABORT)
    return recordApiError(
        comm, strataInvalidArgument,
        strprintf("strataCommShrink: flags %d is neither STRATA_SHRINK_DEFAULT (0) nor STRATA_SHRINK_ABORT (1)",
                  flags));
  const int n = comm->impl->size();
  if (excludeCount < 0 || excludeCount >= n)
    return recordApiError(
        comm, strataInvalidArgument,
        strprintf("strataCommShrink: excludeCount %d is out of range [0, %d) (communicator of %d ranks)", excludeCount,
                  n, n));
  if (excludeCount > 0 && !excludeRanks)
    return recordApiError(comm, strataInvalidArgument,
                          strprintf("strataCommShrink: excludeRanks is NULL with excludeCount %d", excludeCount));
  std::vector<int> excluded(excludeRanks, excludeRanks + excludeCount);
  std::shared_ptr<CommImpl> child;
  strataResult_t r = guarded(comm, [&] {
    CommImpl& parent = *comm->impl;
    const CommSettings settings = applyCommConfig(config, parent.config(), parent.name(), "strataCommShrink");
    child = parent.shrink(excluded, (flags & STRATA_SHRINK_ABORT) != 0, &settings.config, &settings.name);
  });
  if (r != strataSuccess || !child) return r;
  return registerComm(newcomm, std::move(child));
}

strataResult_t strataCommRevoke(strataComm_t comm, int flags) {
  Held held(comm);
  if (!held) return held.refuse("strataCommRevoke");
  if (flags != STRATA_REVOKE_DEFAULT)
    return recordApiError(comm, strataInvalidArgument,
                          strprintf("strataCommRevoke: flags %d must be STRATA_REVOKE_DEFAULT (0)", flags));
  return guarded(comm, [&] { comm->impl->revoke(); });
}

static strataResult_t release(strataComm_t comm, bool abort) {
  if (!unregisterComm(comm))
    return recordApiError(nullptr, strataInvalidUsage, "invalid communicator (NULL or already destroyed)");
  if (comm->pending && comm->forkGeneration == forkGeneration()) {
    // A non-blocking creation cannot be interrupted: its own deadline ends it. Then as for any handle, or, if it
    // failed, only the handle goes.
    comm->pending->thread.join();
    if (!comm->impl) {
      waitUnheld(comm);
      delete comm;
      return strataSuccess;
    }
  }
  if (comm->forkGeneration != forkGeneration()) {
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
    return recordApiError(comm, strataInvalidArgument,
                          "strataCommDumpFlightRecorder: dir is NULL and STRATA_FLIGHT_RECORDER_DIR is not set");
  return guarded(comm, [&] { comm->impl->dumpFlightRecorder(where, "strataCommDumpFlightRecorder"); });
}

strataResult_t strataCommGetAsyncError(strataComm_t comm, strataResult_t* asyncError) {
  Held held(comm, Held::kNoWait);
  if (!held) return held.refuse("strataCommGetAsyncError");
  if (!asyncError) return recordApiError(comm, strataInvalidArgument, "strataCommGetAsyncError: asyncError is NULL");
  if (comm->pending) {  // a non-blocking creation: in progress, failed, or done (then as any communicator)
    std::lock_guard<std::mutex> lk(comm->pending->mutex);
    if (!comm->pending->done || comm->pending->result != strataSuccess) {
      *asyncError = comm->pending->result;
      return strataSuccess;
    }
  }
  *asyncError = comm->impl->asyncError();
  if (*asyncError != strataSuccess) {
    // Says why through strataGetLastError(comm), as a failed call would (once: polling does not log it again).
    const std::string why = comm->impl->failure().message();
    bool known;
    {
      std::lock_guard<std::mutex> lk(comm->errorMutex);
      known = comm->lastError == why;
    }
    if (!known) recordApiError(comm, *asyncError, why);
  }
  return strataSuccess;
}

strataResult_t strataCommCount(const strataComm_t comm, int* count) {
  Held held(comm);
  if (!held) return held.refuse("strataCommCount");
  if (!count) return recordApiError(comm, strataInvalidArgument, "strataCommCount: count is NULL");
  *count = comm->impl->size();
  return strataSuccess;
}

strataResult_t strataCommUserRank(const strataComm_t comm, int* rank) {
  Held held(comm);
  if (!held) return held.refuse("strataCommUserRank");
  if (!rank) return recordApiError(comm, strataInvalidArgument, "strataCommUserRank: rank is NULL");
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
    return recordApiError(comm, strataInvalidArgument, strprintf("strataCommExplain: invalid collective %d", c));
  if (strataResult_t r = checkDtype("strataCommExplain", comm, datatype); r != strataSuccess) return r;
  if (algorithm && algorithmLen == 0)
    return recordApiError(comm, strataInvalidArgument, "strataCommExplain: algorithmLen is 0");
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
  if (!op || !scalar)
    return recordApiError(comm, strataInvalidArgument, "strataRedOpCreatePreMulSum: op or scalar is NULL");
  if (strataResult_t r = checkDtype("strataRedOpCreatePreMulSum", comm, datatype); r != strataSuccess) return r;
  if (rawEnum(residence) != strataScalarHostImmediate)
    return recordApiError(comm, strataInvalidArgument,
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

}  // extern "C"
