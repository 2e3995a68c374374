// The reduce and scale loops, written once and compiled once per instruction-set tier.
//
// Each tier's .cc (reduce_portable.cc, reduce_avx2.cc, reduce_avx512.cc, reduce_avx512vbmi.cc) includes its standard
// headers, then sets `#pragma GCC target(...)` and STRATA_KERNEL_ISA, then includes this file, never its parts
// directly. This file includes the parts, one idea each, and ends with the dispatch on datatype and operator:
//   reduce_elements.h     element operators, and block codecs over the scalar codecs of util/dtype_codec.h;
//   reduce_plain_loops.h  the Native and Widened loops, the streaming runner, the scaling loops;
//   reduce_fused_x86.h    the fused f16 and fp8 kernels of the vector tiers (intrinsics).
// Everything here, util/dtype_codec.h's codecs included, lives in an anonymous namespace so each tier gets its own
// copy: no inline function compiled for AVX-512 can be picked by the linker for the portable tier. For the same
// reason this code calls only builtins and its own functions, and the tier files include the standard headers
// before the pragma.
//
// The loops are plain C++ the compiler vectorizes (check with -fopt-info-vec). f16, bf16 and fp8 are widened
// to f32 in blocks of kBlock elements into stack arrays, combined there, and rounded back, so the conversion
// loops are branch-free and vectorize too. Exact aliasing (dst == a and/or dst == b) is dispatched to loops whose
// __restrict qualifiers stay true. In the vector tiers, f16 and fp8 reductions run fused kernels written with
// intrinsics instead, which keep each 64-byte line in registers (see reduce_fused_x86.h).
#pragma once

#include <cstddef>

#ifndef STRATA_KERNEL_ISA
#error "define STRATA_KERNEL_ISA (0 portable, 1 AVX2, 2 AVX-512, 3 +VBMI) before including kernels/reduce_loops.h"
#endif

#include "kernels/reduce.h"
#include "kernels/reduce_elements.h"
#include "kernels/reduce_fused_x86.h"
#include "kernels/reduce_plain_loops.h"

namespace strata {
namespace {

template <class Op>
void reduceByType(void* d, const void* a, const void* b, size_t n, strataDataType_t dt) {
  switch (dt) {
    case strataInt8: return runReduce<Native<int8_t, Op>>(d, a, b, n);
    case strataUint8: return runReduce<Native<uint8_t, Op>>(d, a, b, n);
    case strataInt32: return runReduce<Native<int32_t, Op>>(d, a, b, n);
    case strataUint32: return runReduce<Native<uint32_t, Op>>(d, a, b, n);
    case strataInt64: return runReduce<Native<int64_t, Op>>(d, a, b, n);
    case strataUint64: return runReduce<Native<uint64_t, Op>>(d, a, b, n);
    case strataFloat16:
#if STRATA_KERNEL_ISA >= 1
      return runFused<HalfFused<Op>>(d, a, b, n);
#else
      return runReduce<Widened<HalfCodec, Op>>(d, a, b, n);
#endif
    case strataFloat32: return runReduce<Native<float, Op>>(d, a, b, n);
    case strataFloat64: return runReduce<Native<double, Op>>(d, a, b, n);
    case strataBfloat16: return runReduce<Widened<Bf16Codec, Op>>(d, a, b, n);
#if STRATA_KERNEL_ISA >= 1
    case strataFloat8e4m3: return runFused<Fp8Fused<E4m3, Op>>(d, a, b, n);
    case strataFloat8e5m2: return runFused<Fp8Fused<E5m2, Op>>(d, a, b, n);
#else
    case strataFloat8e4m3: return runReduce<Widened<E4m3Codec, Op>>(d, a, b, n);
    case strataFloat8e5m2: return runReduce<Widened<E5m2Codec, Op>>(d, a, b, n);
#endif
    default: return;  // validated by the caller
  }
}

// Validated by the caller (reduce.cc) before it picks a tier.
void reduceLoops(void* d, const void* a, const void* b, size_t n, strataDataType_t dt, ReduceKind op) {
  switch (op) {
    case ReduceKind::kSum: return reduceByType<OpSum>(d, a, b, n, dt);
    case ReduceKind::kProd: return reduceByType<OpProd>(d, a, b, n, dt);
    case ReduceKind::kMax: return reduceByType<OpMax>(d, a, b, n, dt);
    case ReduceKind::kMin: return reduceByType<OpMin>(d, a, b, n, dt);
  }
}

void scaleLoops(void* d, const void* src, size_t n, strataDataType_t dt, double scalar) {
  switch (dt) {
    case strataInt8: return NativeScale<int8_t>::run(d, src, n, scalar);
    case strataUint8: return NativeScale<uint8_t>::run(d, src, n, scalar);
    case strataInt32: return NativeScale<int32_t>::run(d, src, n, scalar);
    case strataUint32: return NativeScale<uint32_t>::run(d, src, n, scalar);
    case strataInt64: return NativeScale<int64_t>::run(d, src, n, scalar);
    case strataUint64: return NativeScale<uint64_t>::run(d, src, n, scalar);
    case strataFloat16: return WidenedScale<HalfCodec>::run(d, src, n, scalar);
    case strataFloat32: return NativeScale<float>::run(d, src, n, scalar);
    case strataFloat64: return NativeScale<double>::run(d, src, n, scalar);
    case strataBfloat16: return WidenedScale<Bf16Codec>::run(d, src, n, scalar);
    case strataFloat8e4m3: return WidenedScale<E4m3Codec>::run(d, src, n, scalar);
    case strataFloat8e5m2: return WidenedScale<E5m2Codec>::run(d, src, n, scalar);
    default: return;
  }
}

}  // namespace
}  // namespace strata
