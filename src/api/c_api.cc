// The C ABI's collectives, send/recv and barrier: argument checks, which calls are device calls, and the one
// validation of a call before it runs, now or at the end of its group.
#include <span>

#include "api/c_api_group.h"
#include "api/c_api_handles.h"
#include "core/communicator.h"
#include "kernels/cuda_loader.h"
#include "strata/strata.h"

namespace strata {
namespace {

// A call is a device call when it passes a CUDA stream, or when a buffer is device memory (isDeviceCall).
void classify(CollCall& call, strataStream_t stream) {
  if (stream) cudaApi();  // throws CudaError naming why CUDA cannot be used (no driver, no device, no CUDA build)
  if (!isDeviceCall(call.sendbuff, call.recvbuff, stream)) return;
  call.device = true;
  call.stream = stream;
}

strataResult_t issue(const char* what, strataComm* comm, CollCall call, strataStream_t stream) {
  Held held(comm);
  if (!held) return held.refuse(what);
  return guarded(comm, [&] {
    classify(call, stream);
    // The one validation of the call: a group member's error belongs to it, not to strataGroupEnd, and device
    // work, which completes later on the stream, reports bad arguments now.
    comm->impl->validate(call);
    if (apiGroupDepth() > 0) {
      holdGroupCall(comm->impl, call);
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
  if (apiGroupDepth() == 0) {
    Held held(comm);
    if (held && peer == comm->impl->rank() && count > 0)
      return recordApiError(comm, strataInvalidUsage, "strataSend to self outside a group has no matching receive");
  }
  return issue("strataSend", comm, c, stream);
}

strataResult_t strataRecv(void* recvbuff, size_t count, strataDataType_t datatype, int peer, strataComm_t comm,
                          strataStream_t stream) {
  if (strataResult_t r = checkDtype("strataRecv", comm, datatype); r != strataSuccess) return r;
  CollCall c{CollKind::kRecv, nullptr, recvbuff, count, datatype, strataSum, 0, peer};
  if (apiGroupDepth() == 0) {
    Held held(comm);
    if (held && peer == comm->impl->rank() && count > 0)
      return recordApiError(comm, strataInvalidUsage, "strataRecv from self outside a group has no matching send");
  }
  return issue("strataRecv", comm, c, stream);
}

strataResult_t strataRecvAny(void* recvbuff, size_t count, strataDataType_t datatype, int* source, strataComm_t comm,
                             strataStream_t stream) {
  if (strataResult_t r = checkDtype("strataRecvAny", comm, datatype); r != strataSuccess) return r;
  CollCall c{CollKind::kRecv, nullptr, recvbuff, count, datatype, strataSum, 0, kAnySource};
  c.source = source;
  return issue("strataRecvAny", comm, c, stream);
}

strataResult_t strataBarrier(strataComm_t comm, strataStream_t stream) {
  CollCall c{CollKind::kBarrier, nullptr, nullptr, 0, strataInt8, strataSum, 0, -1};
  return issue("strataBarrier", comm, c, stream);
}

}  // extern "C"
