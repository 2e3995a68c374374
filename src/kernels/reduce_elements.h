// Part of kernels/reduce_loops.h (include that, not this): what the loops do to one element. The element
// operators (integer wrap-around, NaN-propagating float max/min), and the block codecs that widen f16, bf16 and
// fp8 to f32 and narrow them back a block at a time, over the scalar codecs of util/dtype_codec.h, with F16C in
// the vector tiers where it helps.
#pragma once

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "util/dtype_codec.h"

#ifndef STRATA_KERNEL_ISA
#error "kernels/reduce_elements.h is a part of kernels/reduce_loops.h: include that"
#endif

namespace strata {
namespace {

// Elements per widening block: two f32 arrays of this size stay in L1.
constexpr size_t kBlock = 512;
constexpr size_t kCacheLine = 64;

// ---- element operators -------------------------------------------------------------------------------
// Integers go through the unsigned type: wrap-around instead of signed-overflow UB.
template <class T>
using Unsigned = std::make_unsigned_t<T>;

struct OpSum {
  template <class T>
  static T apply(T x, T y) {
    if constexpr (std::is_integral_v<T>) {
      return static_cast<T>(static_cast<Unsigned<T>>(x) + static_cast<Unsigned<T>>(y));
    } else {
      return x + y;
    }
  }
};

struct OpProd {
  template <class T>
  static T apply(T x, T y) {
    if constexpr (std::is_integral_v<T>) {
      return static_cast<T>(static_cast<Unsigned<T>>(x) * static_cast<Unsigned<T>>(y));
    } else {
      return x * y;
    }
  }
};

// Float max/min return x when x is NaN and y otherwise, so a NaN on either side comes out (see reduce.h).
struct OpMax {
  template <class T>
  static T apply(T x, T y) {
    if constexpr (std::is_integral_v<T>) {
      return x > y ? x : y;
    } else {
      return (x > y || x != x) ? x : y;
    }
  }
};

struct OpMin {
  template <class T>
  static T apply(T x, T y) {
    if constexpr (std::is_integral_v<T>) {
      return x < y ? x : y;
    } else {
      return (x < y || x != x) ? x : y;
    }
  }
};

// ---- narrow float formats: the scalar codecs of util/dtype_codec.h, internal to this tier like everything here --
using dtype_codec::Bf16;
using dtype_codec::E4m3;
using dtype_codec::E5m2;
using dtype_codec::Half;

// ---- codecs: a storage type plus block conversions to and from f32 --------------------------------------------
template <class Format, class S>
struct FormatCodec {
  using Storage = S;
  static void decode(float* __restrict out, const S* __restrict in, size_t n) {
    for (size_t i = 0; i < n; ++i) out[i] = Format::decode(in[i]);
  }
  static void encode(S* __restrict out, const float* __restrict in, size_t n) {
    for (size_t i = 0; i < n; ++i) out[i] = static_cast<S>(Format::encode(in[i]));
  }
};

struct Bf16Codec {
  using Storage = uint16_t;
  static void decode(float* __restrict out, const uint16_t* __restrict in, size_t n) {
    for (size_t i = 0; i < n; ++i) out[i] = Bf16::decode(in[i]);
  }
  static void encode(uint16_t* __restrict out, const float* __restrict in, size_t n) {
    // The code, then the store: written as one statement, GCC orders the unrolled tail differently.
    for (size_t i = 0; i < n; ++i) {
      const uint16_t code = Bf16::encode(in[i]);
      out[i] = code;
    }
  }
};

#if STRATA_KERNEL_ISA >= 1
// F16C converts f16 in hardware; vcvtps2ph rounds to nearest even whatever MXCSR says.
struct HalfCodec {
  using Storage = uint16_t;
  static void decode(float* __restrict out, const uint16_t* __restrict in, size_t n) {
    size_t whole = n & ~size_t{7};
    for (size_t i = 0; i < whole; i += 8) {
      __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
      _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
    }
    for (size_t i = whole; i < n; ++i) out[i] = Half::decode(in[i]);
  }
  static void encode(uint16_t* __restrict out, const float* __restrict in, size_t n) {
    size_t whole = n & ~size_t{7};
    for (size_t i = 0; i < whole; i += 8) {
      __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
    }
    for (size_t i = whole; i < n; ++i) out[i] = static_cast<uint16_t>(Half::encode(in[i]));
  }
};
#else
using HalfCodec = FormatCodec<Half, uint16_t>;
#endif

// e5m2 is the top byte of an f16, so decoding can reuse the f16 path; encoding cannot (rounding twice, f32 ->
// f16 -> e5m2, is wrong near ties), so it rounds directly.
struct E5m2Codec {
  using Storage = uint8_t;
  static void decode(float* __restrict out, const uint8_t* __restrict in, size_t n) {
#if STRATA_KERNEL_ISA >= 1
    size_t whole = n & ~size_t{15};
    for (size_t i = 0; i < whole; i += 16) {
      __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
      __m256i h = _mm256_slli_epi16(_mm256_cvtepu8_epi16(bytes), 8);
      _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm256_castsi256_si128(h)));
      _mm256_storeu_ps(out + i + 8, _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1)));
    }
    for (size_t i = whole; i < n; ++i) out[i] = E5m2::decode(in[i]);
#else
    for (size_t i = 0; i < n; ++i) out[i] = E5m2::decode(in[i]);
#endif
  }
  static void encode(uint8_t* __restrict out, const float* __restrict in, size_t n) {
    for (size_t i = 0; i < n; ++i) out[i] = static_cast<uint8_t>(E5m2::encode(in[i]));
  }
};

#if STRATA_KERNEL_ISA >= 1
// e4m3 decodes through F16C too: its bits shifted left by 7 form an f16 (subnormals included) worth 2^-8 times
// the e4m3 value, so one exact multiply by 256 finishes the job; only the NaN code needs a fix-up.
struct E4m3Codec {
  using Storage = uint8_t;
  static void decode(float* __restrict out, const uint8_t* __restrict in, size_t n) {
    const __m256i magMask = _mm256_set1_epi16(0x3f80);
    const __m256i signMask = _mm256_set1_epi16(static_cast<short>(0x8000));
    const __m256i nanIn = _mm256_set1_epi16(0x3f80);
    const __m256i nanHalf = _mm256_set1_epi16(0x7e00);
    const __m256 scale = _mm256_set1_ps(256.0f);
    size_t whole = n & ~size_t{15};
    for (size_t i = 0; i < whole; i += 16) {
      __m256i c = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i)));
      __m256i mag = _mm256_and_si256(_mm256_slli_epi16(c, 7), magMask);
      mag = _mm256_blendv_epi8(mag, nanHalf, _mm256_cmpeq_epi16(mag, nanIn));
      __m256i h = _mm256_or_si256(mag, _mm256_and_si256(_mm256_slli_epi16(c, 8), signMask));
      _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_cvtph_ps(_mm256_castsi256_si128(h)), scale));
      _mm256_storeu_ps(out + i + 8, _mm256_mul_ps(_mm256_cvtph_ps(_mm256_extracti128_si256(h, 1)), scale));
    }
    for (size_t i = whole; i < n; ++i) out[i] = E4m3::decode(in[i]);
  }
  static void encode(uint8_t* __restrict out, const float* __restrict in, size_t n) {
    for (size_t i = 0; i < n; ++i) out[i] = static_cast<uint8_t>(E4m3::encode(in[i]));
  }
};
#else
using E4m3Codec = FormatCodec<E4m3, uint8_t>;
#endif

}  // namespace
}  // namespace strata
