// Part of kernels/reduce_loops.h (include that, not this): the fused f16 and fp8 kernels of the vector tiers,
// written with AVX2/F16C and AVX-512 intrinsics. Empty in the portable tier.
#pragma once

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "kernels/reduce.h"
#include "kernels/reduce_elements.h"
#include "kernels/reduce_plain_loops.h"

#ifndef STRATA_KERNEL_ISA
#error "kernels/reduce_fused_x86.h is a part of kernels/reduce_loops.h: include that"
#endif

namespace strata {
namespace {

// ---- fused kernels: one 64-byte line of output per step, kept in registers ----------------------------------
// The Widened loops (reduce_plain_loops.h) go through stack blocks: decode a, decode b, combine, encode, and for
// large buffers copy the block out with non-temporal stores. For f16 and fp8 those passes over L1 cost more than the
// memory traffic. A fused kernel loads one line's worth of each input, widens, combines and narrows in registers
// and stores the line, so large buffers run at memory speed. The results are bit for bit those of the Widened loops,
// except that an f16 NaN keeps its payload (F16C's quiet NaN) in every element, where the Widened loops' scalar tail
// wrote 0x7e00.
//
// A fused kernel is an object (its constructor loads the constants it needs into registers) with Storage, kStep
// (elements per 64-byte line) and step<kStream>(d, a, b), which reads kStep elements of a and b before it writes
// kStep elements of d, so d may alias a or b exactly. With kStream, d is line-aligned and written non-temporally.
#if STRATA_KERNEL_ISA >= 1

// Fewer than kStep elements go through zero-filled stack lines, so the tail gets the same arithmetic as the body.
template <class K>
void fusedPartial(const K& k, typename K::Storage* d, const typename K::Storage* a, const typename K::Storage* b,
                  size_t n) {
  using S = typename K::Storage;
  if (n == 0) return;
  alignas(kCacheLine) S la[K::kStep] = {};
  alignas(kCacheLine) S lb[K::kStep] = {};
  __builtin_memcpy(la, a, n * sizeof(S));
  __builtin_memcpy(lb, b, n * sizeof(S));
  k.template step<false>(la, la, lb);
  __builtin_memcpy(d, la, n * sizeof(S));
}

// Runs a fused kernel over n elements, streaming destinations of kReduceStreamingBytes or more (see runReduce).
template <class K>
void runFused(void* dstv, const void* av, const void* bv, size_t n) {
  using S = typename K::Storage;
  constexpr size_t kStep = K::kStep;
  static_assert(kStep * sizeof(S) == kCacheLine);
  S* d = static_cast<S*>(dstv);
  const S* a = static_cast<const S*>(av);
  const S* b = static_cast<const S*>(bv);
  const K k;
  const uintptr_t addr = reinterpret_cast<uintptr_t>(d);
  size_t i = 0;
  if (n * sizeof(S) >= kReduceStreamingBytes && addr % sizeof(S) == 0) {
    // One partial step up to the first line boundary, then whole lines with non-temporal stores.
    i = ((kCacheLine - addr % kCacheLine) % kCacheLine) / sizeof(S);
    fusedPartial(k, d, a, b, i);
    for (; i + kStep <= n; i += kStep) k.template step<true>(d + i, a + i, b + i);
    fusedPartial(k, d + i, a + i, b + i, n - i);
    streamFence();
    return;
  }
  for (; i + kStep <= n; i += kStep) k.template step<false>(d + i, a + i, b + i);
  fusedPartial(k, d + i, a + i, b + i, n - i);
}

// Combines f32 vectors with the element operators' semantics: a NaN on either side comes out, and max/min of
// equal values (+0 and -0) give y. vmaxps(x, y) is "x > y ? x : y", which gives y when either is NaN, so x is
// kept wherever x is NaN.
//
// Sum and product are written in assembly only to pin the operand order: when both inputs are NaN, x86 returns the
// first source's NaN, and a compiler may swap the operands of a commutative operation, which would change the
// sign (fp8) or payload (f16) of the NaN that comes out. x goes first, as in the scalar loops.
#if STRATA_KERNEL_ISA >= 2
using VecF = __m512;
template <class Op>
inline VecF combineVec(VecF x, VecF y) {
  VecF r;
  if constexpr (std::is_same_v<Op, OpSum>) {
    __asm__("vaddps %2, %1, %0" : "=v"(r) : "v"(x), "v"(y));
    return r;
  } else if constexpr (std::is_same_v<Op, OpProd>) {
    __asm__("vmulps %2, %1, %0" : "=v"(r) : "v"(x), "v"(y));
    return r;
  } else {
    const __mmask16 xIsNumber = _mm512_cmp_ps_mask(x, x, _CMP_ORD_Q);
    if constexpr (std::is_same_v<Op, OpMax>) return _mm512_mask_max_ps(x, xIsNumber, x, y);
    return _mm512_mask_min_ps(x, xIsNumber, x, y);
  }
}

template <bool kStream>
inline void storeLine(void* d, __m512i v) {
  if constexpr (kStream) {
    _mm512_stream_si512(static_cast<__m512i*>(d), v);
  } else {
    _mm512_storeu_si512(d, v);
  }
}
#else
using VecF = __m256;
template <class Op>
inline VecF combineVec(VecF x, VecF y) {
  VecF r;
  if constexpr (std::is_same_v<Op, OpSum>) {
    __asm__("vaddps %2, %1, %0" : "=x"(r) : "x"(x), "x"(y));
    return r;
  } else if constexpr (std::is_same_v<Op, OpProd>) {
    __asm__("vmulps %2, %1, %0" : "=x"(r) : "x"(x), "x"(y));
    return r;
  } else {
    const __m256 xIsNan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
    if constexpr (std::is_same_v<Op, OpMax>) return _mm256_blendv_ps(_mm256_max_ps(x, y), x, xIsNan);
    return _mm256_blendv_ps(_mm256_min_ps(x, y), x, xIsNan);
  }
}

template <bool kStream>
inline void storeLine(void* d, __m256i lo, __m256i hi) {
  auto* p = static_cast<__m256i*>(d);
  if constexpr (kStream) {
    _mm256_stream_si256(p, lo);
    _mm256_stream_si256(p + 1, hi);
  } else {
    _mm256_storeu_si256(p, lo);
    _mm256_storeu_si256(p + 1, hi);
  }
}
#endif

// f16: F16C widens exactly and narrows with round to nearest even (whatever MXCSR says), like HalfCodec.
template <class Op>
struct HalfFused {
  using Storage = uint16_t;
  static constexpr size_t kStep = 32;
  static constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  template <bool kStream>
  void step(uint16_t* d, const uint16_t* a, const uint16_t* b) const {
#if STRATA_KERNEL_ISA >= 2
    __m256i h[2];
    for (int j = 0; j < 2; ++j) {
      const __m512 x = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + 16 * j)));
      const __m512 y = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 16 * j)));
      h[j] = _mm512_cvtps_ph(combineVec<Op>(x, y), kRound);
    }
    storeLine<kStream>(d, _mm512_inserti64x4(_mm512_castsi256_si512(h[0]), h[1], 1));
#else
    __m128i h[4];
    for (int j = 0; j < 4; ++j) {
      const __m256 x = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + 8 * j)));
      const __m256 y = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 8 * j)));
      h[j] = _mm256_cvtps_ph(combineVec<Op>(x, y), kRound);
    }
    storeLine<kStream>(d, _mm256_set_m128i(h[1], h[0]), _mm256_set_m128i(h[3], h[2]));
#endif
  }
};

// fp8 magnitudes (code & 0x7f) above this are NaN: all ones for e4m3, exponent all ones and mantissa non-zero
// for e5m2.
template <class F>
constexpr int kFp8NanAbove = F::kIsFiniteOnly ? int(F::kNanCode) - 1 : int(F::kExpMask);

// The scale (power of two) of the decoded a operand of fp8 sum and prod; see Fp8Arith.
template <class F>
struct Fp8Scale {
  static constexpr int kForA = F::kExpBits == 4 ? -8 : 0;
};
#endif  // STRATA_KERNEL_ISA >= 1

#if STRATA_KERNEL_ISA >= 2
// ---- fp8 in AVX-512 ---------------------------------------------------------------------------------------------
// Max and min return one of their inputs, and every non-NaN code survives decode + encode unchanged, so they
// never leave the byte domain: compare order keys and select. The f32 path turns any NaN into the format's NaN
// code with the NaN's sign; e4m3 has only that NaN, e5m2 has three (0x7d..0x7f), which are made 0x7e.
template <class F, bool kMax>
struct Fp8MaxMin {
  using Storage = uint8_t;
  static constexpr size_t kStep = 64;
  static constexpr int kNanAbove = kFp8NanAbove<F>;
  template <bool kStream>
  void step(uint8_t* d, const uint8_t* a, const uint8_t* b) const {
    const __m512i x = _mm512_loadu_si512(a);
    const __m512i y = _mm512_loadu_si512(b);
    const __m512i magMask = _mm512_set1_epi8(0x7f);
    const __m512i nanAbove = _mm512_set1_epi8(static_cast<char>(kNanAbove));
    const __m512i mx = _mm512_and_si512(x, magMask);
    const __m512i my = _mm512_and_si512(y, magMask);
    // Order keys: the magnitude negated when the sign bit is set, as int8. -0 and +0 both give 0 (equal values),
    // and sign-magnitude order becomes integer order. NaN keys are meaningless and masked out below.
    const __m512i zero = _mm512_setzero_si512();
    const __m512i kx = _mm512_mask_sub_epi8(mx, _mm512_movepi8_mask(x), zero, mx);
    const __m512i ky = _mm512_mask_sub_epi8(my, _mm512_movepi8_mask(y), zero, my);
    const __mmask64 xIsNan = _mm512_cmpgt_epu8_mask(mx, nanAbove);
    const __mmask64 yIsNumber = _mm512_cmple_epu8_mask(my, nanAbove);
    // x when x is NaN, or y is a number and x is strictly beyond it; otherwise y (NaN, equal, or beyond x).
    const __mmask64 beyond =
        kMax ? _mm512_mask_cmpgt_epi8_mask(yIsNumber, kx, ky) : _mm512_mask_cmplt_epi8_mask(yIsNumber, kx, ky);
    __m512i r = _mm512_mask_blend_epi8(xIsNan | beyond, y, x);
    if constexpr (!F::kIsFiniteOnly) {
      const __mmask64 rIsNan = _mm512_cmpgt_epu8_mask(_mm512_and_si512(r, magMask), nanAbove);
      // (r & 0x80) | kNanCode
      const __m512i nan = _mm512_ternarylogic_epi32(r, _mm512_set1_epi8(static_cast<char>(0x80)),
                                                    _mm512_set1_epi8(static_cast<char>(F::kNanCode)), 0xEA);
      r = _mm512_mask_mov_epi8(r, rIsNan, nan);
    }
    storeLine<kStream>(d, r);
  }
};

// Sum and prod widen to f32, combine, and round back. The sum or product of two fp8 values is exact in f32, so
// one rounding to fp8 is all there is. It is done in two steps:
//  1. f32 -> f16 by truncation (vcvtps2ph toward zero, one instruction for 16 values, subnormals included);
//  2. f16 -> fp8 round to nearest even on 16-bit integers, 32 lanes per instruction.
// Rounding twice can only go wrong where step 1 moves a value that is above a halfway point between two fp8
// neighbours onto it (truncation never moves a value up onto one). That needs the exact result to have fp8's
// rounding bit set, then zeros down to f16's last bit (6 or more of them), then a non-zero bit beyond f16's
// precision. The sum or product of two fp8 values never looks like that:
//  - a sum whose smaller operand lies entirely below the larger one's last bit has zeros in between when the signs
//    agree, and then the rounding bit is one of those zeros; when the signs differ the borrow turns them into ones.
//    Operands closer together make a sum of at most 11 significant bits, which f16 holds exactly.
//  - a product has at most 8 significant bits (4 x 4), exact wherever f16 has 11; where f16 has fewer (its
//    subnormal range), the one pattern that would need more, 10000001 = 129 = 3 x 43, is not a product of two
//    4-bit significands.
// Reduce2Exhaustive.Fp8EveryPairOfCodes checks all 65536 input pairs of both formats for every op, the whole
// domain. (Arbitrary f32 values would need round-to-odd in step 1: truncate, then set the last bit if anything
// non-zero was cut off.)
// e5m2 is the top byte of an f16, so step 2 rounds at bit 8. e4m3 works on x * 2^-8, whose f16 bits are the e4m3
// bits shifted left by 7 for every e4m3 value, subnormals included (f16 and e4m3 subnormals line up after the
// scaling); the inputs are decoded already scaled, so the sum comes out scaled and the product gets one scaled
// and one unscaled operand.
constexpr int kTruncateToHalf = _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC;

// Step 2: words of truncated f16 bits in, words with the fp8 code in their high byte out.
template <class F>
inline __m512i fp8InHighBytes(__m512i h);

template <>
inline __m512i fp8InHighBytes<E5m2>(__m512i h) {
  // NaN: vcvtps2ph makes every NaN quiet, so |h| >= 0x7e00; make it exactly 0x7e00 with its sign, which rounds to
  // e5m2's NaN code 0x7e. The unsigned min catches negative NaNs, the signed min positive ones.
  h = _mm512_min_epu16(h, _mm512_set1_epi16(static_cast<short>(0xfe00)));
  h = _mm512_min_epi16(h, _mm512_set1_epi16(0x7e00));
  // Round to nearest even at bit 8: add 0x7f, plus 1 when the kept part is odd. Finite values from 61440 up and
  // infinity carry into 0x7c (infinity); the magnitude never carries into the sign.
  const __mmask32 odd = _mm512_test_epi16_mask(h, _mm512_set1_epi16(0x100));
  h = _mm512_add_epi16(h, _mm512_set1_epi16(0x7f));
  return _mm512_mask_add_epi16(h, odd, h, _mm512_set1_epi16(1));
}

template <>
inline __m512i fp8InHighBytes<E4m3>(__m512i h) {
  // g: the magnitude shifted left by one, which puts the e4m3 code's 7 magnitude bits in the high byte (f16's top
  // exponent bit is 0 below 2, i.e. e4m3 values below 512) and the rounding bits in the low byte.
  const __m512i g = _mm512_slli_epi16(h, 1);
  const __mmask32 notNan = _mm512_cmple_epu16_mask(g, _mm512_set1_epi16(static_cast<short>(0xf800)));
  // Saturate: 448 (0x7e) and above, infinity included, become 0x7e00; NaN becomes 0x7f00, which rounds to 0x7f.
  __m512i c = _mm512_mask_min_epu16(_mm512_set1_epi16(0x7f00), notNan, g, _mm512_set1_epi16(0x7e00));
  const __mmask32 odd = _mm512_test_epi16_mask(c, _mm512_set1_epi16(0x100));
  c = _mm512_add_epi16(c, _mm512_set1_epi16(0x7f));
  c = _mm512_mask_add_epi16(c, odd, c, _mm512_set1_epi16(1));
  // Bit 15 is the code's top bit, always 0: take the sign from h there (ternary logic "mask ? h : c").
  return _mm512_ternarylogic_epi32(c, h, _mm512_set1_epi16(static_cast<short>(0x8000)), 0xD8);
}

#if STRATA_KERNEL_ISA >= 3
// Decoding with AVX512-VBMI: vpermi2b looks a byte up in a 128-entry table (two registers) indexed by the low 7
// bits of each byte, i.e. the magnitude. Every fp8 value (times 2^kScale) is exact in bf16, so two lookups give
// the high and low byte of the bf16, the sign bit is copied into the high byte, and unpacking with zeros below
// makes the f32. The unpacks work within 128-bit lanes, so the elements come out interleaved: q[j] holds the
// elements 16l + 4j + p (l: lane, p < 4) in its dwords 4l + p. Fp8Packer undoes this.
template <class F, int kScale>
struct Fp8Table {
  // f32 bits of the magnitude code c (0..127) times 2^kScale, straight from the format definition.
  static constexpr uint32_t f32Bits(uint32_t c) {
    constexpr uint32_t kMant = (1u << F::kMantBits) - 1;
    const uint32_t exp = c >> F::kMantBits;
    const uint32_t mant = c & kMant;
    const bool isNan = F::kIsFiniteOnly ? c == (F::kExpMask | kMant) : c > F::kExpMask;
    if (isNan) return 0x7fc00000u;
    if (!F::kIsFiniteOnly && c == F::kExpMask) return 0x7f800000u;  // infinity
    if (c == 0) return 0;
    if (exp == 0) {  // subnormal: mant * 2^(1 - bias - M), normalized
      const int top = 31 - __builtin_clz(mant);
      return (static_cast<uint32_t>(top + 1 - F::kBias - F::kMantBits + kScale + 127) << 23) |
             ((mant ^ (1u << top)) << (23 - top));
    }
    return (static_cast<uint32_t>(static_cast<int>(exp) - F::kBias + kScale + 127) << 23) |
           (mant << (23 - F::kMantBits));
  }
  struct Bytes {
    alignas(kCacheLine) uint8_t lo[128];
    alignas(kCacheLine) uint8_t hi[128];
  };
  static constexpr Bytes make() {
    Bytes t{};
    for (uint32_t c = 0; c < 128; ++c) {
      t.lo[c] = static_cast<uint8_t>(f32Bits(c) >> 16);
      t.hi[c] = static_cast<uint8_t>(f32Bits(c) >> 24);
    }
    return t;
  }
  static constexpr bool exactInBf16() {
    for (uint32_t c = 0; c < 128; ++c) {
      if ((f32Bits(c) & 0xffff) != 0) return false;
    }
    return true;
  }
  static_assert(exactInBf16());
  static constexpr Bytes kBytes = make();
};

template <class F, int kScale>
struct Fp8Decoder {
  __m512i lo0, lo1, hi0, hi1;
  Fp8Decoder()
      : lo0(_mm512_load_si512(Fp8Table<F, kScale>::kBytes.lo)),
        lo1(_mm512_load_si512(Fp8Table<F, kScale>::kBytes.lo + 64)),
        hi0(_mm512_load_si512(Fp8Table<F, kScale>::kBytes.hi)),
        hi1(_mm512_load_si512(Fp8Table<F, kScale>::kBytes.hi + 64)) {}
  void decode(const uint8_t* p, __m512 q[4]) const {
    const __m512i x = _mm512_loadu_si512(p);
    const __m512i lo = _mm512_permutex2var_epi8(lo0, x, lo1);
    __m512i hi = _mm512_permutex2var_epi8(hi0, x, hi1);
    hi = _mm512_ternarylogic_epi32(hi, x, _mm512_set1_epi8(static_cast<char>(0x80)), 0xF8);  // hi | (x & 0x80)
    const __m512i w0 = _mm512_unpacklo_epi8(lo, hi);
    const __m512i w1 = _mm512_unpackhi_epi8(lo, hi);
    const __m512i zero = _mm512_setzero_si512();
    q[0] = _mm512_castsi512_ps(_mm512_unpacklo_epi16(zero, w0));
    q[1] = _mm512_castsi512_ps(_mm512_unpackhi_epi16(zero, w0));
    q[2] = _mm512_castsi512_ps(_mm512_unpacklo_epi16(zero, w1));
    q[3] = _mm512_castsi512_ps(_mm512_unpackhi_epi16(zero, w1));
  }
};

// The vpermt2b index that gathers the high bytes of the words [f16(q[0]), f16(q[1])] and [f16(q[2]), f16(q[3])]
// back into element order.
struct Fp8PackIndex {
  alignas(kCacheLine) uint8_t idx[64];
};
constexpr Fp8PackIndex makeFp8PackIndex() {
  Fp8PackIndex t{};
  for (int n = 0; n < 64; ++n) {
    const int lane = n / 16, j = (n % 16) / 4, p = n % 4;
    const int word = (j % 2) * 16 + 4 * lane + p;  // in the word vector j / 2
    t.idx[n] = static_cast<uint8_t>((j / 2) * 64 + 2 * word + 1);
  }
  return t;
}
inline constexpr Fp8PackIndex kFp8PackIndex = makeFp8PackIndex();

struct Fp8Packer {
  __m512i idx;
  Fp8Packer() : idx(_mm512_load_si512(kFp8PackIndex.idx)) {}
  __m512i pack(__m512i w0, __m512i w1) const { return _mm512_permutex2var_epi8(w0, idx, w1); }
};
#else
// Decoding without VBMI, through F16C: e5m2 is the top byte of an f16; e4m3 shifted left by 7 is the f16 of its
// value times 2^-8 (subnormals included), and only its NaN code needs a fix-up. Elements stay in order: q[j] holds
// the elements 16j..16j+15.
template <class F, int kScale>
struct Fp8Decoder {
  void decode(const uint8_t* p, __m512 q[4]) const {
    for (int k = 0; k < 2; ++k) {
      const __m512i c = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32 * k)));
      const __m512i c8 = _mm512_slli_epi16(c, 8);
      __m512i h = c8;
      if constexpr (F::kExpBits == 4) {
        __m512i mag = _mm512_and_si512(_mm512_slli_epi16(c, 7), _mm512_set1_epi16(0x3f80));
        mag = _mm512_mask_mov_epi16(mag, _mm512_cmpeq_epi16_mask(mag, _mm512_set1_epi16(0x3f80)),
                                    _mm512_set1_epi16(0x7e00));
        h = _mm512_ternarylogic_epi32(mag, c8, _mm512_set1_epi16(static_cast<short>(0x8000)), 0xF8);
      }
      q[2 * k] = _mm512_cvtph_ps(_mm512_castsi512_si256(h));
      q[2 * k + 1] = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1));
    }
    if constexpr (F::kExpBits == 4 && kScale == 0) {
      for (int j = 0; j < 4; ++j) q[j] = _mm512_mul_ps(q[j], _mm512_set1_ps(256.0f));
    }
  }
};

struct Fp8Packer {
  __m512i pack(__m512i w0, __m512i w1) const {
    const __m256i lo = _mm512_cvtepi16_epi8(_mm512_srli_epi16(w0, 8));
    const __m256i hi = _mm512_cvtepi16_epi8(_mm512_srli_epi16(w1, 8));
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
  }
};
#endif

template <class F, class Op>
struct Fp8Arith {
  using Storage = uint8_t;
  static constexpr size_t kStep = 64;
  static constexpr int kScaleA = Fp8Scale<F>::kForA;
  static constexpr int kScaleB = std::is_same_v<Op, OpProd> ? 0 : kScaleA;
  Fp8Decoder<F, kScaleA> decodeA;
  Fp8Decoder<F, kScaleB> decodeB;
  Fp8Packer packer;
  template <bool kStream>
  void step(uint8_t* d, const uint8_t* a, const uint8_t* b) const {
    __m512 x[4], y[4];
    decodeA.decode(a, x);
    decodeB.decode(b, y);
    __m256i h[4];
    for (int j = 0; j < 4; ++j) h[j] = _mm512_cvtps_ph(combineVec<Op>(x[j], y[j]), kTruncateToHalf);
    const __m512i w0 = fp8InHighBytes<F>(_mm512_inserti64x4(_mm512_castsi256_si512(h[0]), h[1], 1));
    const __m512i w1 = fp8InHighBytes<F>(_mm512_inserti64x4(_mm512_castsi256_si512(h[2]), h[3], 1));
    storeLine<kStream>(d, packer.pack(w0, w1));
  }
};

#elif STRATA_KERNEL_ISA == 1
// ---- fp8 in AVX2 ----------------------------------------------------------------------------------------------
// The algorithms of the AVX-512 code above (see there), 32 bytes at a time, with vector masks instead of mask
// registers and F16C for decoding.
template <class F, bool kMax>
struct Fp8MaxMin {
  using Storage = uint8_t;
  static constexpr size_t kStep = 64;
  static constexpr int kNanAbove = kFp8NanAbove<F>;
  static __m256i select(__m256i x, __m256i y) {
    const __m256i magMask = _mm256_set1_epi8(0x7f);
    const __m256i nanAbove = _mm256_set1_epi8(static_cast<char>(kNanAbove));
    const __m256i mx = _mm256_and_si256(x, magMask);
    const __m256i my = _mm256_and_si256(y, magMask);
    // Order keys: vpsignb negates the magnitude where the code, as int8, is negative (sign bit set).
    const __m256i kx = _mm256_sign_epi8(mx, x);
    const __m256i ky = _mm256_sign_epi8(my, y);
    // Magnitudes are below 0x80, so signed compares order them.
    const __m256i xIsNan = _mm256_cmpgt_epi8(mx, nanAbove);
    const __m256i yIsNan = _mm256_cmpgt_epi8(my, nanAbove);
    const __m256i beyond = kMax ? _mm256_cmpgt_epi8(kx, ky) : _mm256_cmpgt_epi8(ky, kx);
    __m256i r = _mm256_blendv_epi8(y, x, _mm256_or_si256(xIsNan, _mm256_andnot_si256(yIsNan, beyond)));
    if constexpr (!F::kIsFiniteOnly) {
      const __m256i rIsNan = _mm256_cmpgt_epi8(_mm256_and_si256(r, magMask), nanAbove);
      const __m256i nan = _mm256_or_si256(_mm256_and_si256(r, _mm256_set1_epi8(static_cast<char>(0x80))),
                                          _mm256_set1_epi8(static_cast<char>(F::kNanCode)));
      r = _mm256_blendv_epi8(r, nan, rIsNan);
    }
    return r;
  }
  template <bool kStream>
  void step(uint8_t* d, const uint8_t* a, const uint8_t* b) const {
    const auto* pa = reinterpret_cast<const __m256i*>(a);
    const auto* pb = reinterpret_cast<const __m256i*>(b);
    const __m256i lo = select(_mm256_loadu_si256(pa), _mm256_loadu_si256(pb));
    const __m256i hi = select(_mm256_loadu_si256(pa + 1), _mm256_loadu_si256(pb + 1));
    storeLine<kStream>(d, lo, hi);
  }
};

constexpr int kTruncateToHalf = _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC;

template <class F>
inline __m256i fp8InHighBytes(__m256i h);

template <>
inline __m256i fp8InHighBytes<E5m2>(__m256i h) {
  h = _mm256_min_epu16(h, _mm256_set1_epi16(static_cast<short>(0xfe00)));
  h = _mm256_min_epi16(h, _mm256_set1_epi16(0x7e00));
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi16(h, 8), _mm256_set1_epi16(1));
  return _mm256_add_epi16(_mm256_add_epi16(h, _mm256_set1_epi16(0x7f)), odd);
}

template <>
inline __m256i fp8InHighBytes<E4m3>(__m256i h) {
  const __m256i g = _mm256_slli_epi16(h, 1);
  const __m256i notNan = _mm256_cmpeq_epi16(_mm256_min_epu16(g, _mm256_set1_epi16(static_cast<short>(0xf800))), g);
  __m256i c = _mm256_blendv_epi8(_mm256_set1_epi16(0x7f00), _mm256_min_epu16(g, _mm256_set1_epi16(0x7e00)), notNan);
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi16(c, 8), _mm256_set1_epi16(1));
  c = _mm256_add_epi16(_mm256_add_epi16(c, _mm256_set1_epi16(0x7f)), odd);
  return _mm256_or_si256(c, _mm256_and_si256(h, _mm256_set1_epi16(static_cast<short>(0x8000))));
}

// 16 codes to two vectors of 8 f32, in order, through F16C as in the AVX-512 tier without VBMI.
template <class F, int kScale>
inline void fp8Decode16(const uint8_t* p, __m256& lo, __m256& hi) {
  const __m256i c = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  const __m256i c8 = _mm256_slli_epi16(c, 8);
  __m256i h = c8;
  if constexpr (F::kExpBits == 4) {
    const __m256i nanHalf = _mm256_set1_epi16(0x3f80);
    __m256i mag = _mm256_and_si256(_mm256_slli_epi16(c, 7), nanHalf);
    mag = _mm256_blendv_epi8(mag, _mm256_set1_epi16(0x7e00), _mm256_cmpeq_epi16(mag, nanHalf));
    h = _mm256_or_si256(mag, _mm256_and_si256(c8, _mm256_set1_epi16(static_cast<short>(0x8000))));
  }
  lo = _mm256_cvtph_ps(_mm256_castsi256_si128(h));
  hi = _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1));
  if constexpr (F::kExpBits == 4 && kScale == 0) {
    lo = _mm256_mul_ps(lo, _mm256_set1_ps(256.0f));
    hi = _mm256_mul_ps(hi, _mm256_set1_ps(256.0f));
  }
}

// High bytes of two vectors of 16 words (elements in order) into 32 bytes in order. vpackuswb interleaves the
// 128-bit lanes of its inputs, vpermq puts them back.
inline __m256i fp8Pack(__m256i w0, __m256i w1) {
  const __m256i packed = _mm256_packus_epi16(_mm256_srli_epi16(w0, 8), _mm256_srli_epi16(w1, 8));
  return _mm256_permute4x64_epi64(packed, 0xD8);
}

template <class F, class Op>
struct Fp8Arith {
  using Storage = uint8_t;
  static constexpr size_t kStep = 64;
  static constexpr int kScaleA = Fp8Scale<F>::kForA;
  static constexpr int kScaleB = std::is_same_v<Op, OpProd> ? 0 : kScaleA;
  template <bool kStream>
  void step(uint8_t* d, const uint8_t* a, const uint8_t* b) const {
    __m256i w[4];
    for (int k = 0; k < 4; ++k) {
      __m256 x0, x1, y0, y1;
      fp8Decode16<F, kScaleA>(a + 16 * k, x0, x1);
      fp8Decode16<F, kScaleB>(b + 16 * k, y0, y1);
      const __m128i h0 = _mm256_cvtps_ph(combineVec<Op>(x0, y0), kTruncateToHalf);
      const __m128i h1 = _mm256_cvtps_ph(combineVec<Op>(x1, y1), kTruncateToHalf);
      w[k] = fp8InHighBytes<F>(_mm256_set_m128i(h1, h0));
    }
    storeLine<kStream>(d, fp8Pack(w[0], w[1]), fp8Pack(w[2], w[3]));
  }
};
#endif  // STRATA_KERNEL_ISA

#if STRATA_KERNEL_ISA >= 1
template <class F, class Op>
using Fp8Fused =
    std::conditional_t<std::is_same_v<Op, OpMax>, Fp8MaxMin<F, true>,
                       std::conditional_t<std::is_same_v<Op, OpMin>, Fp8MaxMin<F, false>, Fp8Arith<F, Op>>>;
#endif

}  // namespace
}  // namespace strata
