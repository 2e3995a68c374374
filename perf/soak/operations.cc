// strata_soak's random operation mix (operations.h).
#include "operations.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "dtypes.h"

namespace soak {

namespace {

uint64_t gSalt = 0;

}  // namespace

const char* opName(int op) {
  static const char* const kNames[] = {"sum", "prod", "max", "min", "avg", "premulsum"};
  return op == kNoOp ? "-" : kNames[op];
}

Op drawOp(SharedRandom& rng, size_t maxCount, bool allowBarrier) {
  Op op;
  op.kind = static_cast<Kind>(rng.below(allowBarrier ? kNumKinds : kNumKinds - 1));
  // Log-uniform from 1 to maxCount, and 0 one time in sixteen.
  const double logCount = rng.unit() * std::log(static_cast<double>(maxCount) + 1);
  const size_t count = std::clamp<size_t>(static_cast<size_t>(std::exp(logCount)), 1, maxCount);
  op.count = rng.below(16) == 0 ? 0 : count;
  op.dtype = kDtypes[rng.below(kNumDtypes)].type;
  op.op = isReducing(op.kind) ? static_cast<int>(rng.below(kPreMulSum + 1)) : kNoOp;
  op.rootDraw = rng.next();
  op.inPlace = op.kind != kBarrier && rng.chance(0.5);  // sendrecv in place: the receive overwrites the send
  op.salt = ++gSalt;
  return op;
}

Step drawStep(SharedRandom& rng, size_t maxCount) {
  Step s;
  const double u = rng.unit();
  if (u < 0.7) {
    s.ops.push_back(drawOp(rng, maxCount, true));
  } else if (u < 0.85) {
    s.ops.push_back(drawOp(rng, maxCount, false));
    s.issue = rng.chance(0.5) ? Issue::kGroupAsync : Issue::kGroup;
  } else {
    // Two or three operations in one group: each gets a third of the buffers, so counts go to maxCount / 4.
    const uint64_t n = 2 + rng.below(2);
    for (uint64_t k = 0; k < n; ++k) s.ops.push_back(drawOp(rng, std::max<size_t>(1, maxCount / 4), false));
    s.issue = rng.chance(0.5) ? Issue::kGroupAsync : Issue::kGroup;
  }
  s.pollAsync = rng.chance(0.3);
  return s;
}

std::string describe(const Op& op, const CommView& v) {
  char root[32] = "";
  if (op.kind == kBroadcast || op.kind == kReduce)
    std::snprintf(root, sizeof root, " root %d", static_cast<int>(op.rootDraw % static_cast<uint64_t>(v.size)));
  char buf[320];
  std::snprintf(buf, sizeof buf, "%s (salt %llu) on %s (rank %d of %d): count %zu %s op %s%s %s", kKindNames[op.kind],
                static_cast<unsigned long long>(op.salt), v.name.c_str(), v.rank, v.size, op.count, info(op.dtype).name,
                opName(op.op), root, op.inPlace ? "in-place" : "out-of-place");
  return buf;
}

}  // namespace soak
