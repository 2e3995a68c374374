// The reference definitions of the narrow float formats (f16, bf16, fp8 e4m3 and e5m2): decoding follows the
// format definition literally, and encoding rounds once from double to nearest even, so no intermediate f32
// rounding can double-round. They define what the branch-free codecs of util/dtype_codec.h (the kernels) must
// compute, and what a checker expects (kernels/reduce_convert.cc's scalar conversions, strata-perf's expected
// values). Header-only and dependency-free beyond the standard library; host code only. In an unnamed namespace
// for the reason dtype_codec.h gives (no weak symbols shared between instruction-set tiers).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

namespace strata::float_format {
namespace {

constexpr double pow2(int e) {
  double r = 1.0;
  for (; e > 0; --e) r *= 2.0;
  for (; e < 0; ++e) r /= 2.0;
  return r;
}

// A binary float format with E exponent bits, M mantissa bits and bias B. kFiniteOnly is the OCP "fn" flavour
// (e4m3): no infinities, only all-ones is NaN, and overflow saturates to the largest finite value.
template <int E, int M, int B, bool kFiniteOnly>
struct Format {
  static constexpr uint32_t kSign = 1u << (E + M);
  static constexpr uint32_t kExpAll = (1u << E) - 1;
  static constexpr uint32_t kMantAll = (1u << M) - 1;
  static constexpr uint32_t kNan = kFiniteOnly ? ((kExpAll << M) | kMantAll) : ((kExpAll << M) | (1u << (M - 1)));
  static constexpr uint32_t kMaxFinite =
      kFiniteOnly ? ((kExpAll << M) | (kMantAll - 1)) : (((kExpAll - 1) << M) | kMantAll);
  // What overflow and infinity become: infinity, or the largest finite value when there is none.
  static constexpr uint32_t kOverflow = kFiniteOnly ? kMaxFinite : (kExpAll << M);

  static constexpr float decode(uint32_t code) {
    const bool negative = (code & kSign) != 0;
    const uint32_t exp = (code >> M) & kExpAll;
    const uint32_t mant = code & kMantAll;
    float mag;
    if (kFiniteOnly ? (exp == kExpAll && mant == kMantAll) : exp == kExpAll) {
      mag = (!kFiniteOnly && mant == 0) ? std::numeric_limits<float>::infinity()
                                        : std::numeric_limits<float>::quiet_NaN();
    } else if (exp == 0) {
      mag = static_cast<float>(mant * pow2(1 - B - M));
    } else {
      mag = static_cast<float>((mant + (1u << M)) * pow2(static_cast<int>(exp) - B - M));
    }
    return negative ? -mag : mag;
  }

  static uint32_t encode(double v) {
    const uint32_t sign = std::signbit(v) ? kSign : 0;
    if (std::isnan(v)) return kNan | sign;
    const double x = std::fabs(v);
    if (x == 0.0) return sign;
    if (std::isinf(x)) return kOverflow | sign;
    int ex = 0;
    std::frexp(x, &ex);  // x = f * 2^ex with f in [0.5, 1)
    // The exponent x is represented with; the smallest normal exponent for subnormals.
    const int e = std::max(ex - 1, 1 - B);
    if (e > static_cast<int>(kExpAll) + 1 - B) return kOverflow | sign;
    // Mantissa as an integer plus fraction; scaling by a power of two is exact.
    const double q = std::ldexp(x, M - e);
    double m = std::floor(q);
    const double frac = q - m;
    if (frac > 0.5 || (frac == 0.5 && std::fmod(m, 2.0) != 0.0)) m += 1.0;
    const uint32_t mi = static_cast<uint32_t>(m);
    // Subnormal (exponent field 0), or normal; a mantissa that rounded up to 2^(M+1) carries into the exponent.
    uint32_t code = mi < (1u << M) ? mi : (static_cast<uint32_t>(e + B) << M) + (mi - (1u << M));
    if (code > kMaxFinite) code = kOverflow;
    return code | sign;
  }
};

using Half = Format<5, 10, 15, false>;
using Bf16 = Format<8, 7, 127, false>;
using E4m3 = Format<4, 3, 7, true>;
using E5m2 = Format<5, 2, 15, false>;

}  // namespace
}  // namespace strata::float_format
