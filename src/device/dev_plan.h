// A plan lowered for the device executor (device/proto.h): the plan IR's lanes as one flat array of DevOps, so a
// kernel (one thread block per lane) or a CPU thread per lane walks its slice without the host. The plan IR stays
// the one description of an algorithm; this is its compact form.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "collectives/plan.h"
#include "device/dev_types.h"

namespace strata {

struct DevPlan {
  int rank = 0;
  int nranks = 1;
  size_t scratchElems = 0;
  std::vector<devproto::DevOp> ops;  // lane l's ops are ops[laneBegin[l] .. laneBegin[l + 1])
  std::vector<uint32_t> laneBegin;   // lanes + 1 entries
  int lanes() const { return static_cast<int>(laneBegin.size()) - 1; }
};

/// Lowers `plan` (validated first). Throws InvalidArgument for a plan the executor does not run: a group plan
/// (buffers beyond one call's), or more lanes than kMaxDevLanes.
DevPlan lowerPlan(const Plan& plan);

inline constexpr int kMaxDevLanes = 64;

}  // namespace strata
