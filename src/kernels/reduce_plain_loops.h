// Part of kernels/reduce_loops.h (include that, not this): the loops written in plain C++ for the compiler to
// vectorize. Native<T, Op> combines in T, Widened<Codec, Op> widens blocks of narrow floats to f32 on the stack;
// runReduce streams large destinations out through a cache-resident block; NativeScale and WidenedScale scale.
#pragma once

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "kernels/reduce.h"
#include "kernels/reduce_elements.h"

#ifndef STRATA_KERNEL_ISA
#error "kernels/reduce_plain_loops.h is a part of kernels/reduce_loops.h: include that"
#endif

namespace strata {
namespace {

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

// The narrow formats' combine: when both inputs are NaN the result is the first one's (its sign survives the
// encode), as the vector tiers' fused kernels give it. x + y alone leaves that to the compiler, which may swap
// the operands of a commutative add (it did at -O2), and the tiers then disagree on the NaN's sign.
template <class Op>
void combineF32FirstNaN(float* __restrict x, const float* __restrict y, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const float r = Op::apply(x[i], y[i]);
    x[i] = x[i] != x[i] ? x[i] : r;
  }
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
    combineF32FirstNaN<Op>(fa, fb, n);
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

}  // namespace
}  // namespace strata
