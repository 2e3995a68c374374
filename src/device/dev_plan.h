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
  int lanes() const { return static_cast<int>(laneBegin.size()) - 1; }
  int channelOf(int lane) const { return lanesPerChannel > 0 ? lane / lanesPerChannel : 0; }
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

/// Lowers `plan` (validated first) into options.channels channels. Throws InvalidArgument for a plan the executor
/// does not run (a group plan: buffers beyond one call's; more than kMaxDevLanes lanes in all), and InternalError
/// for channels over a plan that cannot be split (channelSplittable): every rank must use the same channel count,
/// so the count is chosen from the algorithm (channelsFor), never from one rank's plan.
DevPlan lowerPlan(const Plan& plan, const LowerOptions& options = {});

/// Whether channels can split `plan`: every two ops that touch overlapping memory, one of them writing, touch it
/// through identical regions (same memory, same count), so both take the same part in every channel.
bool channelSplittable(const Plan& plan, const LowerOptions& options);

/// The algorithms whose plans are channel-splittable on every rank, in place or not (tests/device_cpu checks each
/// at n = 1..33): ring all-reduce, reduce-scatter and all-gather, chain broadcast and reduce, pairwise all-to-all.
bool channelSafe(CollKind kind, const std::string& algorithm);

/// The channels of a call, the same on every rank: 1 unless the algorithm is channel-safe; then one per
/// `bytesPerChannel` of the call's buffer (nccl-tests' size), at most `maxChannels` and at most what kMaxDevLanes
/// leaves for the algorithm's most lanes on any rank.
int channelsFor(CollKind kind, const std::string& algorithm, int nranks, size_t callBytes, int maxChannels,
                size_t bytesPerChannel);

}  // namespace strata
