#include "dtype.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include "util/float_format.h"

namespace strata::perf {
namespace {

// The mantissa bits and bias of each float format, for ulpOf (the conversions are util/float_format.h's).
struct FloatFormat {
  int mantBits, bias;
};
constexpr FloatFormat kHalf{10, 15};
constexpr FloatFormat kBfloat16{7, 127};
constexpr FloatFormat kE4m3{3, 7};
constexpr FloatFormat kE5m2{2, 15};
constexpr FloatFormat kFloat{23, 127};
constexpr FloatFormat kDouble{52, 1023};

const FloatFormat* formatOf(strataDataType_t t) {
  switch (t) {
    case strataFloat16: return &kHalf;
    case strataBfloat16: return &kBfloat16;
    case strataFloat8e4m3: return &kE4m3;
    case strataFloat8e5m2: return &kE5m2;
    case strataFloat32: return &kFloat;
    case strataFloat64: return &kDouble;
    default: return nullptr;
  }
}

template <typename T>
void storeAs(void* base, size_t index, T v) {
  std::memcpy(static_cast<char*>(base) + index * sizeof(T), &v, sizeof(T));
}
template <typename T>
T loadAs(const void* base, size_t index) {
  T v;
  std::memcpy(&v, static_cast<const char*>(base) + index * sizeof(T), sizeof(T));
  return v;
}

}  // namespace

const std::vector<DtypeInfo>& allDtypes() {
  static const std::vector<DtypeInfo> kTypes = {
      {strataInt8, "int8", 1, false, true, 0},          {strataUint8, "uint8", 1, false, false, 0},
      {strataInt32, "int32", 4, false, true, 0},        {strataUint32, "uint32", 4, false, false, 0},
      {strataInt64, "int64", 8, false, true, 0},        {strataUint64, "uint64", 8, false, false, 0},
      {strataFloat16, "half", 2, true, true, 10},       {strataFloat32, "float", 4, true, true, 23},
      {strataFloat64, "double", 8, true, true, 52},     {strataBfloat16, "bfloat16", 2, true, true, 7},
      {strataFloat8e4m3, "fp8_e4m3", 1, true, true, 3}, {strataFloat8e5m2, "fp8_e5m2", 1, true, true, 2},
  };
  return kTypes;
}

const DtypeInfo* findDtype(std::string_view name) {
  struct Alias {
    const char* alias;
    strataDataType_t type;
  };
  static const Alias kAliases[] = {
      {"char", strataInt8},         {"int", strataInt32},         {"float16", strataFloat16},
      {"fp16", strataFloat16},      {"float32", strataFloat32},   {"fp32", strataFloat32},
      {"float64", strataFloat64},   {"fp64", strataFloat64},      {"bf16", strataBfloat16},
      {"e4m3", strataFloat8e4m3},   {"f8e4m3", strataFloat8e4m3}, {"e5m2", strataFloat8e5m2},
      {"f8e5m2", strataFloat8e5m2},
  };
  for (const DtypeInfo& t : allDtypes()) {
    if (name == t.name) return &t;
  }
  for (const Alias& a : kAliases) {
    if (name == a.alias) return &allDtypes()[static_cast<size_t>(a.type)];
  }
  return nullptr;
}

void storeValue(const DtypeInfo& t, void* base, size_t index, double v) {
  switch (t.type) {
    case strataInt8: storeAs(base, index, static_cast<int8_t>(static_cast<int64_t>(v))); break;
    case strataUint8: storeAs(base, index, static_cast<uint8_t>(static_cast<int64_t>(v))); break;
    case strataInt32: storeAs(base, index, static_cast<int32_t>(static_cast<int64_t>(v))); break;
    case strataUint32: storeAs(base, index, static_cast<uint32_t>(static_cast<int64_t>(v))); break;
    case strataInt64: storeAs(base, index, static_cast<int64_t>(v)); break;
    case strataUint64: storeAs(base, index, static_cast<uint64_t>(static_cast<int64_t>(v))); break;
    case strataFloat32: storeAs(base, index, static_cast<float>(v)); break;
    case strataFloat64: storeAs(base, index, v); break;
    case strataFloat16: storeAs(base, index, static_cast<uint16_t>(float_format::Half::encode(v))); break;
    case strataBfloat16: storeAs(base, index, static_cast<uint16_t>(float_format::Bf16::encode(v))); break;
    case strataFloat8e4m3: storeAs(base, index, static_cast<uint8_t>(float_format::E4m3::encode(v))); break;
    case strataFloat8e5m2: storeAs(base, index, static_cast<uint8_t>(float_format::E5m2::encode(v))); break;
    default: break;
  }
}

double loadValue(const DtypeInfo& t, const void* base, size_t index) {
  switch (t.type) {
    case strataInt8: return loadAs<int8_t>(base, index);
    case strataUint8: return loadAs<uint8_t>(base, index);
    case strataInt32: return loadAs<int32_t>(base, index);
    case strataUint32: return loadAs<uint32_t>(base, index);
    case strataInt64: return static_cast<double>(loadAs<int64_t>(base, index));
    case strataUint64: return static_cast<double>(loadAs<uint64_t>(base, index));
    case strataFloat32: return loadAs<float>(base, index);
    case strataFloat64: return loadAs<double>(base, index);
    case strataFloat16: return float_format::Half::decode(loadAs<uint16_t>(base, index));
    case strataBfloat16: return float_format::Bf16::decode(loadAs<uint16_t>(base, index));
    case strataFloat8e4m3: return float_format::E4m3::decode(loadAs<uint8_t>(base, index));
    case strataFloat8e5m2: return float_format::E5m2::decode(loadAs<uint8_t>(base, index));
    default: return NAN;
  }
}

double roundToDtype(const DtypeInfo& t, double v) {
  if (!t.isFloat) return v;
  unsigned char tmp[8];
  storeValue(t, tmp, 0, v);
  return loadValue(t, tmp, 0);
}

double ulpOf(const DtypeInfo& t, double v) {
  const FloatFormat* f = formatOf(t.type);
  if (f == nullptr) return 1.0;
  const double smallest = std::ldexp(1.0, 1 - f->bias - f->mantBits);
  double a = std::fabs(v);
  if (a == 0 || !std::isfinite(a)) return smallest;
  int e = 0;
  std::frexp(a, &e);  // a in [2^(e-1), 2^e)
  double ulp = std::ldexp(1.0, e - 1 - f->mantBits);
  return ulp < smallest ? smallest : ulp;
}

}  // namespace strata::perf
