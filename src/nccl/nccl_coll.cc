// The NCCL drop-in's collectives, send/recv, reduction operators and groups. Each call goes straight to its
// Strata twin (same arguments, same enum values); host buffers with no stream run on the host, device buffers on
// the stream. A non-blocking communicator (config blocking = 0) runs host calls as asynchronous work and returns
// ncclInProgress; ncclCommGetAsyncError says when they are done.
#include <cstring>
#include <string>
#include <thread>

#include "api/c_api_internal.h"
#include "nccl/nccl_state.h"
#include "util/dtype.h"
#include "util/error.h"

static_assert(int(ncclSum) == int(strataSum) && int(ncclProd) == int(strataProd) && int(ncclMax) == int(strataMax) &&
              int(ncclMin) == int(strataMin) && int(ncclAvg) == int(strataAvg) && int(ncclNumOps) == int(strataNumOps));
static_assert(int(ncclInt8) == int(strataInt8) && int(ncclUint8) == int(strataUint8) &&
              int(ncclInt32) == int(strataInt32) && int(ncclUint32) == int(strataUint32) &&
              int(ncclInt64) == int(strataInt64) && int(ncclUint64) == int(strataUint64) &&
              int(ncclFloat16) == int(strataFloat16) && int(ncclFloat32) == int(strataFloat32) &&
              int(ncclFloat64) == int(strataFloat64) && int(ncclBfloat16) == int(strataBfloat16) &&
              int(ncclFloat8e4m3) == int(strataFloat8e4m3) && int(ncclFloat8e5m2) == int(strataFloat8e5m2) &&
              int(ncclNumTypes) == int(strataNumTypes));
static_assert(int(ncclScalarDevice) == int(strataScalarDevice) &&
              int(ncclScalarHostImmediate) == int(strataScalarHostImmediate));

namespace strata::nccl {

GroupExtras& groupExtras() {
  thread_local GroupExtras g;
  return g;
}

namespace {

inline strataDataType_t dt(ncclDataType_t d) { return static_cast<strataDataType_t>(d); }

// A call refused inside a group fails the group (NCCL's ncclGroupEnd returns its error and runs nothing).
ncclResult_t poisonGroup(ncclResult_t r) {
  GroupExtras& g = groupExtras();
  if (r != ncclSuccess && r != ncclInProgress && g.error == ncclSuccess) {
    g.error = r;
    g.errorMessage = pncclGetLastError(nullptr);
  }
  return r;
}

// One call on `comm`: `issue(strataComm)` makes the Strata calls. `collective` and `count` describe it for
// ncclGroupSimulateEnd (-1: send/recv).
template <typename Issue>
ncclResult_t call(ncclComm_t comm, const char* what, const void* a, const void* b, cudaStream_t stream, int collective,
                  size_t count, ncclDataType_t dtype, Issue&& issue) {
  ncclResult_t err;
  CommState* st = usable(comm, what, &err);
  if (!st) return apiGroupDepth() > 0 ? poisonGroup(err) : err;
  if (st->suspended.load(std::memory_order_relaxed)) {
    err = fail(comm, ncclInvalidUsage, std::string(what) + ": the communicator is suspended (ncclCommSuspend)");
    return apiGroupDepth() > 0 ? poisonGroup(err) : err;
  }
  // A non-blocking communicator runs its host calls (not isDeviceCall: host buffers, no stream) as asynchronous
  // work: its group's, or a group of the call alone.
  if (apiGroupDepth() > 0) {
    GroupExtras& g = groupExtras();
    g.calls.push_back(GroupCall{st->comm, collective, count, dtype});
    if (!st->blocking && !isDeviceCall(a, b, stream)) g.nonBlocking.push_back(comm->state);
    return poisonGroup(fromStrata(issue(st->comm)));
  }
  if (st->blocking || isDeviceCall(a, b, stream)) return fromStrata(issue(st->comm));
  strataGroupStart();
  const strataResult_t r = issue(st->comm);
  strataWork_t work = nullptr;
  const strataResult_t e = strataGroupEndAsync(&work);
  if (r != strataSuccess || e != strataSuccess) {
    strataWorkFree(work);
    return fromStrata(r != strataSuccess ? r : e);
  }
  std::lock_guard<std::mutex> lk(st->mu);
  st->pending.push_back(adoptWork(work));
  return ncclInProgress;
}

// Runs the creations called inside the group that just ended, concurrently (each is collective with others that
// this thread may be making too). Returns the first failure.
ncclResult_t runCreations(std::vector<std::function<ncclResult_t()>> creations) {
  std::vector<ncclResult_t> results(creations.size(), ncclSuccess);
  std::vector<std::thread> threads;
  for (size_t i = 1; i < creations.size(); ++i) threads.emplace_back([&, i] { results[i] = creations[i](); });
  if (!creations.empty()) results[0] = creations[0]();
  for (auto& t : threads) t.join();
  for (ncclResult_t r : results)
    if (r != ncclSuccess) return r;
  return ncclSuccess;
}

}  // namespace
}  // namespace strata::nccl

using namespace strata;
using namespace strata::nccl;

// ---- collectives -----------------------------------------------------------------------------------------

STRATA_NCCL_API(ncclResult_t, ncclAllReduce, const void* sendbuff, void* recvbuff, size_t count,
                ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return call(
      comm, "ncclAllReduce", sendbuff, recvbuff, stream, strataCollAllReduce, count, datatype, [&](strataComm_t c) {
        return strataAllReduce(sendbuff, recvbuff, count, dt(datatype), static_cast<strataRedOp_t>(op), c, stream);
      });
}

STRATA_NCCL_API(ncclResult_t, ncclReduceScatter, const void* sendbuff, void* recvbuff, size_t recvcount,
                ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return call(comm, "ncclReduceScatter", sendbuff, recvbuff, stream, strataCollReduceScatter, recvcount, datatype,
              [&](strataComm_t c) {
                return strataReduceScatter(sendbuff, recvbuff, recvcount, dt(datatype), static_cast<strataRedOp_t>(op),
                                           c, stream);
              });
}

STRATA_NCCL_API(ncclResult_t, ncclAllGather, const void* sendbuff, void* recvbuff, size_t sendcount,
                ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  return call(comm, "ncclAllGather", sendbuff, recvbuff, stream, strataCollAllGather, sendcount, datatype,
              [&](strataComm_t c) { return strataAllGather(sendbuff, recvbuff, sendcount, dt(datatype), c, stream); });
}

STRATA_NCCL_API(ncclResult_t, ncclBroadcast, const void* sendbuff, void* recvbuff, size_t count,
                ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream) {
  return call(
      comm, "ncclBroadcast", sendbuff, recvbuff, stream, strataCollBroadcast, count, datatype,
      [&](strataComm_t c) { return strataBroadcast(sendbuff, recvbuff, count, dt(datatype), root, c, stream); });
}

STRATA_NCCL_API(ncclResult_t, ncclBcast, void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                cudaStream_t stream) {
  return pncclBroadcast(buff, buff, count, datatype, root, comm, stream);
}

STRATA_NCCL_API(ncclResult_t, ncclReduce, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  return call(comm, "ncclReduce", sendbuff, recvbuff, stream, strataCollReduce, count, datatype, [&](strataComm_t c) {
    return strataReduce(sendbuff, recvbuff, count, dt(datatype), static_cast<strataRedOp_t>(op), root, c, stream);
  });
}

STRATA_NCCL_API(ncclResult_t, ncclAlltoAll, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                ncclComm_t comm, cudaStream_t stream) {
  return call(comm, "ncclAlltoAll", sendbuff, recvbuff, stream, strataCollAllToAll, count, datatype,
              [&](strataComm_t c) { return strataAllToAll(sendbuff, recvbuff, count, dt(datatype), c, stream); });
}

// Gather and scatter are a group of sends and receives (as NCCL composed them before it had them): the root
// exchanges one block with every rank, itself included.
STRATA_NCCL_API(ncclResult_t, ncclGather, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                int root, ncclComm_t comm, cudaStream_t stream) {
  return call(comm, "ncclGather", sendbuff, recvbuff, stream, -1, count, datatype, [&](strataComm_t c) {
    int rank = 0, n = 0;
    strataCommUserRank(c, &rank);
    strataCommCount(c, &n);
    if (root < 0 || root >= n)
      return recordApiError(c, strataInvalidArgument,
                            strprintf("ncclGather: root %d is out of range [0, %d)", root, n));
    if (rank == root && !recvbuff && count)
      return recordApiError(c, strataInvalidArgument, "ncclGather: recvbuff is NULL on the root");
    const size_t block = count * (dtypeValid(datatype) ? dtypeSize(dt(datatype)) : 1);
    strataGroupStart();
    strataResult_t r = strataSend(sendbuff, count, dt(datatype), root, c, stream);
    for (int p = 0; rank == root && p < n && r == strataSuccess; ++p)
      r = strataRecv(static_cast<char*>(recvbuff) + block * static_cast<size_t>(p), count, dt(datatype), p, c, stream);
    const strataResult_t e = strataGroupEnd();
    return r != strataSuccess ? r : e;
  });
}

STRATA_NCCL_API(ncclResult_t, ncclScatter, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                int root, ncclComm_t comm, cudaStream_t stream) {
  return call(comm, "ncclScatter", sendbuff, recvbuff, stream, -1, count, datatype, [&](strataComm_t c) {
    int rank = 0, n = 0;
    strataCommUserRank(c, &rank);
    strataCommCount(c, &n);
    if (root < 0 || root >= n)
      return recordApiError(c, strataInvalidArgument,
                            strprintf("ncclScatter: root %d is out of range [0, %d)", root, n));
    if (rank == root && !sendbuff && count)
      return recordApiError(c, strataInvalidArgument, "ncclScatter: sendbuff is NULL on the root");
    const size_t block = count * (dtypeValid(datatype) ? dtypeSize(dt(datatype)) : 1);
    strataGroupStart();
    strataResult_t r = strataSuccess;
    for (int p = 0; rank == root && p < n && r == strataSuccess; ++p)
      r = strataSend(static_cast<const char*>(sendbuff) + block * static_cast<size_t>(p), count, dt(datatype), p, c,
                     stream);
    if (r == strataSuccess) r = strataRecv(recvbuff, count, dt(datatype), root, c, stream);
    const strataResult_t e = strataGroupEnd();
    return r != strataSuccess ? r : e;
  });
}

STRATA_NCCL_API(ncclResult_t, ncclSend, const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
                ncclComm_t comm, cudaStream_t stream) {
  return call(comm, "ncclSend", sendbuff, nullptr, stream, -1, count, datatype,
              [&](strataComm_t c) { return strataSend(sendbuff, count, dt(datatype), peer, c, stream); });
}

STRATA_NCCL_API(ncclResult_t, ncclRecv, void* recvbuff, size_t count, ncclDataType_t datatype, int peer,
                ncclComm_t comm, cudaStream_t stream) {
  return call(comm, "ncclRecv", nullptr, recvbuff, stream, -1, count, datatype,
              [&](strataComm_t c) { return strataRecv(recvbuff, count, dt(datatype), peer, c, stream); });
}

// ---- reduction operators ------------------------------------------------------------------------------------

STRATA_NCCL_API(ncclResult_t, ncclRedOpCreatePreMulSum, ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
                ncclScalarResidence_t residence, ncclComm_t comm) {
  ncclResult_t err;
  CommState* st = active(comm, "ncclRedOpCreatePreMulSum", &err);
  if (!st) return err;
  strataRedOp_t sop;
  const strataResult_t r =
      strataRedOpCreatePreMulSum(&sop, scalar, dt(datatype), static_cast<strataScalarResidence_t>(residence), st->comm);
  if (r == strataSuccess && op) *op = static_cast<ncclRedOp_t>(sop);
  return fromStrata(r);
}

STRATA_NCCL_API(ncclResult_t, ncclRedOpDestroy, ncclRedOp_t op, ncclComm_t comm) {
  ncclResult_t err;
  CommState* st = usable(comm, "ncclRedOpDestroy", &err);
  if (!st) return err;
  return fromStrata(strataRedOpDestroy(static_cast<strataRedOp_t>(op), st->comm));
}

// ---- groups ------------------------------------------------------------------------------------------------

// An NCCL group is the core's group (one depth, apiGroupDepth()); GroupExtras holds what NCCL adds to it.
STRATA_NCCL_API(ncclResult_t, ncclGroupStart) { return fromStrata(strataGroupStart()); }

namespace {

// The end of the calling thread's group. `simInfo`: price its calls instead of running them; `discard`: drop
// them (a refused ncclGroupSimulateEnd still leaves its group).
ncclResult_t groupEnd(ncclSimInfo_t* simInfo, bool discard = false) {
  const int depth = apiGroupDepth();
  if (depth <= 0)
    return fail(
        nullptr, ncclInvalidUsage,
        simInfo || discard ? "ncclGroupSimulateEnd without ncclGroupStart" : "ncclGroupEnd without ncclGroupStart");
  if (depth > 1) return fromStrata(simInfo || discard ? discardApiGroup() : strataGroupEnd());
  // The outermost end. The core's group stays open (depth 1) until one of the core's ends below closes it; what
  // runs before that (the creations, the pricing) makes only Strata's calls, which do not read the depth.
  GroupExtras& g = groupExtras();
  auto creations = std::move(g.creations);
  auto creationStates = std::move(g.creationStates);
  auto nonBlocking = std::move(g.nonBlocking);
  auto calls = std::move(g.calls);
  const ncclResult_t refused = g.error;
  const std::string refusedWhy = g.errorMessage;
  g.creations.clear();
  g.creationStates.clear();
  g.nonBlocking.clear();
  g.calls.clear();
  g.error = ncclSuccess;
  g.errorMessage.clear();
  if (refused != ncclSuccess || discard) {
    // Nothing of the group runs: its calls are dropped, and the communicators it was creating are not made.
    discardApiGroup();
    for (auto& st : creationStates) {
      std::lock_guard<std::mutex> lk(st->mu);
      st->createError = refused != ncclSuccess ? "the group that created it failed: " + refusedWhy
                                               : std::string("the group that created it was dropped");
      st->createResult.store(refused != ncclSuccess ? refused : ncclInvalidUsage);
    }
    if (discard) return ncclSuccess;
    return fail(nullptr, refused, "ncclGroupEnd: a call of the group was refused, so nothing of it ran: " + refusedWhy);
  }
  // Communicators created in this group first: the group's collectives (if any) may use them.
  ncclResult_t result = runCreations(std::move(creations));
  if (simInfo) {
    // Strata's cost model prices each call (send/recv as a broadcast of the same bytes, a pipeline over the same
    // links); nothing runs.
    double us = 0;
    for (const GroupCall& c : calls) {
      double t = 0;
      strataCommExplain(c.comm, static_cast<strataCollective_t>(c.collective < 0 ? strataCollBroadcast : c.collective),
                        c.count, static_cast<strataDataType_t>(c.dtype), nullptr, 0, &t);
      us += t;
    }
    simInfo->estimatedTime = static_cast<float>(us);
    const ncclResult_t d = fromStrata(discardApiGroup());
    return result != ncclSuccess ? result : d;
  }
  if (nonBlocking.empty()) {
    const ncclResult_t e = fromStrata(strataGroupEnd());
    return result != ncclSuccess ? result : e;
  }
  // Host work of a non-blocking communicator: the group runs in the background; every non-blocking communicator
  // in it reports the group's completion.
  strataWork_t work = nullptr;
  if (strataResult_t e = strataGroupEndAsync(&work); e != strataSuccess) return fromStrata(e);
  const PendingWork shared = adoptWork(work);
  for (auto& st : nonBlocking) {
    std::lock_guard<std::mutex> lk(st->mu);
    st->pending.push_back(shared);
  }
  return ncclInProgress;
}

}  // namespace

STRATA_NCCL_API(ncclResult_t, ncclGroupEnd) { return groupEnd(nullptr); }

STRATA_NCCL_API(ncclResult_t, ncclGroupSimulateEnd, ncclSimInfo_t* simInfo) {
  // As NCCL: the group ends either way; a bad simInfo drops it.
  const char* bad = !simInfo ? "simInfo is NULL"
                    : simInfo->size < sizeof(ncclSimInfo_t) || simInfo->magic != 0x74685283u
                        ? "simInfo was not initialised with NCCL_SIM_INFO_INITIALIZER"
                        : nullptr;
  if (!bad) return groupEnd(simInfo);
  if (ncclResult_t r = groupEnd(nullptr, true); r != ncclSuccess) return r;
  return fail(nullptr, ncclInvalidArgument, std::string("ncclGroupSimulateEnd: ") + bad + "; the group is dropped");
}
