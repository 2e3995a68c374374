// The reduce and scale loops, written once and compiled once per instruction-set tier.
//
// Each tier's .cc (reduce_portable.cc, reduce_avx2.cc, reduce_avx512.cc) includes its standard headers, then
// sets `#pragma GCC target(...)` and STRATA_KERNEL_ISA, then includes this file. Everything here lives in an
// anonymous namespace so each tier gets its own copy: no inline function compiled for AVX-512 can be picked by
// the linker for the portable tier. For the same reason this file calls only builtins and its own functions.
//
// The loops are plain C++ the compiler vectorizes (check with -fopt-info-vec). f16, bf16 and fp8 are widened
// to f32 in blocks of kBlock elements into stack arrays, combined there, and rounded back, so the conversion
// loops are branch-free and vectorize too. Exact aliasing (dst == a and/or dst == b) is dispatched to loops
// whose __restrict qualifiers stay true.
#pragma once

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "kernels/reduce.h"

#ifndef STRATA_KERNEL_ISA
#error "define STRATA_KERNEL_ISA (0 portable, 1 AVX2, 2 AVX-512) before including kernels/reduce_loops.h"
#endif

namespace strata {
namespace {

// Elements per widening block: two f32 arrays of this size stay in L1.
constexpr size_t kBlock = 512;
constexpr size_t kCacheLine = 64;

inline uint32_t bitsOf(float f) {
  uint32_t u;
  __builtin_memcpy(&u, &f, sizeof u);
  return u;
}

inline float floatOf(uint32_t u) {
  float f;
  __builtin_memcpy(&f, &u, sizeof f);
  return f;
}

// Branch-free choice on integers. With plain ?: GCC turns the choice into control flow around the float ops and
// then, because float ops may trap, refuses to vectorize the loop.
inline uint32_t select(bool cond, uint32_t ifTrue, uint32_t ifFalse) {
  uint32_t mask = 0u - static_cast<uint32_t>(cond);
  return (ifTrue & mask) | (ifFalse & ~mask);
}

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

// ---- small float formats <-> f32, branch-free so they vectorize ------------------------------------------
// A format has E exponent bits, M mantissa bits and bias B. kFiniteOnly is the OCP "fn" flavour (e4m3): no
// infinities, all-ones is NaN, overflow saturates to the largest finite value.
template <int E, int M, int B, bool kFiniteOnly>
struct SmallFloat {
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

  static float decode(uint32_t code) {
    uint32_t sign = (code & kSignBit) << (31 - E - M);
    uint32_t em = code & (kSignBit - 1);
    uint32_t exp = em & kExpMask;
    uint32_t normal = (em << kShift) + (uint32_t(127 - B) << 23);
    // Subnormal: rebias as if normal with exponent 1, then subtract the implicit one.
    uint32_t subnormal = bitsOf(floatOf(normal + (1u << 23)) - floatOf(kMinNormalBits));
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

  static uint32_t encode(float f) {
    uint32_t u = bitsOf(f);
    uint32_t sign = (u >> 31) << (E + M);
    uint32_t mag = u & 0x7fffffffu;
    uint32_t subnormal = bitsOf(floatOf(mag) + floatOf(kDenormMagicBits)) - kDenormMagicBits;
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
    for (size_t i = 0; i < n; ++i) out[i] = floatOf(uint32_t(in[i]) << 16);
  }
  // Round to nearest even on the bits; NaN keeps its sign and top payload, with the quiet bit set.
  static void encode(uint16_t* __restrict out, const float* __restrict in, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      uint32_t u = bitsOf(in[i]);
      uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1)) >> 16;
      uint32_t nan = (u >> 16) | 0x40u;
      out[i] = static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
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

// ---- non-temporal copy of whole cache lines ----------------------------------------------------------------
// dst is cache-line aligned, src is an aligned stack block, bytes is a multiple of kCacheLine.
inline void streamLines(void* dst, const void* src, size_t bytes) {
#if STRATA_KERNEL_ISA >= 2
  for (size_t i = 0; i < bytes; i += 64) {
    _mm512_stream_si512(reinterpret_cast<__m512i*>(static_cast<char*>(dst) + i),
                        _mm512_load_si512(static_cast<const char*>(src) + i));
  }
#elif STRATA_KERNEL_ISA >= 1
  for (size_t i = 0; i < bytes; i += 32) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(static_cast<char*>(dst) + i),
                        _mm256_load_si256(reinterpret_cast<const __m256i*>(static_cast<const char*>(src) + i)));
  }
#elif defined(__SSE2__)
  for (size_t i = 0; i < bytes; i += 16) {
    _mm_stream_si128(reinterpret_cast<__m128i*>(static_cast<char*>(dst) + i),
                     _mm_load_si128(reinterpret_cast<const __m128i*>(static_cast<const char*>(src) + i)));
  }
#else
  __builtin_memcpy(dst, src, bytes);
#endif
}

inline void streamFence() {
#if defined(__SSE2__)
  // Non-temporal stores are weakly ordered: fence them before anyone publishes the buffer to a peer.
  _mm_sfence();
#endif
}

// ---- kernels: Native<T, Op> combines in T, Widened<Codec, Op> combines in f32 --------------------------------
// Each kernel has direct(d, a, b, n), which allows exact aliasing, and block(out, a, b, n) with n <= kBlock and
// out a private buffer.
template <class T, class Op>
struct Native {
  using Storage = T;
  static void restrict3(T* __restrict d, const T* __restrict a, const T* __restrict b, size_t n) {
    for (size_t i = 0; i < n; ++i) d[i] = Op::apply(a[i], b[i]);
  }
  static void intoA(T* __restrict d, const T* __restrict b, size_t n) {
    for (size_t i = 0; i < n; ++i) d[i] = Op::apply(d[i], b[i]);
  }
  static void intoB(T* __restrict d, const T* __restrict a, size_t n) {
    for (size_t i = 0; i < n; ++i) d[i] = Op::apply(a[i], d[i]);
  }
  static void intoSelf(T* __restrict d, size_t n) {
    for (size_t i = 0; i < n; ++i) d[i] = Op::apply(d[i], d[i]);
  }
  static void direct(T* d, const T* a, const T* b, size_t n) {
    // a == b with d elsewhere is fine for restrict3: a and b are only read.
    if (d == a && d == b) {
      intoSelf(d, n);
    } else if (d == a) {
      intoA(d, b, n);
    } else if (d == b) {
      intoB(d, a, n);
    } else {
      restrict3(d, a, b, n);
    }
  }
  static void block(T* out, const T* a, const T* b, size_t n) { restrict3(out, a, b, n); }
};

template <class Op>
void combineF32(float* __restrict x, const float* __restrict y, size_t n) {
  for (size_t i = 0; i < n; ++i) x[i] = Op::apply(x[i], y[i]);
}

template <class Codec, class Op>
struct Widened {
  using Storage = typename Codec::Storage;
  using S = Storage;
  // All of a block is read before any of it is written, so out may equal a or b.
  static void block(S* out, const S* a, const S* b, size_t n) {
    alignas(kCacheLine) float fa[kBlock];
    alignas(kCacheLine) float fb[kBlock];
    Codec::decode(fa, a, n);
    Codec::decode(fb, b, n);
    combineF32<Op>(fa, fb, n);
    Codec::encode(out, fa, n);
  }
  static void direct(S* d, const S* a, const S* b, size_t n) {
    for (size_t i = 0; i < n; i += kBlock) block(d + i, a + i, b + i, n - i < kBlock ? n - i : kBlock);
  }
};

// Runs a kernel over n elements. Large destinations are written through a cache-resident block with
// non-temporal stores (see kReduceStreamingBytes); the unaligned head and the tail go the direct way.
template <class K>
void runReduce(void* dstv, const void* av, const void* bv, size_t n) {
  using S = typename K::Storage;
  S* d = static_cast<S*>(dstv);
  const S* a = static_cast<const S*>(av);
  const S* b = static_cast<const S*>(bv);
  uintptr_t addr = reinterpret_cast<uintptr_t>(d);
  if (n * sizeof(S) < kReduceStreamingBytes || addr % sizeof(S) != 0) {
    K::direct(d, a, b, n);
    return;
  }
  size_t head = ((kCacheLine - addr % kCacheLine) % kCacheLine) / sizeof(S);
  K::direct(d, a, b, head);
  size_t i = head;
  alignas(kCacheLine) S tmp[kBlock];
  for (; i + kBlock <= n; i += kBlock) {
    K::block(tmp, a + i, b + i, kBlock);
    streamLines(d + i, tmp, sizeof tmp);
  }
  K::direct(d + i, a + i, b + i, n - i);
  streamFence();
}

template <class Op>
void reduceByType(void* d, const void* a, const void* b, size_t n, strataDataType_t dt) {
  switch (dt) {
    case strataInt8:
      return runReduce<Native<int8_t, Op>>(d, a, b, n);
    case strataUint8:
      return runReduce<Native<uint8_t, Op>>(d, a, b, n);
    case strataInt32:
      return runReduce<Native<int32_t, Op>>(d, a, b, n);
    case strataUint32:
      return runReduce<Native<uint32_t, Op>>(d, a, b, n);
    case strataInt64:
      return runReduce<Native<int64_t, Op>>(d, a, b, n);
    case strataUint64:
      return runReduce<Native<uint64_t, Op>>(d, a, b, n);
    case strataFloat16:
      return runReduce<Widened<HalfCodec, Op>>(d, a, b, n);
    case strataFloat32:
      return runReduce<Native<float, Op>>(d, a, b, n);
    case strataFloat64:
      return runReduce<Native<double, Op>>(d, a, b, n);
    case strataBfloat16:
      return runReduce<Widened<Bf16Codec, Op>>(d, a, b, n);
    case strataFloat8e4m3:
      return runReduce<Widened<E4m3Codec, Op>>(d, a, b, n);
    case strataFloat8e5m2:
      return runReduce<Widened<E5m2Codec, Op>>(d, a, b, n);
    default:
      return;  // validated by the caller
  }
}

// Validated by the caller (reduce.cc) before it picks a tier.
void reduceLoops(void* d, const void* a, const void* b, size_t n, strataDataType_t dt, ReduceKind op) {
  switch (op) {
    case ReduceKind::kSum:
      return reduceByType<OpSum>(d, a, b, n, dt);
    case ReduceKind::kProd:
      return reduceByType<OpProd>(d, a, b, n, dt);
    case ReduceKind::kMax:
      return reduceByType<OpMax>(d, a, b, n, dt);
    case ReduceKind::kMin:
      return reduceByType<OpMin>(d, a, b, n, dt);
  }
}

// ---- scaling ------------------------------------------------------------------------------------------------
// Float to integer, truncating toward zero and saturating at T's range; NaN gives 0. W is float or double.
template <class T, class W>
T saturateToInt(W v) {
  constexpr int kBits = sizeof(T) * 8;
  // The first value above the range and the lowest value in it, both powers of two and so exact in W.
  constexpr W kHalfRange = static_cast<W>(Unsigned<T>(1) << (kBits - 1));
  constexpr W kAbove = std::is_signed_v<T> ? kHalfRange : 2 * kHalfRange;
  constexpr W kLowest = std::is_signed_v<T> ? -kHalfRange : W(0);
  if (v != v) return 0;
  if (v >= kAbove) return std::numeric_limits<T>::max();
  if (v <= kLowest) return std::numeric_limits<T>::min();
  return static_cast<T>(v);
}

template <class T>
struct NativeScale {
  // f64 for 64-bit types, f32 otherwise.
  using W = std::conditional_t<sizeof(T) == 8, double, float>;
  static T one(T x, W s) {
    if constexpr (std::is_integral_v<T>) {
      return saturateToInt<T, W>(static_cast<W>(x) * s);
    } else {
      return x * s;
    }
  }
  static void apart(T* __restrict d, const T* __restrict src, size_t n, W s) {
    for (size_t i = 0; i < n; ++i) d[i] = one(src[i], s);
  }
  static void inPlace(T* __restrict d, size_t n, W s) {
    for (size_t i = 0; i < n; ++i) d[i] = one(d[i], s);
  }
  static void run(void* dv, const void* srcv, size_t n, double scalar) {
    T* d = static_cast<T*>(dv);
    const T* src = static_cast<const T*>(srcv);
    if (d == src) {
      inPlace(d, n, static_cast<W>(scalar));
    } else {
      apart(d, src, n, static_cast<W>(scalar));
    }
  }
};

template <class Codec>
struct WidenedScale {
  using S = typename Codec::Storage;
  static void mul(float* __restrict x, size_t n, float s) {
    for (size_t i = 0; i < n; ++i) x[i] *= s;
  }
  static void run(void* dv, const void* srcv, size_t n, double scalar) {
    S* d = static_cast<S*>(dv);
    const S* src = static_cast<const S*>(srcv);
    float s = static_cast<float>(scalar);
    alignas(kCacheLine) float f[kBlock];
    for (size_t i = 0; i < n; i += kBlock) {
      size_t m = n - i < kBlock ? n - i : kBlock;
      Codec::decode(f, src + i, m);
      mul(f, m, s);
      Codec::encode(d + i, f, m);
    }
  }
};

void scaleLoops(void* d, const void* src, size_t n, strataDataType_t dt, double scalar) {
  switch (dt) {
    case strataInt8:
      return NativeScale<int8_t>::run(d, src, n, scalar);
    case strataUint8:
      return NativeScale<uint8_t>::run(d, src, n, scalar);
    case strataInt32:
      return NativeScale<int32_t>::run(d, src, n, scalar);
    case strataUint32:
      return NativeScale<uint32_t>::run(d, src, n, scalar);
    case strataInt64:
      return NativeScale<int64_t>::run(d, src, n, scalar);
    case strataUint64:
      return NativeScale<uint64_t>::run(d, src, n, scalar);
    case strataFloat16:
      return WidenedScale<HalfCodec>::run(d, src, n, scalar);
    case strataFloat32:
      return NativeScale<float>::run(d, src, n, scalar);
    case strataFloat64:
      return NativeScale<double>::run(d, src, n, scalar);
    case strataBfloat16:
      return WidenedScale<Bf16Codec>::run(d, src, n, scalar);
    case strataFloat8e4m3:
      return WidenedScale<E4m3Codec>::run(d, src, n, scalar);
    case strataFloat8e5m2:
      return WidenedScale<E5m2Codec>::run(d, src, n, scalar);
    default:
      return;
  }
}

}  // namespace
}  // namespace strata
