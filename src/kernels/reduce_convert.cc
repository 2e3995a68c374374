// Scalar conversions between f32/f64 and the narrow float formats, and element access as double.
//
// These are the reference definitions (util/float_format.h): decoding follows the format definition literally
// (fp8 through 256-entry tables built at compile time), and encoding rounds once from double with an explicit
// round-to-nearest-even, so no intermediate f32 rounding can double-round. The branch-free codecs of
// util/dtype_codec.h (the reduce loops of every tier, the CUDA kernels, the overlap scheduler) use bit tricks
// instead and are tested against these, so the two stay separate; bf16 decoding, a shift, is the one they share.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "kernels/reduce.h"
#include "util/dtype_codec.h"
#include "util/error.h"
#include "util/float_format.h"

namespace strata {
namespace {

using HalfFormat = float_format::Half;
using Bf16Format = float_format::Bf16;
using E4m3Format = float_format::E4m3;
using E5m2Format = float_format::E5m2;

template <class F>
constexpr std::array<float, 256> makeTable() {
  std::array<float, 256> t{};
  for (uint32_t c = 0; c < 256; ++c) t[c] = F::decode(c);
  return t;
}

constexpr std::array<float, 256> kE4m3ToFloat = makeTable<E4m3Format>();
constexpr std::array<float, 256> kE5m2ToFloat = makeTable<E5m2Format>();

// Truncates toward zero and saturates at T's range; NaN gives 0.
template <class T>
T doubleToInt(double v) {
  if (std::isnan(v)) return 0;
  // Powers of two, exact in double: the first value above the range and the lowest in it.
  const double half = std::ldexp(1.0, static_cast<int>(sizeof(T) * 8 - 1));
  const double above = std::numeric_limits<T>::is_signed ? half : 2 * half;
  const double lowest = std::numeric_limits<T>::is_signed ? -half : 0.0;
  if (v >= above) return std::numeric_limits<T>::max();
  if (v <= lowest) return std::numeric_limits<T>::min();
  return static_cast<T>(v);
}

template <class T>
T loadRaw(const void* buf, size_t i) {
  T v;
  std::memcpy(&v, static_cast<const char*>(buf) + i * sizeof(T), sizeof(T));
  return v;
}

template <class T>
void storeRaw(void* buf, size_t i, T v) {
  std::memcpy(static_cast<char*>(buf) + i * sizeof(T), &v, sizeof(T));
}

}  // namespace

float halfToFloat(uint16_t h) { return HalfFormat::decode(h); }
uint16_t floatToHalf(float f) { return static_cast<uint16_t>(HalfFormat::encode(f)); }

// bf16 decoding is a shift, nothing to define twice: the codec's.
float bf16ToFloat(uint16_t b) { return dtype_codec::Bf16::decode(b); }
uint16_t floatToBf16(float f) { return static_cast<uint16_t>(Bf16Format::encode(f)); }

float fp8e4m3ToFloat(uint8_t v) { return kE4m3ToFloat[v]; }
uint8_t floatToFp8e4m3(float f) { return static_cast<uint8_t>(E4m3Format::encode(f)); }
float fp8e5m2ToFloat(uint8_t v) { return kE5m2ToFloat[v]; }
uint8_t floatToFp8e5m2(float f) { return static_cast<uint8_t>(E5m2Format::encode(f)); }

double loadAsDouble(const void* buf, size_t i, strataDataType_t dt) {
  switch (dt) {
    case strataInt8: return loadRaw<int8_t>(buf, i);
    case strataUint8: return loadRaw<uint8_t>(buf, i);
    case strataInt32: return loadRaw<int32_t>(buf, i);
    case strataUint32: return loadRaw<uint32_t>(buf, i);
    case strataInt64: return static_cast<double>(loadRaw<int64_t>(buf, i));
    case strataUint64: return static_cast<double>(loadRaw<uint64_t>(buf, i));
    case strataFloat16: return halfToFloat(loadRaw<uint16_t>(buf, i));
    case strataFloat32: return loadRaw<float>(buf, i);
    case strataFloat64: return loadRaw<double>(buf, i);
    case strataBfloat16: return bf16ToFloat(loadRaw<uint16_t>(buf, i));
    case strataFloat8e4m3: return fp8e4m3ToFloat(loadRaw<uint8_t>(buf, i));
    case strataFloat8e5m2: return fp8e5m2ToFloat(loadRaw<uint8_t>(buf, i));
    default: break;
  }
  throw InvalidArgument(strprintf("loadAsDouble: invalid datatype %d", static_cast<int>(dt)));
}

void storeFromDouble(void* buf, size_t i, strataDataType_t dt, double v) {
  switch (dt) {
    case strataInt8: return storeRaw(buf, i, doubleToInt<int8_t>(v));
    case strataUint8: return storeRaw(buf, i, doubleToInt<uint8_t>(v));
    case strataInt32: return storeRaw(buf, i, doubleToInt<int32_t>(v));
    case strataUint32: return storeRaw(buf, i, doubleToInt<uint32_t>(v));
    case strataInt64: return storeRaw(buf, i, doubleToInt<int64_t>(v));
    case strataUint64: return storeRaw(buf, i, doubleToInt<uint64_t>(v));
    case strataFloat16: return storeRaw(buf, i, static_cast<uint16_t>(HalfFormat::encode(v)));
    case strataFloat32: return storeRaw(buf, i, static_cast<float>(v));
    case strataFloat64: return storeRaw(buf, i, v);
    case strataBfloat16: return storeRaw(buf, i, static_cast<uint16_t>(Bf16Format::encode(v)));
    case strataFloat8e4m3: return storeRaw(buf, i, static_cast<uint8_t>(E4m3Format::encode(v)));
    case strataFloat8e5m2: return storeRaw(buf, i, static_cast<uint8_t>(E5m2Format::encode(v)));
    default: break;
  }
  throw InvalidArgument(strprintf("storeFromDouble: invalid datatype %d", static_cast<int>(dt)));
}

}  // namespace strata
