// How a torch tensor is handed to Strata: its memory, element count and Strata dtype (Wire), and the names of
// torch's reduce ops for messages. Shared by the backend's files (process_group_*.cc).
#pragma once

#include <ATen/ATen.h>

#include <cstddef>
#include <optional>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include "strata/strata.h"

namespace strata::torch_backend {

/// Strata's dtype for a torch dtype; none for the dtypes Strata does not have (bool among them).
std::optional<strataDataType_t> strataType(at::ScalarType type);

/// What Strata is handed for a tensor: its memory, element count and dtype.
struct Wire {
  void* data;
  size_t count;
  strataDataType_t dtype;
  at::Tensor tensor;  // the contiguous tensor `data` points into
};

/// A contiguous tensor as Strata takes it. Dtypes Strata does not have travel as bytes where nothing is reduced;
/// bool reduces as uint8 (its bytes are 0 or 1), with the ops mapped by ProcessGroupStrata::Call::op.
Wire wireOf(const at::Tensor& t, bool reduces, const char* what);

/// The name of a torch reduce op, for messages.
const char* opName(c10d::ReduceOp::RedOpType op);

}  // namespace strata::torch_backend
