#include "core/red_ops.h"

#include "util/error.h"

namespace strata {

strataRedOp_t RedOpTable::createPreMulSum(double scalar, int64_t intScalar) {
  std::lock_guard<std::mutex> lk(mutex_);
  for (size_t i = 0; i < preMulSums_.size(); ++i) {
    if (!preMulSums_[i].live) {
      preMulSums_[i] = {scalar, intScalar, true};
      return static_cast<strataRedOp_t>(strataNumOps + static_cast<int>(i));
    }
  }
  preMulSums_.push_back({scalar, intScalar, true});
  return static_cast<strataRedOp_t>(strataNumOps + static_cast<int>(preMulSums_.size() - 1));
}

void RedOpTable::destroy(strataRedOp_t op) {
  std::lock_guard<std::mutex> lk(mutex_);
  const int i = static_cast<int>(op) - strataNumOps;
  if (i < 0 || static_cast<size_t>(i) >= preMulSums_.size() || !preMulSums_[static_cast<size_t>(i)].live)
    throw InvalidArgument(strprintf("rank %d: reduction op %d was not created by strataRedOpCreatePreMulSum", rank_,
                                    static_cast<int>(op)));
  preMulSums_[static_cast<size_t>(i)].live = false;
}

bool RedOpTable::preMulSumLive(int op) const {
  std::lock_guard<std::mutex> lk(mutex_);
  const size_t i = static_cast<size_t>(op - strataNumOps);
  return i < preMulSums_.size() && preMulSums_[i].live;
}

RedOpTable::PreMulSum RedOpTable::preMulSum(int op) const {
  std::lock_guard<std::mutex> lk(mutex_);
  const size_t i = static_cast<size_t>(op - strataNumOps);
  if (i >= preMulSums_.size() || !preMulSums_[i].live)
    throw InvalidArgument(
        strprintf("rank %d: reduction op %d was destroyed before the call that uses it ran", rank_, op));
  return preMulSums_[i];
}

}  // namespace strata
