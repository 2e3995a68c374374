#include "device/dev_plan.h"

#include <string>

#include "util/error.h"

namespace strata {

DevPlan lowerPlan(const Plan& plan) {
  validatePlan(plan);
  if (plan.lanes.size() > static_cast<size_t>(kMaxDevLanes))
    throw InvalidArgument("device plan: " + std::to_string(plan.lanes.size()) + " lanes (at most " +
                          std::to_string(kMaxDevLanes) + ")");
  DevPlan out;
  out.rank = plan.rank;
  out.nranks = plan.nranks;
  out.scratchElems = plan.scratchElems;
  out.laneBegin.push_back(0);
  auto bufIndex = [&](const Region& r) {
    if (r.buf < 0 || r.buf >= kBuffersPerColl)
      throw InvalidArgument("device plan: buffer " + std::to_string(r.buf) + " of " + plan.algorithm +
                            " (groups of several calls are not lowered yet)");
    return static_cast<uint8_t>(r.buf);
  };
  for (const auto& lane : plan.lanes) {
    for (const Op& op : lane) {
      devproto::DevOp d{};
      d.kind = static_cast<uint8_t>(op.kind);
      d.recvPeer = op.receives() ? op.recvPeer : -1;
      d.sendPeer = op.sends() ? op.sendPeer : -1;
      if (usesSrc(op.kind)) {
        d.srcBuf = bufIndex(op.src);
        d.srcOff = op.src.offset;
      }
      if (usesDst(op.kind)) {
        d.dstBuf = bufIndex(op.dst);
        d.dstOff = op.dst.offset;
      }
      d.count = op.count();
      out.ops.push_back(d);
    }
    out.laneBegin.push_back(static_cast<uint32_t>(out.ops.size()));
  }
  return out;
}

}  // namespace strata
