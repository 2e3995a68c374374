// How a torch tensor is handed to Strata (tensor_wire.h): the dtype map, the wire of a contiguous tensor, the
// names of the reduce ops.
#include "tensor_wire.h"

#include <c10/util/Exception.h>

namespace strata::torch_backend {

std::optional<strataDataType_t> strataType(at::ScalarType type) {
  switch (type) {
    case at::kChar: return strataInt8;
    case at::kByte: return strataUint8;
    case at::kInt: return strataInt32;
    case at::kLong: return strataInt64;
    case at::kUInt32: return strataUint32;
    case at::kUInt64: return strataUint64;
    case at::kHalf: return strataFloat16;
    case at::kFloat: return strataFloat32;
    case at::kDouble: return strataFloat64;
    case at::kBFloat16: return strataBfloat16;
    case at::kFloat8_e4m3fn: return strataFloat8e4m3;
    case at::kFloat8_e5m2: return strataFloat8e5m2;
    default: return std::nullopt;
  }
}

constexpr const char* kReducibleTypes =
    "Strata reduces int8, uint8, int32, int64, uint32, uint64, float16, bfloat16, float32, float64, float8_e4m3fn, "
    "float8_e5m2 and bool";

Wire wireOf(const at::Tensor& t, bool reduces, const char* what) {
  const size_t numel = static_cast<size_t>(t.numel());
  if (auto type = strataType(t.scalar_type())) return {t.data_ptr(), numel, *type, t};
  if (t.scalar_type() == at::kBool) return {t.data_ptr(), numel, strataUint8, t};
  TORCH_CHECK_TYPE(!reduces, "strata: ", what, " cannot reduce dtype ", t.scalar_type(), "; ", kReducibleTypes);
  return {t.data_ptr(), numel * t.element_size(), strataUint8, t};
}

const char* opName(c10d::ReduceOp::RedOpType op) {
  switch (op) {
    case c10d::ReduceOp::SUM: return "SUM";
    case c10d::ReduceOp::AVG: return "AVG";
    case c10d::ReduceOp::PRODUCT: return "PRODUCT";
    case c10d::ReduceOp::MIN: return "MIN";
    case c10d::ReduceOp::MAX: return "MAX";
    case c10d::ReduceOp::BAND: return "BAND";
    case c10d::ReduceOp::BOR: return "BOR";
    case c10d::ReduceOp::BXOR: return "BXOR";
    case c10d::ReduceOp::PREMUL_SUM: return "PREMUL_SUM";
    default: return "UNUSED";
  }
}

}  // namespace strata::torch_backend
