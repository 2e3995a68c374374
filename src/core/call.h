// One user call as the core sees it, and what it is in the words of error messages. Plain data, shared by the
// host executor, the work queue and the device engine.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "collectives/coll_args.h"
#include "strata/strata.h"

namespace strata {

/// One user call. Validated once, where it enters (c_api.cc: the blocking call, a group member, a device call);
/// everything after that trusts it.
struct CollCall {
  CollKind kind = CollKind::kAllReduce;
  const void* sendbuff = nullptr;
  void* recvbuff = nullptr;
  size_t count = 0;
  strataDataType_t dtype = strataFloat32;
  strataRedOp_t op = strataSum;
  int root = 0;
  int peer = -1;
  /// Device buffers (a CUDA stream was passed, or a buffer is device memory): run by the DeviceEngine on
  /// `stream` (nullptr: the legacy default stream).
  bool device = false;
  void* stream = nullptr;
};

/// What an executing operation is, for error messages. Formatted only when something goes wrong, so the
/// small-message fast path does no string work.
struct OpLabel {
  int rank = 0;
  CollKind kind = CollKind::kAllReduce;
  const char* name = nullptr;  // overrides the collective's name (send/recv groups)
  uint64_t seq = 0;
  size_t count = 0;
  strataDataType_t dtype = strataFloat32;
  const char* algorithm = "";
  size_t nops = 0;  // send/recv groups: number of calls
  std::string str() const;
};

inline bool isRooted(CollKind k) { return k == CollKind::kBroadcast || k == CollKind::kReduce; }
inline bool isReducing(CollKind k) {
  return k == CollKind::kAllReduce || k == CollKind::kReduceScatter || k == CollKind::kReduce;
}
inline bool isP2P(CollKind k) { return k == CollKind::kSend || k == CollKind::kRecv; }

/// Elements of sendbuff and recvbuff the call touches on `rank` of `nranks`.
inline void callBufferElems(const CollCall& c, int nranks, int rank, size_t* sendElems, size_t* recvElems) {
  const size_t n = static_cast<size_t>(nranks);
  switch (c.kind) {
    case CollKind::kAllReduce:
      *sendElems = c.count;
      *recvElems = c.count;
      break;
    case CollKind::kReduceScatter:
      *sendElems = c.count * n;
      *recvElems = c.count;
      break;
    case CollKind::kAllGather:
      *sendElems = c.count;
      *recvElems = c.count * n;
      break;
    case CollKind::kBroadcast:
      *sendElems = rank == c.root ? c.count : 0;
      *recvElems = c.count;
      break;
    case CollKind::kReduce:
      *sendElems = c.count;
      *recvElems = rank == c.root ? c.count : 0;
      break;
    case CollKind::kAllToAll:
      *sendElems = c.count * n;
      *recvElems = c.count * n;
      break;
    case CollKind::kSend:
      *sendElems = c.count;
      *recvElems = 0;
      break;
    case CollKind::kRecv:
      *sendElems = 0;
      *recvElems = c.count;
      break;
    case CollKind::kBarrier:
      *sendElems = 0;
      *recvElems = 0;
      break;
  }
}

/// True when the call is "in place" as NCCL defines it for this collective.
inline bool callInPlace(const CollCall& c, int rank, size_t esize) {
  const char* s = static_cast<const char*>(c.sendbuff);
  const char* r = static_cast<const char*>(c.recvbuff);
  if (!s || !r) return false;
  switch (c.kind) {
    case CollKind::kReduceScatter: return r == s + static_cast<size_t>(rank) * c.count * esize;
    case CollKind::kAllGather: return s == r + static_cast<size_t>(rank) * c.count * esize;
    default: return s == r;
  }
}

/// nccl-tests' "size" of the call: the all-reduce buffer, the reduce-scatter input, the all-gather output.
size_t callBytes(const CollCall& c, int nranks);

}  // namespace strata
