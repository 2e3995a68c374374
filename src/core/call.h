// One user call as the core sees it, and what it is in the words of error messages. Plain data, shared by the
// host executor, the work queue and the device engine.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "collectives/coll_args.h"
#include "strata/strata.h"
#include "transport/transport.h"

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
  /// A receive from any source (strataRecvAny): peer is kAnySource, and the rank whose send it took is stored here
  /// when it completes.
  int* source = nullptr;
};

/// The peer of a receive from any source (CollCall::source).
inline constexpr int kAnySource = -2;
inline bool isAnySource(const CollCall& c) { return c.kind == CollKind::kRecv && c.peer == kAnySource; }

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

namespace stamp_bits {
// hi = seq (bits 0-31) | kind (32-35) | dtype (36-40) | op (41-43) | root (44-63); lo = count (or bytes).
inline constexpr uint64_t kDtypeBytes = 31;  // p2p: a byte count, whatever types the two sides name
inline constexpr uint64_t kOpNone = 7;       // not a reducing collective
inline constexpr uint64_t kOpPreMulSum = strataNumOps;
inline constexpr uint64_t kRootMask = (uint64_t{1} << 20) - 1;
inline MsgStamp pack(uint32_t seq, CollKind kind, uint64_t dtype, uint64_t op, uint64_t root, uint64_t count) {
  return MsgStamp{count, uint64_t{seq} | uint64_t(static_cast<uint8_t>(kind) & 15) << 32 | (dtype & 31) << 36 |
                             (op & 7) << 41 | (root & kRootMask) << 44};
}
}  // namespace stamp_bits

/// The stamp every message of collective `call` carries (transport.h, MsgStamp): the call's number `seq` among
/// the communicator's collectives, its kind, type, op, count and root. Every rank of a correct program computes
/// the same stamp for the same call, so a receiver compares the stamp of each message with its own. Fields that do
/// not define the collective stay zero (the op of a broadcast, the root of an all-reduce); PreMulSum ops compare
/// as one op (their scalars may differ per rank); roots compare modulo 2^20.
inline MsgStamp collStamp(const CollCall& call, uint32_t seq) {
  using namespace stamp_bits;
  uint64_t op = kOpNone;
  if (isReducing(call.kind))
    op = static_cast<int>(call.op) < strataNumOps ? static_cast<uint64_t>(call.op) : kOpPreMulSum;
  const uint64_t root = isRooted(call.kind) ? static_cast<uint64_t>(call.root) : 0;
  const uint64_t count = call.kind == CollKind::kBarrier ? 0 : call.count;
  return pack(seq, call.kind, static_cast<uint64_t>(call.dtype), op, root, count);
}
/// The stamp of the messages of a send: the sender's `seq`-th send to its peer, of `bytes` in all. The receiver's
/// `seq`-th receive from that peer expects exactly this (send and receive may name different types).
inline MsgStamp p2pStamp(uint32_t seq, uint64_t bytes) {
  using namespace stamp_bits;
  return pack(seq, CollKind::kSend, kDtypeBytes, kOpNone, 0, bytes);
}
/// What a stamp says, for error messages: "#5 allreduce(count 1048576, float32, sum)", "send #2 of 4096 bytes".
std::string describeStamp(const MsgStamp& stamp);

/// nccl-tests' "size" of the call: the all-reduce buffer, the reduce-scatter input, the all-gather output.
size_t callBytes(const CollCall& c, int nranks);

/// Whether the memory a send of a group reads is written by a receive of the same group (nccl-tests' in-place
/// sendrecv): such a send must go from a copy taken before anything is received.
bool sendOverlapsARecv(const CollCall& send, std::span<const CollCall> group);

}  // namespace strata
