// strata_soak's dtypes (dtypes.h): the narrow floats encoded and decoded, elements loaded and stored.
#include "dtypes.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "failure.h"

namespace soak {

namespace {

// A narrow binary float (f16, bf16, fp8) with E exponent bits, M mantissa bits and bias B; kFiniteOnly is the OCP
// e4m3 flavour (no infinities, all-ones is NaN). This program only stores small integers, so encode needs no
// rounding and refuses a value it cannot represent exactly (a bug of this program, not of the library).
template <int E, int M, int B, bool kFiniteOnly>
struct NarrowFloat {
  static constexpr uint32_t kExpAll = (1u << E) - 1;
  static constexpr uint32_t kMantAll = (1u << M) - 1;

  static double decode(uint32_t code) {
    const uint32_t exp = (code >> M) & kExpAll, mant = code & kMantAll;
    double mag;
    if (exp == kExpAll && (!kFiniteOnly || mant == kMantAll)) mag = (kFiniteOnly || mant) ? NAN : INFINITY;
    else if (exp == 0) mag = std::ldexp(mant, 1 - B - M);
    else mag = std::ldexp(mant + (1u << M), static_cast<int>(exp) - B - M);
    return (code >> (E + M)) & 1 ? -mag : mag;
  }

  static uint32_t encode(double v) {
    const uint32_t sign = std::signbit(v) ? 1u << (E + M) : 0;
    const double x = std::fabs(v);
    if (x == 0) return sign;
    int ex = 0;
    std::frexp(x, &ex);                     // x = f * 2^ex with f in [0.5, 1)
    const int e = std::max(ex - 1, 1 - B);  // the exponent x is stored with (subnormals: the least)
    const double q = std::ldexp(x, M - e);  // the significand as an integer, when x is representable
    if (q != std::floor(q) || e + B >= static_cast<int>(kExpAll)) die("%g is not exact in this float format", v);
    const uint32_t m = static_cast<uint32_t>(q);
    return (m < (1u << M) ? m : (static_cast<uint32_t>(e + B) << M) + (m - (1u << M))) | sign;
  }
};
using Half = NarrowFloat<5, 10, 15, false>;
using Bf16 = NarrowFloat<8, 7, 127, false>;
using E4m3 = NarrowFloat<4, 3, 7, true>;
using E5m2 = NarrowFloat<5, 2, 15, false>;

template <class T>
T loadAs(const unsigned char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <class T>
void storeAs(unsigned char* p, T v) {
  std::memcpy(p, &v, sizeof v);
}

}  // namespace

double load(const unsigned char* base, size_t i, strataDataType_t t) {
  const unsigned char* p = base + i * info(t).size;
  switch (t) {
    case strataInt8: return loadAs<int8_t>(p);
    case strataUint8: return loadAs<uint8_t>(p);
    case strataInt32: return loadAs<int32_t>(p);
    case strataUint32: return loadAs<uint32_t>(p);
    case strataInt64: return static_cast<double>(loadAs<int64_t>(p));
    case strataUint64: return static_cast<double>(loadAs<uint64_t>(p));
    case strataFloat16: return Half::decode(loadAs<uint16_t>(p));
    case strataFloat32: return loadAs<float>(p);
    case strataFloat64: return loadAs<double>(p);
    case strataBfloat16: return Bf16::decode(loadAs<uint16_t>(p));
    case strataFloat8e4m3: return E4m3::decode(*p);
    case strataFloat8e5m2: return E5m2::decode(*p);
    default: die("load: dtype %d", static_cast<int>(t));
  }
}

void store(unsigned char* base, size_t i, strataDataType_t t, double v) {
  unsigned char* p = base + i * info(t).size;
  switch (t) {
    case strataInt8: storeAs(p, static_cast<int8_t>(v)); break;
    case strataUint8: storeAs(p, static_cast<uint8_t>(v)); break;
    case strataInt32: storeAs(p, static_cast<int32_t>(v)); break;
    case strataUint32: storeAs(p, static_cast<uint32_t>(v)); break;
    case strataInt64: storeAs(p, static_cast<int64_t>(v)); break;
    case strataUint64: storeAs(p, static_cast<uint64_t>(v)); break;
    case strataFloat16: storeAs(p, static_cast<uint16_t>(Half::encode(v))); break;
    case strataFloat32: storeAs(p, static_cast<float>(v)); break;
    case strataFloat64: storeAs(p, v); break;
    case strataBfloat16: storeAs(p, static_cast<uint16_t>(Bf16::encode(v))); break;
    case strataFloat8e4m3: *p = static_cast<unsigned char>(E4m3::encode(v)); break;
    case strataFloat8e5m2: *p = static_cast<unsigned char>(E5m2::encode(v)); break;
    default: die("store: dtype %d", static_cast<int>(t));
  }
}

}  // namespace soak
