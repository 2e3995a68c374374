// The AVX2 tier (x86-64-v3: AVX2, FMA, F16C): the loops compiled for 256-bit vectors, with hardware f16
// conversion. Standard headers come before the target pragma so none of their inline functions is compiled
// for AVX2 (see kernels/reduce_loops.h).
#if defined(__x86_64__)
#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "kernels/reduce_tiers.h"

#pragma GCC target("avx2,fma,f16c,bmi,bmi2,lzcnt,movbe,popcnt")
#define STRATA_KERNEL_ISA 1
#include "kernels/reduce_loops.h"

namespace strata::kernel_tiers {

void reduceAvx2(void* dst, const void* a, const void* b, size_t count, strataDataType_t dt, ReduceKind op) {
  reduceLoops(dst, a, b, count, dt, op);
}

void scaleAvx2(void* dst, const void* src, size_t count, strataDataType_t dt, double scalar) {
  scaleLoops(dst, src, count, dt, scalar);
}

}  // namespace strata::kernel_tiers
#endif
