// The reduction operators of a communicator: NCCL's built-in ops, the PreMulSum ops created on it, and how
// each maps onto a host kernel (Avg and PreMulSum pre-multiply, integer Avg divides afterwards).
#pragma once

#include <cstdint>
#include <mutex>
#include <vector>

#include "kernels/reduce.h"
#include "strata/strata.h"

namespace strata {

/// What `op` means for `dtype` on a communicator of `nranks` ranks: the element-wise kernel, the factor to
/// pre-multiply inputs by (1 = none) and the integer to divide results by (1 = none).
struct EffectiveOp {
  ReduceKind kind = ReduceKind::kSum;
  double preMul = 1.0;    // float types
  int64_t preMulInt = 1;  // integer types: multiplied in the type (PreMulSum), wrapping
  uint64_t postDiv = 1;
  bool preScale = false;  // inputs are pre-multiplied (by preMul or preMulInt, as the dtype is float or not)
};

class RedOpTable {
 public:
  explicit RedOpTable(int rank) : rank_(rank) {}

  /// A new op (strataNumOps + i) that multiplies every input by `scalar` before summing: `scalar` for float
  /// types, `intScalar` (the scalar as the integer type read it) for integer types.
  strataRedOp_t createPreMulSum(double scalar, int64_t intScalar);
  /// Throws InvalidArgument if `op` is not a live op of this table.
  void destroy(strataRedOp_t op);
  /// A built-in op, or a PreMulSum op of this table that has not been destroyed.
  bool valid(strataRedOp_t op) const {
    const int o = static_cast<int>(op);
    if (o >= 0 && o < strataNumOps) return true;  // inline: every reducing call asks
    return o >= strataNumOps && preMulSumLive(o);
  }
  /// The kernel, pre-multiplication and post-division of `op` (valid) for `dtype` over `nranks` ranks. Throws
  /// InvalidArgument if a PreMulSum op was destroyed after the call was issued.
  EffectiveOp effective(strataRedOp_t op, strataDataType_t dtype, int nranks) const {
    EffectiveOp eff;
    if (op == strataAvg) {
      if (dtypeIsFloat(dtype)) eff.preMul = 1.0 / nranks;
      else eff.postDiv = static_cast<uint64_t>(nranks);
      eff.preScale = eff.preMul != 1.0;
    } else if (static_cast<int>(op) < strataNumOps) {
      eff.kind = static_cast<ReduceKind>(op);
    } else {
      const PreMulSum p = preMulSum(static_cast<int>(op));
      if (dtypeIsFloat(dtype)) eff.preMul = p.scalar;
      else eff.preMulInt = p.intScalar;
      eff.preScale = eff.preMul != 1.0 || eff.preMulInt != 1;
    }
    return eff;
  }

 private:
  struct PreMulSum {
    double scalar = 1.0;
    int64_t intScalar = 1;
    bool live = false;
  };
  bool preMulSumLive(int op) const;
  PreMulSum preMulSum(int op) const;

  const int rank_;
  mutable std::mutex mutex_;
  std::vector<PreMulSum> preMulSums_;
};

}  // namespace strata
