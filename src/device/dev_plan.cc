#include "device/dev_plan.h"

#include <algorithm>
#include <string>
#include <tuple>

#include "collectives/algorithms.h"
#include "collectives/cost_model.h"
#include "util/error.h"

namespace strata {

namespace {

// Memory an op touches, in one of three spaces: the receive buffer (and, in place, the send buffer inside it), the
// send buffer out of place, the scratch.
struct Footprint {
  int space = 0;
  int64_t begin = 0, end = 0;  // elements
  size_t op = 0;               // index over the whole plan
  bool write = false;
};

void addFootprint(std::vector<Footprint>& out, const Region& r, size_t op, bool write, const LowerOptions& o) {
  if (r.count == 0) return;
  Footprint f;
  f.op = op;
  f.write = write;
  f.begin = static_cast<int64_t>(r.offset);
  if (r.buf == kBufScratch) {
    f.space = 2;
  } else if (r.buf == kBufRecv || o.inPlace) {
    f.space = 1;
    if (r.buf == kBufSend) f.begin += o.sendAt;
  } else {
    f.space = 0;
  }
  f.end = f.begin + static_cast<int64_t>(r.count);
  out.push_back(f);
}

}  // namespace

bool channelSplittable(const Plan& plan, const LowerOptions& options) {
  std::vector<Footprint> fp;
  size_t index = 0;
  for (const auto& lane : plan.lanes) {
    for (const Op& op : lane) {
      if (usesSrc(op.kind)) addFootprint(fp, op.src, index, false, options);
      if (usesDst(op.kind)) {
        addFootprint(fp, op.dst, index, true, options);
        if (op.kind == OpKind::kReduceLocal) addFootprint(fp, op.dst, index, false, options);
      }
      ++index;
    }
  }
  std::sort(fp.begin(), fp.end(), [](const Footprint& a, const Footprint& b) {
    return a.space != b.space ? a.space < b.space : a.begin < b.begin;
  });
  // Sweep each space in order of start: every footprint against those still open when it starts.
  std::vector<const Footprint*> open;
  int space = -1;
  for (const Footprint& f : fp) {
    if (f.space != space) {
      open.clear();
      space = f.space;
    }
    std::erase_if(open, [&](const Footprint* o) { return o->end <= f.begin; });
    for (const Footprint* o : open) {
      if (o->op == f.op || (!o->write && !f.write)) continue;
      if (o->begin != f.begin || o->end != f.end) return false;
    }
    open.push_back(&f);
  }
  return true;
}

bool channelSafe(CollKind kind, const std::string& algorithm) {
  const AlgorithmRecord* record = findAlgorithm(kind, algorithm);
  return record && record->deviceCapable;
}

static_assert(DeviceFigures{}.maxChannels == kMaxDevChannels, "the cost model's channel limit is the executor's");

int channelsFor(CollKind kind, const std::string& algorithm, int nranks, size_t callBytes, int maxChannels,
                size_t bytesPerChannel) {
  if (!channelSafe(kind, algorithm) || maxChannels <= 1) return 1;
  // The most lanes any rank's plan has: pairwise out of place runs a lane per direction and peer; chain two.
  const int lanes = kind == CollKind::kAllToAll ? 2 * nranks - 1 : 2;
  const size_t byBytes = callBytes / std::max<size_t>(1, bytesPerChannel);
  const size_t c = std::min({static_cast<size_t>(std::min(maxChannels, kMaxDevChannels)), std::max<size_t>(1, byBytes),
                             static_cast<size_t>(std::max(1, kMaxDevLanes / std::max(1, lanes)))});
  return static_cast<int>(c);
}

DevPlan lowerPlan(const Plan& plan, const LowerOptions& options) {
  validatePlan(plan);
  // Cross-lane waits lower as they are (DevOp::afterLane/afterOps, channel c's lane waiting on channel c's), so op
  // indices must stay the plan's: no empty part is skipped then (an empty op takes no slot, so a peer that skips
  // its own still pairs).
  const bool waits = hasDependencies(plan);
  // A plan on channels of its own (a loaded MSCCL file: a thread block per lane) keeps them: each lane runs on its
  // channel's FIFOs, nothing is cut further. (A nop is an op of no elements: it only waits.)
  const int ownChannels = planChannels(plan);
  if (ownChannels > 1 && options.channels != 1)
    throw InternalError("device plan: " + plan.algorithm + " has channels of its own and cannot be cut into more");
  if (ownChannels > kMaxDevChannels)
    throw InvalidArgument("device plan: " + plan.algorithm + " uses " + std::to_string(ownChannels) +
                          " channels (at most " + std::to_string(kMaxDevChannels) + ")");
  if (plan.lanes.size() > static_cast<size_t>(kMaxDevLanes))
    throw InvalidArgument("device plan: " + std::to_string(plan.lanes.size()) + " lanes (at most " +
                          std::to_string(kMaxDevLanes) + ")");
  if (options.channels < 1 || options.channels > kMaxDevChannels)
    throw InvalidArgument("device plan: " + std::to_string(options.channels) + " channels (1 to " +
                          std::to_string(kMaxDevChannels) + ")");
  DevPlan out;
  out.rank = plan.rank;
  out.nranks = plan.nranks;
  out.scratchElems = plan.scratchElems;
  out.lanesPerChannel = static_cast<int>(plan.lanes.size());
  out.channels = options.channels;
  if (static_cast<size_t>(out.channels) * plan.lanes.size() > static_cast<size_t>(kMaxDevLanes))
    throw InvalidArgument("device plan: " + std::to_string(out.channels) + " channels x " +
                          std::to_string(plan.lanes.size()) + " lanes (at most " + std::to_string(kMaxDevLanes) +
                          " lanes in all)");
  if (out.channels > 1 && !channelSplittable(plan, options))
    throw InternalError("device plan: " + plan.algorithm + " on rank " + std::to_string(plan.rank) +
                        " cannot be split into channels (an op reads part of what another op wrote)");
  if (ownChannels > 1) {
    out.channels = ownChannels;
    for (size_t l = 0; l < plan.lanes.size(); ++l) {
      const int ch = plan.lanes[l].empty() ? 0 : plan.lanes[l].front().channel;
      for (const Op& op : plan.lanes[l])
        if (op.channel != ch)
          throw InvalidArgument(strprintf("device plan: lane %zu of %s uses channels %d and %d (a lane runs on one)", l,
                                          plan.algorithm.c_str(), ch, op.channel));
      out.laneChannel.push_back(ch);
    }
  }
  out.laneBegin.push_back(0);
  auto bufIndex = [&](const Region& r) {
    if (r.buf < 0 || r.buf >= kBuffersPerColl)
      throw InvalidArgument("device plan: buffer " + std::to_string(r.buf) + " of " + plan.algorithm +
                            " (groups of several calls are not lowered yet)");
    return static_cast<uint32_t>(r.buf);
  };
  const size_t parts = ownChannels > 1 ? 1 : static_cast<size_t>(out.channels);
  for (size_t c = 0; c < parts; ++c) {
    for (const auto& lane : plan.lanes) {
      for (const Op& op : lane) {
        // Channel c's part of the op: near-equal parts, the first (count % parts) one element longer.
        const size_t count = op.count(), base = count / parts, rem = count % parts;
        const size_t first = c * base + std::min(c, rem), mine = base + (c < rem ? 1 : 0);
        if (!waits && mine == 0 && (count > 0 || c > 0)) continue;  // both ends skip the same empty parts
        devproto::DevOp d{};
        d.kind = static_cast<uint8_t>(op.kind);
        d.recvPeer = op.receives() ? op.recvPeer : -1;
        d.sendPeer = op.sends() ? op.sendPeer : -1;
        if (usesSrc(op.kind)) {
          d.srcBuf = bufIndex(op.src);
          d.srcOff = op.src.offset + first;
        }
        if (usesDst(op.kind)) {
          d.dstBuf = bufIndex(op.dst);
          d.dstOff = op.dst.offset + first;
        }
        d.count = mine;
        if (op.hasDependency()) {
          d.afterLane = static_cast<int32_t>(c * plan.lanes.size()) + op.afterLane;
          d.afterOps = op.afterOps;
        }
        out.ops.push_back(d);
      }
      out.laneBegin.push_back(static_cast<uint32_t>(out.ops.size()));
    }
  }
  return out;
}

namespace {

// The lanes per direction and channel of a send/recv group among n ranks.
int p2pLanesPerDirection(int nranks) { return std::clamp(nranks - 1, 1, (kMaxDevLanes - 1) / 2); }

}  // namespace

int p2pChannels(int nranks, uint64_t bytes, int maxChannels, size_t bytesPerChannel) {
  const int fit = std::max(1, (kMaxDevLanes - 1) / (2 * p2pLanesPerDirection(nranks)));
  const uint64_t byBytes = bytes / std::max<size_t>(1, bytesPerChannel);
  return static_cast<int>(
      std::clamp<uint64_t>(byBytes, 1, static_cast<uint64_t>(std::min({maxChannels, kMaxDevChannels, fit}))));
}

DevPlan lowerP2P(int rank, int nranks, const std::vector<DevP2PCall>& calls, size_t unitBytes, int maxChannels,
                 size_t bytesPerChannel) {
  if (unitBytes != 1 && unitBytes != 2 && unitBytes != 4 && unitBytes != 8)
    throw InternalError(strprintf("device send/recv plan: element of %zu bytes", unitBytes));
  const int L = p2pLanesPerDirection(nranks);
  // (channel, direction, distance mod L) -> the lane's ops, each with its sort key (distance, issue).
  struct Keyed {
    int distance;
    size_t issue;
    int part;  // 0: header, 1: data
    devproto::DevOp op;
  };
  const size_t maxParts = static_cast<size_t>(p2pChannels(nranks, UINT64_MAX, maxChannels, 1));
  std::vector<std::vector<Keyed>> lanes(maxParts * 2 * static_cast<size_t>(L));
  std::vector<size_t> selfSends, selfRecvs;
  for (size_t i = 0; i < calls.size(); ++i) {
    const DevP2PCall& c = calls[i];
    const char* what = c.send ? "send" : "recv";
    if (c.peer < 0 || c.peer >= nranks)
      throw InvalidArgument(
          strprintf("rank %d: %s: peer %d is not a rank of this %d-rank communicator", rank, what, c.peer, nranks));
    if (c.bytes % unitBytes != 0)
      throw InternalError(strprintf("device send/recv plan: %llu bytes in elements of %zu",
                                    static_cast<unsigned long long>(c.bytes), unitBytes));
    if (c.bytes == 0) continue;
    if (c.peer == rank) {
      (c.send ? selfSends : selfRecvs).push_back(i);
      continue;
    }
    const int distance = c.send ? (c.peer - rank + nranks) % nranks : (rank - c.peer + nranks) % nranks;
    const int parts = p2pChannels(nranks, c.bytes, maxChannels, bytesPerChannel);
    // Part bounds in bytes, multiples of 16 (so of every element size), the same on both ends.
    const uint64_t per = (c.bytes + static_cast<uint64_t>(parts) - 1) / static_cast<uint64_t>(parts);
    const uint64_t step = (per + 15) / 16 * 16;
    const uint32_t buf = static_cast<uint32_t>(i * kBuffersPerColl + (c.send ? kBufSend : kBufRecv));
    for (int ch = 0; ch < parts; ++ch) {
      const uint64_t begin = std::min<uint64_t>(c.bytes, static_cast<uint64_t>(ch) * step);
      const uint64_t end = std::min<uint64_t>(c.bytes, begin + step);
      if (begin == end) continue;  // both ends skip the same parts
      auto& lane = lanes[(static_cast<size_t>(ch) * 2 + (c.send ? 0 : 1)) * static_cast<size_t>(L) +
                         static_cast<size_t>((distance - 1) % L)];
      devproto::DevOp h{};
      h.kind = devproto::kDevOpHeader;
      h.recvPeer = c.send ? -1 : c.peer;
      h.sendPeer = c.send ? c.peer : -1;
      h.count = c.bytes;
      lane.push_back(Keyed{distance, i, 0, h});
      devproto::DevOp d{};
      d.kind = static_cast<uint8_t>(c.send ? OpKind::kSend : OpKind::kRecv);
      d.recvPeer = h.recvPeer;
      d.sendPeer = h.sendPeer;
      d.count = (end - begin) / unitBytes;
      if (c.send) {
        d.srcBuf = buf;
        d.srcOff = begin / unitBytes;
      } else {
        d.dstBuf = buf;
        d.dstOff = begin / unitBytes;
      }
      lane.push_back(Keyed{distance, i, 1, d});
    }
  }
  if (selfSends.size() != selfRecvs.size())
    throw InvalidUsage(strprintf("rank %d: %zu send(s) to self but %zu recv(s) from self in one group", rank,
                                 selfSends.size(), selfRecvs.size()));
  DevPlan out;
  out.rank = rank;
  out.nranks = nranks;
  out.laneBegin.push_back(0);
  for (size_t l = 0; l < lanes.size(); ++l) {
    auto& lane = lanes[l];
    if (lane.empty()) continue;
    std::stable_sort(lane.begin(), lane.end(), [](const Keyed& a, const Keyed& b) {
      return std::tie(a.distance, a.issue, a.part) < std::tie(b.distance, b.issue, b.part);
    });
    for (const Keyed& k : lane) out.ops.push_back(k.op);
    out.laneBegin.push_back(static_cast<uint32_t>(out.ops.size()));
    const int ch = static_cast<int>(l / (2 * static_cast<size_t>(L)));
    out.laneChannel.push_back(ch);
    out.channels = std::max(out.channels, ch + 1);
  }
  if (!selfSends.empty()) {
    for (size_t k = 0; k < selfSends.size(); ++k) {
      const DevP2PCall& s = calls[selfSends[k]];
      const DevP2PCall& r = calls[selfRecvs[k]];
      if (s.bytes != r.bytes)
        throw InvalidUsage(strprintf("rank %d: send to self of %llu bytes matched with recv from self of %llu bytes",
                                     rank, static_cast<unsigned long long>(s.bytes),
                                     static_cast<unsigned long long>(r.bytes)));
      devproto::DevOp d{};
      d.kind = static_cast<uint8_t>(OpKind::kCopy);
      d.recvPeer = d.sendPeer = -1;
      d.srcBuf = static_cast<uint32_t>(selfSends[k] * kBuffersPerColl + kBufSend);
      d.dstBuf = static_cast<uint32_t>(selfRecvs[k] * kBuffersPerColl + kBufRecv);
      d.count = s.bytes / unitBytes;
      out.ops.push_back(d);
    }
    out.laneBegin.push_back(static_cast<uint32_t>(out.ops.size()));
    out.laneChannel.push_back(0);
  }
  out.lanesPerChannel = out.lanes();
  return out;
}

}  // namespace strata
