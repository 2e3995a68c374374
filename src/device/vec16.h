// 16-byte vectors over pointers of any alignment, for the device protocol's data loops (device/proto.h,
// OpRunner::move): an unaligned vector made of two aligned loads joined by funnel shifts in registers, and the
// elements of a vector taken and put by shifts, so that nothing goes through local memory. Written once for the GPU
// and the CPU; everything is in an unnamed namespace (see proto.h, "Linkage").
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "device/dev_types.h"

namespace strata::devproto {
namespace {

#if defined(__CUDA_ARCH__)
#define STRATA_UNROLL _Pragma("unroll")
#else
#define STRATA_UNROLL
#endif

// Bytes [s, s + 32) of the word pair (lo, hi) shifted right by `bits` (0..31): a funnel shift.
STRATA_HD_INLINE uint32_t funnelRight(uint32_t lo, uint32_t hi, uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __funnelshift_r(lo, hi, bits);
#else
  return bits == 0 ? lo : (lo >> bits) | (hi << (32 - bits));
#endif
}

// Bytes [s, s + 16) of the 32 bytes x then y (s in 1..15, the same on every thread): two aligned loads make one
// unaligned vector in registers (little-endian, as both the GPU and the CPUs Strata runs on are).
STRATA_HD_INLINE Vec16 shiftedVec(const Vec16& x, const Vec16& y, uint32_t s) {
  const uint32_t w[8] = {x.w[0], x.w[1], x.w[2], x.w[3], y.w[0], y.w[1], y.w[2], y.w[3]};
  const uint32_t q = s >> 2, bits = (s & 3u) * 8u;
  Vec16 out;
  STRATA_UNROLL
  for (int j = 0; j < 4; ++j) {
    // Selects, not an indexed array, so that w stays in registers.
    const uint32_t lo = q == 0 ? w[j] : q == 1 ? w[j + 1] : q == 2 ? w[j + 2] : w[j + 3];
    const uint32_t hi = q == 0 ? w[j + 1] : q == 1 ? w[j + 2] : q == 2 ? w[j + 3] : w[j + 4];
    out.w[j] = funnelRight(lo, hi, bits);
  }
  return out;
}

STRATA_HD_INLINE uint32_t mis16(const void* q) { return static_cast<uint32_t>(reinterpret_cast<uintptr_t>(q) & 15u); }

// Vector v of a stream that starts `s` bytes past the 16-byte aligned address `base`.
template <class P>
STRATA_HD_INLINE Vec16 readVec(const char* base, uint32_t s, uint64_t v) {
  const Vec16* b = reinterpret_cast<const Vec16*>(base) + v;
  if (s == 0) return P::load16(b);
  return shiftedVec(P::load16(b), P::load16(b + 1), s);
}

// 8 bytes at an 8-byte aligned address of a user's buffer, of whatever element type (memcpy on the CPU, where the
// buffer's type is the elements'; one 8-byte access on the GPU).
STRATA_HD_INLINE uint64_t load8(const void* p) {
#if defined(__CUDA_ARCH__)
  return *static_cast<const uint64_t*>(p);
#else
  uint64_t x;
  std::memcpy(&x, p, 8);
  return x;
#endif
}
STRATA_HD_INLINE void store8(void* p, uint64_t x) {
#if defined(__CUDA_ARCH__)
  *static_cast<uint64_t*>(p) = x;
#else
  std::memcpy(p, &x, 8);
#endif
}

template <class To, class From>
STRATA_HD_INLINE To bitsAs(From f) {
  static_assert(sizeof(To) == sizeof(From), "same size");
  To t;
  std::memcpy(&t, &f, sizeof(To));
  return t;
}
template <class S>
using BitsOf = std::conditional_t<
    sizeof(S) == 8, uint64_t,
    std::conditional_t<sizeof(S) == 4, uint32_t, std::conditional_t<sizeof(S) == 2, uint16_t, uint8_t>>>;

// Element e of the vector v (e a constant once the loop over a vector's elements is unrolled).
template <class S>
STRATA_HD_INLINE S elemAt(const Vec16& v, uint32_t e) {
  if constexpr (sizeof(S) == 8) {
    return bitsAs<S>(static_cast<uint64_t>(v.w[2 * e]) | (static_cast<uint64_t>(v.w[2 * e + 1]) << 32));
  } else if constexpr (sizeof(S) == 4) {
    return bitsAs<S>(v.w[e]);
  } else {
    constexpr uint32_t kPerWord = 4 / sizeof(S), kBits = 8 * sizeof(S);
    return bitsAs<S>(static_cast<BitsOf<S>>(v.w[e / kPerWord] >> (kBits * (e % kPerWord))));
  }
}
template <class S>
STRATA_HD_INLINE void setElem(Vec16& v, uint32_t e, S x) {
  const BitsOf<S> b = bitsAs<BitsOf<S>>(x);
  if constexpr (sizeof(S) == 8) {
    v.w[2 * e] = static_cast<uint32_t>(b);
    v.w[2 * e + 1] = static_cast<uint32_t>(b >> 32);
  } else if constexpr (sizeof(S) == 4) {
    v.w[e] = b;
  } else {
    constexpr uint32_t kPerWord = 4 / sizeof(S), kBits = 8 * sizeof(S), kMask = (1u << kBits) - 1u;
    const uint32_t sh = kBits * (e % kPerWord);
    v.w[e / kPerWord] = (v.w[e / kPerWord] & ~(kMask << sh)) | (static_cast<uint32_t>(b) << sh);
  }
}

// Vectors per thread per pass of the data loops: that many 16-byte loads in flight per pointer read. (1-byte
// elements take the most registers, 16 per vector: about 210 on sm_90 with no spill, perf/sass_check.py; the kernels
// run one block per lane, so registers do not limit how many run at once.)
inline constexpr uint32_t kUnroll = 4;
// The most elements a piece moves outside its vectors: under 32 bytes before them (the writes' alignment, plus one
// vector when a shifted read would start before its pointer) and under 32 after.
inline constexpr uint32_t kMaxEdgeElems = 64;

}  // namespace
}  // namespace strata::devproto
