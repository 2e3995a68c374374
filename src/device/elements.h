// The elements and operators of the device protocol (device/proto.h): each dtype's storage and the type it reduces
// in (f16, bf16 and fp8 widen to f32 through util/dtype_codec.h, the host kernels' codecs), the element operator as
// the host kernels define it, and the pre-multiplication of PreMulSum and float Avg. Written once for the GPU and
// the CPU, like the rest of the protocol; everything is in an unnamed namespace (see proto.h, "Linkage").
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "device/dev_types.h"
#include "kernels/reduce_kind.h"
#include "strata/strata.h"
#include "util/dtype_codec.h"

namespace strata::devproto {
namespace {

template <class T>
struct Plain {
  using Storage = T;
  using Acc = T;
  static STRATA_HD_INLINE Acc widen(Storage s) { return s; }
  static STRATA_HD_INLINE Storage narrow(Acc a) { return a; }
};
template <class Codec, class S>
struct Narrow {
  using Storage = S;
  using Acc = float;
  static STRATA_HD_INLINE float widen(Storage s) { return Codec::decode(s); }
  static STRATA_HD_INLINE Storage narrow(float a) { return static_cast<Storage>(Codec::encode(a)); }
};
using HalfElem = Narrow<dtype_codec::Half, uint16_t>;
using Bf16Elem = Narrow<dtype_codec::Bf16, uint16_t>;
using E4m3Elem = Narrow<dtype_codec::E4m3, uint8_t>;
using E5m2Elem = Narrow<dtype_codec::E5m2, uint8_t>;

// The element operator, as the host kernels define it (kernels/reduce_kind.h): integers wrap through the
// unsigned type; float max/min propagate NaN (x when x is NaN, else the comparison's choice).
template <ReduceKind K, class A>
STRATA_HD_INLINE A combine(A x, A y) {
  if constexpr (std::is_integral_v<A>) {
    using U = std::make_unsigned_t<A>;
    if constexpr (K == ReduceKind::kSum) return static_cast<A>(static_cast<U>(x) + static_cast<U>(y));
    if constexpr (K == ReduceKind::kProd) return static_cast<A>(static_cast<U>(x) * static_cast<U>(y));
    if constexpr (K == ReduceKind::kMax) return x > y ? x : y;
    if constexpr (K == ReduceKind::kMin) return x < y ? x : y;
  } else {
#if defined(__CUDA_ARCH__)
    if constexpr (K == ReduceKind::kSum) {
      if constexpr (std::is_same_v<A, float>) return __fadd_rn(x, y);
      else return __dadd_rn(x, y);
    }
    if constexpr (K == ReduceKind::kProd) {
      if constexpr (std::is_same_v<A, float>) return __fmul_rn(x, y);
      else return __dmul_rn(x, y);
    }
#else
    if constexpr (K == ReduceKind::kSum) return x + y;
    if constexpr (K == ReduceKind::kProd) return x * y;
#endif
    if constexpr (K == ReduceKind::kMax) return (x > y || x != x) ? x : y;
    if constexpr (K == ReduceKind::kMin) return (x < y || x != x) ? x : y;
  }
  return x;
}

// The pre-multiplication of PreMulSum and float Avg, as the host's scaleBy/multiplyBy: f64 for 64-bit floats, f32
// for the others; integers multiply in their own type (wrapping). The factor is read from LaneArgs once per lane.
template <class E>
using FactorOf = std::conditional_t<std::is_integral_v<typename E::Acc>, typename E::Acc,
                                    std::conditional_t<std::is_same_v<typename E::Acc, double>, double, float>>;
template <class E>
STRATA_HD_INLINE FactorOf<E> factorOf(const LaneArgs& a) {
  if constexpr (std::is_integral_v<typename E::Acc>) return static_cast<FactorOf<E>>(a.preMulInt);
  else return static_cast<FactorOf<E>>(a.preMul);
}
template <class E>
STRATA_HD_INLINE typename E::Storage preScale(typename E::Storage s, FactorOf<E> f) {
  using Acc = typename E::Acc;
  if constexpr (std::is_integral_v<Acc>) {
    using U = std::make_unsigned_t<Acc>;
    return static_cast<Acc>(static_cast<U>(s) * static_cast<U>(f));
  } else if constexpr (std::is_same_v<Acc, double>) {
    return s * f;
  } else {
    return E::narrow(E::widen(s) * f);
  }
}

/// The element type of each dtype the executor serves (ElemOf<T>::type).
template <strataDataType_t T>
constexpr auto elemTag() {
  if constexpr (T == strataInt8) return Plain<int8_t>{};
  else if constexpr (T == strataUint8) return Plain<uint8_t>{};
  else if constexpr (T == strataInt32) return Plain<int32_t>{};
  else if constexpr (T == strataUint32) return Plain<uint32_t>{};
  else if constexpr (T == strataInt64) return Plain<int64_t>{};
  else if constexpr (T == strataUint64) return Plain<uint64_t>{};
  else if constexpr (T == strataFloat16) return HalfElem{};
  else if constexpr (T == strataFloat32) return Plain<float>{};
  else if constexpr (T == strataFloat64) return Plain<double>{};
  else if constexpr (T == strataBfloat16) return Bf16Elem{};
  else if constexpr (T == strataFloat8e4m3) return E4m3Elem{};
  else return E5m2Elem{};
}
template <strataDataType_t T>
struct ElemOf {
  using type = decltype(elemTag<T>());
};

}  // namespace
}  // namespace strata::devproto
