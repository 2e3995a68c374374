// The scalar codecs of the narrow float formats, f16, bf16 and fp8 (e4m3, e5m2), to and from f32: branch-free bit
// arithmetic, written once for the host reduce loops (every instruction-set tier), the CUDA kernels and the
// overlap scheduler. Header-only and dependency-free (no symbols to link), includable from plain .cc files and
// from nvcc, where every function is __host__ __device__.
//
// Rounding is to nearest even; f16 and e5m2 overflow to infinity, e4m3 (no infinities) saturates at +-448; NaN
// stays NaN. Encoding gives f16, e5m2 and e4m3 NaNs the format's quiet NaN code with the NaN's sign, and bf16 NaNs
// their sign and top payload bits with the quiet bit set; decoding keeps the payload (f16, e5m2, bf16), and e4m3's
// one NaN code decodes to f32's quiet NaN. The reference definitions these are tested against, spec-literal and
// rounding from double, are kernels/reduce_convert.cc's.
//
// Linkage: everything here is in an unnamed namespace, against the usual rule for headers, because of the
// instruction-set tiers. kernels/reduce_loops.h is compiled once per tier under `#pragma GCC target(...)`; an
// inline function or a class template's member with external linkage would be emitted as a weak symbol by every
// tier, and the linker would keep one of them, maybe the AVX-512 one, for all tiers. `static inline` would do for
// the free functions but cannot apply to the class templates (the formats); an unnamed namespace gives both
// internal linkage, so each translation unit keeps its own copy. So include this from .cc/.cu files or from code
// that is itself in an unnamed namespace, never from an inline function with external linkage in a header (that
// function would be defined differently in each translation unit).
#pragma once

#include <cstdint>

// Marks the codecs as callable from host and device code under nvcc; nothing for the host compiler.
#if defined(__CUDACC__)
#define STRATA_HOST_DEVICE __host__ __device__
#else
#define STRATA_HOST_DEVICE
#endif

namespace strata::dtype_codec {
namespace {

// ---- bit primitives ---------------------------------------------------------------------------------------------
// The host side calls builtins only (no library function compiled under a tier's target pragma). On the device,
// the _rn intrinsics keep the rounding explicit (no contraction into a fused multiply-add).
STRATA_HOST_DEVICE inline uint32_t bitsOf(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  __builtin_memcpy(&u, &f, sizeof u);
  return u;
#endif
}

STRATA_HOST_DEVICE inline float floatOf(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  __builtin_memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// Branch-free choice on integers. On the host, with plain ?: GCC turns the choice into control flow around the
// float ops and then, because float ops may trap, refuses to vectorize the loop; on the device ?: is a select.
STRATA_HOST_DEVICE inline uint32_t select(bool cond, uint32_t ifTrue, uint32_t ifFalse) {
#if defined(__CUDA_ARCH__)
  return cond ? ifTrue : ifFalse;
#else
  uint32_t mask = 0u - static_cast<uint32_t>(cond);
  return (ifTrue & mask) | (ifFalse & ~mask);
#endif
}

// x + y and x - y in f32, rounded to nearest even.
STRATA_HOST_DEVICE inline float addRn(float x, float y) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(x, y);
#else
  return x + y;
#endif
}

STRATA_HOST_DEVICE inline float subRn(float x, float y) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(x, y);
#else
  return x - y;
#endif
}

// ---- small float formats <-> f32 ------------------------------------------------------------------------------
// A format has E exponent bits, M mantissa bits and bias B. kFiniteOnly is the OCP "fn" flavour (e4m3): no
// infinities, all-ones is NaN, overflow saturates to the largest finite value.
template <int E, int M, int B, bool kFiniteOnly>
struct SmallFloat {
  static constexpr int kExpBits = E;
  static constexpr int kMantBits = M;
  static constexpr int kBias = B;
  static constexpr bool kIsFiniteOnly = kFiniteOnly;
  static constexpr uint32_t kSignBit = 1u << (E + M);
  static constexpr uint32_t kExpMask = ((1u << E) - 1) << M;
  static constexpr uint32_t kMantMask = (1u << M) - 1;
  static constexpr int kShift = 23 - M;
  // f32 bits of the smallest normal value of the format.
  static constexpr uint32_t kMinNormalBits = uint32_t(127 - B + 1) << 23;
  // Adding this to a value below kMinNormal leaves the format's subnormal mantissa in the low f32 bits, rounded
  // to nearest even by the FPU: its ulp equals the format's subnormal step.
  static constexpr uint32_t kDenormMagicBits = uint32_t(127 - B + 23 - M + 1) << 23;
  // Magnitudes (f32 bits) at or above this overflow: 2^(emax+1) for IEEE-like formats (rounding carries into
  // the infinity code below it), the largest finite value for finite-only formats (which saturate).
  static constexpr uint32_t kOverflowBits =
      kFiniteOnly ? ((uint32_t(127 + (1 << E) - 1 - B) << 23) | ((kMantMask - 1) << kShift))
                  : uint32_t(127 + (1 << E) - 1 - B) << 23;
  static constexpr uint32_t kOverflowCode = kFiniteOnly ? (kExpMask | (kMantMask - 1)) : kExpMask;
  static constexpr uint32_t kNanCode = kFiniteOnly ? (kExpMask | kMantMask) : (kExpMask | (1u << (M - 1)));

  STRATA_HOST_DEVICE static float decode(uint32_t code) {
    uint32_t sign = (code & kSignBit) << (31 - E - M);
    uint32_t em = code & (kSignBit - 1);
    uint32_t exp = em & kExpMask;
    uint32_t normal = (em << kShift) + (uint32_t(127 - B) << 23);
    // Subnormal: rebias as if normal with exponent 1, then subtract the implicit one (exact in f32).
    uint32_t subnormal = bitsOf(subRn(floatOf(normal + (1u << 23)), floatOf(kMinNormalBits)));
    uint32_t special;
    bool isSpecial;
    if constexpr (kFiniteOnly) {
      isSpecial = em == (kExpMask | kMantMask);
      special = 0x7fc00000u;
    } else {
      isSpecial = exp == kExpMask;
      special = 0x7f800000u | ((em & kMantMask) << kShift);
    }
    uint32_t out = select(exp == 0, subnormal, normal);
    out = select(isSpecial, special, out);
    return floatOf(out | sign);
  }

  STRATA_HOST_DEVICE static uint32_t encode(float f) {
    uint32_t u = bitsOf(f);
    uint32_t sign = (u >> 31) << (E + M);
    uint32_t mag = u & 0x7fffffffu;
    uint32_t subnormal = bitsOf(addRn(floatOf(mag), floatOf(kDenormMagicBits))) - kDenormMagicBits;
    uint32_t odd = (mag >> kShift) & 1;
    uint32_t normal = (mag + (uint32_t(B - 127) << 23) + ((1u << (kShift - 1)) - 1) + odd) >> kShift;
    uint32_t out = select(mag < kMinNormalBits, subnormal, normal);
    out = select(mag >= kOverflowBits, kOverflowCode, out);
    out = select(mag > 0x7f800000u, kNanCode, out);
    return out | sign;
  }
};

using Half = SmallFloat<5, 10, 15, false>;
using E4m3 = SmallFloat<4, 3, 7, true>;
using E5m2 = SmallFloat<5, 2, 15, false>;

// bf16 is the top half of an f32: decoding is a shift, encoding rounds to nearest even on the bits, and a NaN
// keeps its sign and top payload, with the quiet bit set. Its codes are 16 bits wide whatever the caller stores.
struct Bf16 {
  STRATA_HOST_DEVICE static float decode(uint32_t code) { return floatOf(code << 16); }
  STRATA_HOST_DEVICE static uint16_t encode(float f) {
    uint32_t u = bitsOf(f);
    uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1)) >> 16;
    uint32_t nan = (u >> 16) | 0x40u;
    return static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
  }
};

}  // namespace
}  // namespace strata::dtype_codec
