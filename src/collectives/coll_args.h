// What a plan generator is asked for: the collective, the communicator's shape and the call's arguments, and
// the segment arithmetic every ring-like generator shares.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace strata {

enum class CollKind : uint8_t {
  kAllReduce,
  kReduceScatter,
  kAllGather,
  kBroadcast,
  kReduce,
  kAllToAll,
  kSend,
  kRecv,
  kBarrier,
};
inline constexpr int kNumCollKinds = static_cast<int>(CollKind::kBarrier) + 1;
const char* collName(CollKind k);  // "allreduce", "reducescatter", ...

/// Everything a generator needs. Counts follow NCCL's argument of the same collective:
/// allreduce/broadcast/reduce: count; reducescatter: recvcount; allgather: sendcount;
/// alltoall: count per peer; send/recv: count.
struct CollArgs {
  CollKind kind = CollKind::kAllReduce;
  int nranks = 1;
  int rank = 0;
  size_t count = 0;
  int root = 0;   // broadcast, reduce
  int peer = -1;  // send, recv
  bool inPlace = false;
  /// Largest element count of one pipelined chunk; generators keep chunks <= this so that no rank
  /// runs more than the connection capacity ahead. Must be >= 1.
  size_t chunkElems = 1 << 16;
  /// Host index of every rank (index: rank), for hierarchical plans; empty means one host. Host indices
  /// are 0..H-1 in order of each host's lowest rank.
  std::vector<int> hostOf;
};

/// One rank's arguments for a call: collective `kind` of `count` elements (counted as CollArgs says) on rank `rank` of
/// `nranks`, in chunks of at most chunkElems; root, peer and in place as the call has them. hostOf stays empty (one
/// host): a caller with several hosts sets it.
/// Inline: the host executor builds one per call on its small-message path.
inline CollArgs makeCollArgs(CollKind kind, int nranks, int rank, size_t count, size_t chunkElems, int root = 0,
                             int peer = -1, bool inPlace = false) {
  CollArgs a;
  a.kind = kind;
  a.nranks = nranks;
  a.rank = rank;
  a.count = count;
  a.root = root;
  a.peer = peer;
  a.inPlace = inPlace;
  a.chunkElems = chunkElems;
  return a;
}

/// Element counts of the n near-equal segments a ring cuts `count` into (the first count % n get one
/// more), and the offset of segment i.
size_t segmentCount(size_t count, int n, int i);
size_t segmentOffset(size_t count, int n, int i);

}  // namespace strata
