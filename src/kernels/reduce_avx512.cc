// The AVX-512 tier (x86-64-v4: AVX-512 F/BW/DQ/VL): the loops compiled for 512-bit vectors, which matters for
// the fp8 and f16 conversions more than for the memory-bound native types. Standard headers come before the
// target pragma so none of their inline functions is compiled for AVX-512 (see kernels/reduce_loops.h).
#if defined(__x86_64__)
// GCC 12's AVX-512 headers initialise their "undefined" vectors from themselves, which -Wuninitialized reports
// once the intrinsics are inlined (GCC bug 105593, fixed in GCC 13). The diagnostic state that counts is the one
// in force where the header is read, so it is switched off before the include.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "kernels/reduce_tiers.h"

#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c,bmi,bmi2,lzcnt,movbe,popcnt")
#pragma GCC target("prefer-vector-width=512")
#define STRATA_KERNEL_ISA 2
#include "kernels/reduce_loops.h"

namespace strata::kernel_tiers {

void reduceAvx512(void* dst, const void* a, const void* b, size_t count, strataDataType_t dt, ReduceKind op) {
  reduceLoops(dst, a, b, count, dt, op);
}

void scaleAvx512(void* dst, const void* src, size_t count, strataDataType_t dt, double scalar) {
  scaleLoops(dst, src, count, dt, scalar);
}

}  // namespace strata::kernel_tiers
#endif
