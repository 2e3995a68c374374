// strata_soak's random operation mix: what an operation is (collective, count, dtype, operator, root, in place or
// not), how a step issues its operations (blocking, in a group, in a group ended asynchronously), and drawing them
// from the shared random sequence.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "comm_view.h"
#include "shared_random.h"
#include "strata/strata.h"

namespace soak {

enum Kind { kAllReduce, kReduceScatter, kAllGather, kBroadcast, kReduce, kAllToAll, kSendRecv, kBarrier, kNumKinds };
inline constexpr const char* kKindNames[kNumKinds] = {"allreduce", "reducescatter", "allgather", "broadcast",
                                                      "reduce",    "alltoall",      "sendrecv",  "barrier"};
inline bool isReducing(Kind k) { return k == kAllReduce || k == kReduceScatter || k == kReduce; }

// Operators: the built-in ones, and kPreMulSum, a strataRedOpCreatePreMulSum op with scalar 2 made for the call.
constexpr int kPreMulSum = strataNumOps;
constexpr int kNoOp = -1;
constexpr double kPreMulScalar = 2.0;
const char* opName(int op);

struct Op {
  Kind kind = kBarrier;
  size_t count = 0;
  strataDataType_t dtype = strataFloat32;
  int op = kNoOp;
  uint64_t rootDraw = 0;  // the root is rootDraw % (size of the communicator it runs on)
  bool inPlace = false;
  uint64_t salt = 0;  // makes the inputs of every operation different
};

enum class Issue { kBlocking, kGroup, kGroupAsync };
struct Step {
  std::vector<Op> ops;  // more than one only in a group
  Issue issue = Issue::kBlocking;
  bool pollAsync = false;  // wait for asynchronous work with strataWorkTest instead of strataWorkWait
};

/// One operation drawn from `rng`: counts up to maxCount; a barrier only where allowBarrier.
Op drawOp(SharedRandom& rng, size_t maxCount, bool allowBarrier);

/// One step: one operation blocking (70%), one in a group (15%), or two or three in a group.
Step drawStep(SharedRandom& rng, size_t maxCount);

/// The operation on `v`, for messages.
std::string describe(const Op& op, const CommView& v);

}  // namespace soak
