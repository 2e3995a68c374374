// Argument checks that the collectives share (process_group_collectives.cc, process_group_p2p.cc): one tensor,
// equal dtypes; and the flattening of torch's lists of tensor lists.
#pragma once

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <vector>

namespace strata::torch_backend {

inline void requireOne(const std::vector<at::Tensor>& tensors, const char* what) {
  TORCH_CHECK(tensors.size() == 1, "strata: ", what, " takes one tensor per rank, got ", tensors.size());
}

inline void requireSameType(const at::Tensor& a, const at::Tensor& b, const char* what) {
  TORCH_CHECK_TYPE(a.scalar_type() == b.scalar_type(), "strata: ", what, ": tensors of different dtypes (",
                   a.scalar_type(), " and ", b.scalar_type(), ")");
}

inline std::vector<at::Tensor> flatten(const std::vector<std::vector<at::Tensor>>& lists) {
  std::vector<at::Tensor> out;
  for (const auto& list : lists) out.insert(out.end(), list.begin(), list.end());
  return out;
}

}  // namespace strata::torch_backend
