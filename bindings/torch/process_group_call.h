// ProcessGroupStrata's private pieces that its files share: the Call (one torch call's Strata calls, the
// tensors staged for them, the copies back and the PREMUL_SUM ops to destroy after the group) and the Launch (host
// work handed to the completion thread). Included only by process_group_*.cc.
#pragma once

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "process_group_strata.h"
#include "result_error.h"
#include "tensor_wire.h"

namespace strata::torch_backend {

struct ProcessGroupStrata::Call {
  strataComm_t comm = nullptr;
  void* stream = nullptr;                   // the cudaStream_t of device work; nullptr for host buffers
  std::vector<at::Tensor> keep;             // staged tensors, alive until the group ends
  std::vector<std::function<void()>> post;  // copies back, after the group's calls end (in order)
  std::vector<strataRedOp_t> ops;           // PREMUL_SUM operators to destroy after the group

  /// A tensor Strata reads.
  Wire read(const at::Tensor& t, bool reduces, const char* what) {
    at::Tensor c = t.is_contiguous() ? t : t.contiguous();
    if (!c.is_same(t)) keep.push_back(c);
    return wireOf(c, reduces, what);
  }

  /// A tensor Strata writes (and reads, for in-place collectives): a non-contiguous one is staged in a
  /// contiguous copy and copied back after the group.
  Wire write(const at::Tensor& t, bool reduces, const char* what) {
    if (t.is_contiguous()) return wireOf(t, reduces, what);
    at::Tensor staged = t.contiguous();
    keep.push_back(staged);
    post.push_back([t, staged]() mutable { t.copy_(staged); });
    return wireOf(staged, reduces, what);
  }

  /// Strata's op for `op` on `type`. bool: SUM, MAX and BOR are logical or, PRODUCT, MIN and BAND logical and.
  strataRedOp_t op(const c10d::ReduceOp& op, at::ScalarType type, const char* what) {
    const auto kind = op.op_;
    if (type == at::kBool) {
      if (kind == c10d::ReduceOp::SUM || kind == c10d::ReduceOp::MAX || kind == c10d::ReduceOp::BOR) return strataMax;
      if (kind == c10d::ReduceOp::PRODUCT || kind == c10d::ReduceOp::MIN || kind == c10d::ReduceOp::BAND)
        return strataMin;
      TORCH_CHECK(false, "strata: ", what, " cannot reduce bool tensors with ", opName(kind));
    }
    switch (kind) {
      case c10d::ReduceOp::SUM: return strataSum;
      case c10d::ReduceOp::AVG: return strataAvg;
      case c10d::ReduceOp::PRODUCT: return strataProd;
      case c10d::ReduceOp::MIN: return strataMin;
      case c10d::ReduceOp::MAX: return strataMax;
      case c10d::ReduceOp::PREMUL_SUM: return preMulSum(op, type, what);
      default:
        TORCH_CHECK(false, "strata: ", what, " does not support reduce op ", opName(kind),
                    ": Strata reduces with SUM, AVG, PRODUCT, MIN, MAX and PREMUL_SUM (bitwise ops only on bool)");
    }
  }

  strataRedOp_t preMulSum(const c10d::ReduceOp& op, at::ScalarType type, const char* what) {
    auto* supplement = dynamic_cast<c10d::PreMulSumSupplement*>(op.supplement_.get());
    TORCH_CHECK(supplement != nullptr, "strata: ", what, ": PREMUL_SUM without its factor");
    const double factor =
        supplement->tensor_factor.defined() ? supplement->tensor_factor.item<double>() : supplement->double_factor;
    // The scalar in the collective's own dtype, read when the op is made.
    at::Tensor scalar = at::scalar_tensor(factor, at::TensorOptions().dtype(type));
    auto dtype = strataType(type);
    TORCH_CHECK_TYPE(dtype.has_value(), "strata: ", what, " cannot reduce dtype ", type, " with PREMUL_SUM");
    strataRedOp_t created;
    const strataResult_t r =
        strataRedOpCreatePreMulSum(&created, scalar.data_ptr(), *dtype, strataScalarHostImmediate, comm);
    TORCH_CHECK(r == strataSuccess, resultText(r, std::string(what) + " (PREMUL_SUM)", strataGetLastError(comm)));
    ops.push_back(created);
    return created;
  }

  void destroyOps() {
    for (strataRedOp_t op : ops) strataRedOpDestroy(op, comm);
    ops.clear();
  }
};

/// Host work handed to the completion thread.
struct ProcessGroupStrata::Launch {
  strataWork_t handle = nullptr;
  c10::intrusive_ptr<StrataWork> work;
  std::shared_ptr<Call> call;
  std::string name;
};

}  // namespace strata::torch_backend
