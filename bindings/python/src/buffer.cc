// One array argument of a call, validated (buffer.h): the DLPack dtypes and devices Strata takes, and the checks.
#include "buffer.h"

#include <string>

#include "errors.h"

namespace strata::python_ext {

namespace {

constexpr int kDLCPU = 1;
constexpr int kDLCUDA = 2;
constexpr int kDLCUDAHost = 3;
constexpr int kDLCUDAManaged = 13;

struct DtypeInfo {
  uint8_t code;
  uint8_t bits;
  strataDataType_t dtype;
  const char* name;
};
using Code = nb::dlpack::dtype_code;
constexpr DtypeInfo kDtypes[] = {
    {(uint8_t)Code::Int, 8, strataInt8, "int8"},
    {(uint8_t)Code::UInt, 8, strataUint8, "uint8"},
    {(uint8_t)Code::Int, 32, strataInt32, "int32"},
    {(uint8_t)Code::UInt, 32, strataUint32, "uint32"},
    {(uint8_t)Code::Int, 64, strataInt64, "int64"},
    {(uint8_t)Code::UInt, 64, strataUint64, "uint64"},
    {(uint8_t)Code::Float, 16, strataFloat16, "float16"},
    {(uint8_t)Code::Float, 32, strataFloat32, "float32"},
    {(uint8_t)Code::Float, 64, strataFloat64, "float64"},
    {(uint8_t)Code::Bfloat, 16, strataBfloat16, "bfloat16"},
    {(uint8_t)Code::Float8_E4M3FN, 8, strataFloat8e4m3, "float8_e4m3fn"},
    {(uint8_t)Code::Float8_E5M2, 8, strataFloat8e5m2, "float8_e5m2"},
};
constexpr const char* kSupported =
    "int8, uint8, int32, uint32, int64, uint64, float16, float32, float64, bfloat16, float8_e4m3fn, float8_e5m2";

std::string dtypeName(nb::dlpack::dtype dt) {
  for (const auto& d : kDtypes)
    if (d.code == dt.code && d.bits == dt.bits && dt.lanes == 1) return d.name;
  const char* prefix = "unknown";
  switch (static_cast<Code>(dt.code)) {
    case Code::Int: prefix = "int"; break;
    case Code::UInt: prefix = "uint"; break;
    case Code::Float: prefix = "float"; break;
    case Code::Bfloat: prefix = "bfloat"; break;
    case Code::Complex: prefix = "complex"; break;
    case Code::Bool: return "bool";
    default: return "dlpack type code " + std::to_string(dt.code) + " with " + std::to_string(dt.bits) + " bits";
  }
  std::string s = prefix + std::to_string(dt.bits);
  if (dt.lanes != 1) s += "x" + std::to_string(dt.lanes);
  return s;
}

std::string shapeString(const nb::ndarray<nb::ro>& a, bool strides) {
  std::string s = "(";
  for (size_t i = 0; i < a.ndim(); ++i) {
    if (i) s += ", ";
    s += std::to_string(strides ? a.stride(i) : static_cast<int64_t>(a.shape(i)));
  }
  if (a.ndim() == 1) s += ",";
  return s + ")";
}

}  // namespace

// `what` is "strata.all_reduce", `name` the argument ("tensor", "output").
Buffer view(nb::handle obj, const std::string& what, const char* name, bool writable) {
  Buffer b;
  nb::ndarray<> rw;
  if (nb::try_cast(obj, rw, /*convert=*/false)) {
    b.array = nb::ndarray<nb::ro>(rw);
  } else if (!nb::try_cast(obj, b.array, /*convert=*/false)) {
    raiseType(what + ": " + name + " must be a numpy array or a DLPack tensor (e.g. torch.Tensor), got " +
              nb::type_name(obj.type()).c_str());
  } else if (writable) {
    raiseValue(what + ": " + name + " is read-only, but the result is written into it");
  }
  const nb::ndarray<nb::ro>& a = b.array;
  const nb::dlpack::dtype dt = a.dtype();
  bool known = false;
  for (const auto& d : kDtypes) {
    if (d.code == dt.code && d.bits == dt.bits && dt.lanes == 1) {
      b.dtype = d.dtype;
      b.dtypeName = d.name;
      known = true;
    }
  }
  if (!known)
    raiseType(what + ": " + name + " has dtype " + dtypeName(dt) +
              ", which Strata does not support (supported: " + kSupported + ")");
  b.count = a.size();
  // Strides are in elements; dimensions of extent 1 may have any stride.
  if (b.count > 1) {
    int64_t expected = 1;
    for (size_t i = a.ndim(); i-- > 0;) {
      if (a.shape(i) != 1 && a.stride(i) != expected)
        raiseValue(what + ": " + name + " is not contiguous (shape " + shapeString(a, false) + ", strides " +
                   shapeString(a, true) + " in elements); pass a C-contiguous copy " +
                   "(numpy.ascontiguousarray(x) or tensor.contiguous())");
      expected *= static_cast<int64_t>(a.shape(i));
    }
  }
  switch (a.device_type()) {
    case kDLCPU:
    case kDLCUDAHost:  // pinned host memory
      break;
    case kDLCUDA:
    case kDLCUDAManaged:
      b.onDevice = true;
      b.deviceId = a.device_id();
      break;
    default:
      raiseValue(what + ": " + name + " is on DLPack device type " + std::to_string(a.device_type()) +
                 "; Strata takes host memory and (in CUDA builds) CUDA memory");
  }
  b.data = const_cast<void*>(a.data());
  return b;
}

void sameDtype(const Buffer& a, const Buffer& b, const std::string& what) {
  if (a.dtype != b.dtype)
    raiseType(what + ": tensor has dtype " + a.dtypeName + " but output has dtype " + b.dtypeName +
              "; they must match");
  if (a.onDevice != b.onDevice)
    raiseValue(what + ": tensor and output must both be in host memory or both on a CUDA device");
}

// cudaStreamLegacy: device memory must never go with a NULL stream, which the C API reads as host buffers.
constexpr uintptr_t kCudaStreamLegacy = 1;
uintptr_t streamFor(const Buffer& b, uintptr_t stream) {
  if (!b.onDevice) return 0;
  return stream ? stream : kCudaStreamLegacy;
}

}  // namespace strata::python_ext
