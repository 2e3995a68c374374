// Reference interpreter: runs every rank's plan of one collective in one process, over in-memory
// connections with the same capacity limits as real transports, round-robin in one thread. A plan that
// would deadlock on real transports deadlocks here too and is reported, not hung.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "collectives/plan.h"
#include "kernels/reduce.h"

namespace strata {

struct InterpreterOptions {
  size_t pieceBytes = 128 * 1024;  // message size, as Config::pieceBytes
  int nslots = 8;                  // messages buffered per direction, as Config::nslots
};

/// Names op `op` of lane `lane` of rank `rank` in a deadlock's message (a loaded file's gpu, tb and step).
using DescribeOp = std::function<std::string(size_t rank, size_t lane, size_t op)>;

/// Runs plans[r] for every rank r with buffers[r] (indexed as the plan's buffers). Throws InternalError
/// with each stalled lane's position (named by `describeOp` where given) if no rank can make progress (deadlock),
/// or on size mismatch.
void interpretPlans(const std::vector<Plan>& plans, const std::vector<std::vector<void*>>& buffers,
                    strataDataType_t dtype, ReduceKind op, const InterpreterOptions& options = {},
                    const DescribeOp& describeOp = {});

}  // namespace strata
