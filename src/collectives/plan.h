// The plan IR: what one rank does for one collective, as data.
//
// A plan is a set of lanes; each lane is an ordered list of ops. Lanes run concurrently, ops within a lane
// in order. Every op works on regions (buffer index, element offset, element count). The executor splits
// each op into messages ("pieces") of at most Config::pieceBytes; both ends of a connection split the same
// way, so message boundaries never need to travel.
//
// Rules every plan generator keeps (checked by validatePlan and by the interpreter):
//  - each (peer, direction, channel) is used by at most one lane, so messages on a connection are ordered (a
//    channel is a connection of its own: lanes on different channels may talk to the same peer);
//  - a rank never gets more than Config::connectionCapacity() bytes ahead of what its peer consumes
//    without itself waiting on a receive (generators interleave long transfers in chunks for this);
//  - lanes never write regions another lane reads or writes, unless a cross-lane dependency orders the two ops.
//
// Cross-lane dependencies: an op may name one op of another lane of the same plan that must have completed
// before it starts (Op::afterLane / Op::afterOps). A lane waiting on one never blocks the other lanes. The
// dependencies of a plan must not form a cycle with the lanes' own order (validatePlan checks; the
// interpreter reports a plan that deadlocks through them, as it reports one that deadlocks on capacity).
// Hierarchical plans use them to pipeline their phases by piece: the intra-host reduce-scatter of piece p+1,
// the rail all-reduce of piece p and the intra-host all-gather of piece p-1 run at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace strata {

/// Buffer indices of a single call's plan. A plan for a group of calls concatenates their plans, the buffers
/// of call k shifted by k x kBuffersPerColl.
enum : int { kBufSend = 0, kBufRecv = 1, kBufScratch = 2, kBuffersPerColl = 3 };

struct Region {
  int buf = kBufSend;
  size_t offset = 0;  // elements
  size_t count = 0;   // elements
};

enum class OpKind : uint8_t {
  kSend,                // message = src                              -> sendPeer
  kRecv,                // dst = message                              <- recvPeer
  kRecvReduce,          // dst = message (op) src                     <- recvPeer
  kRecvReduceSend,      // message' = message (op) src                <- recvPeer, -> sendPeer
  kRecvReduceCopySend,  // dst = message (op) src; message' = dst     <- recvPeer, -> sendPeer
  kRecvCopySend,        // dst = message; message' = message          <- recvPeer, -> sendPeer
  kCopy,                // dst = src (skipped when they are the same memory)
  kReduceLocal,         // dst = dst (op) src
  kCopySend,            // dst = src; message = src (one pass over src)  -> sendPeer
  kNop,                 // nothing: a step that only waits for its cross-lane dependency (MSCCL's nop)
};
const char* opKindName(OpKind k);
/// Which regions an op of kind k reads (src) or writes (dst); the others are ignored.
bool usesSrc(OpKind k);
bool usesDst(OpKind k);

/// Channels a plan may use: each (peer, channel) is a connection of its own (MSCCL's limit, MAXCHANNELS).
inline constexpr int kMaxPlanChannels = 32;

struct Op {
  OpKind kind = OpKind::kCopy;
  int recvPeer = -1;
  int sendPeer = -1;
  /// The connection to recvPeer / sendPeer this op uses: channel 0 is the peer's first connection; plans loaded
  /// from MSCCL files run several thread blocks to one peer, each on its own channel. < kMaxPlanChannels.
  uint8_t channel = 0;
  Region src;  // kSend, kRecvReduce*, kCopy, kReduceLocal
  Region dst;  // kRecv, kRecvReduce, kRecvReduceCopySend, kRecvCopySend, kCopy, kReduceLocal
  /// Cross-lane dependency: the op starts only once lane `afterLane` has completed its first `afterOps` ops
  /// (-1: none). One per op; an op that needs two waits behind an earlier op of its lane that has the other.
  int afterLane = -1;
  uint32_t afterOps = 0;
  /// Elements moved or produced: the message size for communicating ops (0 for kNop).
  size_t count() const;
  bool receives() const;
  bool sends() const;
  bool hasDependency() const { return afterLane >= 0; }
};

struct Plan {
  int rank = 0;
  int nranks = 1;
  std::string algorithm;    // the generator's name as algorithmsFor() lists it; "p2p" for a group
  size_t scratchElems = 0;  // elements of scratch the executor must provide (buffer kBufScratch)
  std::vector<std::vector<Op>> lanes;

  size_t numOps() const;
  /// One line per op, for logs and test failures.
  std::string toString() const;
};

/// Throws InternalError if the plan breaks a structural rule (a peer out of range, a direction of a channel used
/// by two lanes, a region of a communicating op with different src/dst counts, a dependency on a missing op or
/// cross-lane dependencies that form a cycle: "deadlock" and the ops of the cycle).
void validatePlan(const Plan& plan);
/// True if any op of the plan has a cross-lane dependency.
bool hasDependencies(const Plan& plan);
/// The number of channels the plan's ops use (1 + the largest Op::channel; 1 for a plan without ops).
int planChannels(const Plan& plan);

}  // namespace strata
