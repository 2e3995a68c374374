#include "collectives/coll_args.h"

#include <algorithm>

namespace strata {

const char* collName(CollKind k) {
  switch (k) {
    case CollKind::kAllReduce: return "allreduce";
    case CollKind::kReduceScatter: return "reducescatter";
    case CollKind::kAllGather: return "allgather";
    case CollKind::kBroadcast: return "broadcast";
    case CollKind::kReduce: return "reduce";
    case CollKind::kAllToAll: return "alltoall";
    case CollKind::kSend: return "send";
    case CollKind::kRecv: return "recv";
    case CollKind::kBarrier: return "barrier";
  }
  return "invalid";
}

size_t segmentCount(size_t count, int n, int i) {
  if (n < 1 || i < 0 || i >= n) return 0;
  const size_t un = static_cast<size_t>(n), ui = static_cast<size_t>(i);
  return count / un + (ui < count % un ? 1 : 0);
}

size_t segmentOffset(size_t count, int n, int i) {
  if (n < 1 || i < 0) return 0;
  const size_t un = static_cast<size_t>(n), ui = std::min(static_cast<size_t>(i), un);
  return ui * (count / un) + std::min(ui, count % un);
}

}  // namespace strata
