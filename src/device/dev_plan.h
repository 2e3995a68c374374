// A plan lowered for the device executor (device/proto.h): the plan IR's lanes as one flat array of DevOps, so a
// kernel (one thread block per lane) or a CPU thread per lane walks its slice without the host. The plan IR stays
// the one description of an algorithm; this is its compact form.
//
// Channels: one thread block moves data at a fraction of what NVLink carries, so a plan may be lowered into C
// copies of itself, channel c doing every op on the c-th of C near-equal parts of its elements, with FIFOs and step
// counters of its own per peer. Each channel is the plan's structure with smaller counts (paired ops still have
// equal counts, so both ends split alike), and so has the plan's ordering and deadlock freedom. It is correct when
// every element an op touches is touched in the same channel by every op that depends on it: lowerPlan splits only
// plans whose ops touch overlapping memory through identical regions (or only read it); others keep one channel.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "collectives/coll_args.h"
#include "collectives/plan.h"
#include "device/dev_types.h"

namespace strata {

struct DevPlan {
  int rank = 0;
  int nranks = 1;
  size_t scratchElems = 0;
  int channels = 1;                  // lane l belongs to channel l / lanesPerChannel
  int lanesPerChannel = 0;           // the plan's lanes
  std::vector<devproto::DevOp> ops;  // lane l's ops are ops[laneBegin[l] .. laneBegin[l + 1])
  std::vector<uint32_t> laneBegin;   // lanes + 1 entries
  std::vector<int> laneChannel;      // not empty (lowerP2P): lane l's channel, in place of the rule above
  int lanes() const { return static_cast<int>(laneBegin.size()) - 1; }
  /// Whether an op waits for another lane (DevOp::afterOps): the runner must then give LaneArgs::laneOps.
  bool hasWaits() const {
    for (const devproto::DevOp& o : ops)
      if (o.afterOps != 0) return true;
    return false;
  }
  int channelOf(int lane) const {
    if (!laneChannel.empty()) return laneChannel[static_cast<size_t>(lane)];
    return lanesPerChannel > 0 ? lane / lanesPerChannel : 0;
  }
};

struct LowerOptions {
  int channels = 1;  // 1 .. kMaxDevChannels; more than 1 only for a channel-safe algorithm (channelSafe)
  // In place, the send buffer lies inside the receive buffer: its element 0 is the receive buffer's element sendAt
  // (negative when the receive buffer lies inside the send buffer, as a reduce-scatter's does).
  bool inPlace = false;
  int64_t sendAt = 0;
};

inline constexpr int kMaxDevLanes = 64;
inline constexpr int kMaxDevChannels = 32;

/// Lowers `plan` (validated first) into options.channels channels, its cross-lane waits with it (hasWaits). Throws
/// InvalidArgument for a plan the executor does not run (a group plan: buffers beyond one call's; more than
/// kMaxDevLanes lanes in all), and InternalError
/// for channels over a plan that cannot be split (channelSplittable): every rank must use the same channel count,
/// so the count is chosen from the algorithm (channelsFor), never from one rank's plan.
DevPlan lowerPlan(const Plan& plan, const LowerOptions& options = {});

/// Whether channels can split `plan`: every two ops that touch overlapping memory, one of them writing, touch it
/// through identical regions (same memory, same count), so both take the same part in every channel.
bool channelSplittable(const Plan& plan, const LowerOptions& options);

/// Whether `algorithm`'s plans are channel-splittable on every rank, in place or not: its record's deviceCapable
/// (algorithm_record.h; tests/device_cpu checks each such algorithm at n = 1..33). False for an unknown name.
bool channelSafe(CollKind kind, const std::string& algorithm);

/// The channels of a call, the same on every rank: 1 unless the algorithm is channel-safe; then one per
/// `bytesPerChannel` of the call's buffer (nccl-tests' size), at most `maxChannels` and at most what kMaxDevLanes
/// leaves for the algorithm's most lanes on any rank.
int channelsFor(CollKind kind, const std::string& algorithm, int nranks, size_t callBytes, int maxChannels,
                size_t bytesPerChannel);

/// One send or receive of a group, in bytes.
struct DevP2PCall {
  bool send = true;  // false: a receive
  int peer = 0;
  uint64_t bytes = 0;
};

/// The lowered plan of a group of sends and receives on `rank` of `nranks`, moving elements of `unitBytes` (1, 2, 4
/// or 8: it divides every call's bytes; it is only this rank's, as every split below is made in bytes). Call i's
/// buffers are bufTable entries kBuffersPerColl * i + kBufSend / kBufRecv. Everything both ends of a message do
/// follows from what they share, the message's bytes and nranks, so the two ends always agree:
///   - a message of B bytes goes in C(B) channel parts: one per bytesPerChannel, at most maxChannels and at most what
///     kMaxDevLanes leaves; the parts' bounds are multiples of 16 bytes;
///   - each part is a header (kDevOpHeader, the message's B) then its data, on that channel's connection;
///   - a peer at distance d (send: (peer - rank) mod n, receive: (rank - peer) mod n) goes to the lane (channel,
///     direction, (d - 1) mod L), L = min(n - 1, the lanes that fit), each lane in order of d and then of issue.
///     Each connection stays in one lane, in issue order (the n-th send to a peer meets its n-th receive from this
///     rank); and a lane waits only on lanes of smaller distance on other ranks, so no cycle of waits forms;
///   - a send to self is matched with the receives from self in issue order and is a local copy (one more lane).
/// Calls of 0 bytes move nothing and are skipped, as the host path does. Throws InvalidArgument for a peer out of
/// range and InvalidUsage for self sends and receives that do not pair up (the host path's words).
DevPlan lowerP2P(int rank, int nranks, const std::vector<DevP2PCall>& calls, size_t unitBytes, int maxChannels,
                 size_t bytesPerChannel);

/// The channels lowerP2P gives a message of `bytes` among `nranks` (the same on both of its ends).
int p2pChannels(int nranks, uint64_t bytes, int maxChannels, size_t bytesPerChannel);

}  // namespace strata
