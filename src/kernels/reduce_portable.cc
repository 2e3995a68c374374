// The portable tier: the loops compiled for the build's baseline instruction set. It is the reference the
// other tiers are tested against.
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "kernels/reduce_tiers.h"

#define STRATA_KERNEL_ISA 0
#include "kernels/reduce_loops.h"

namespace strata::kernel_tiers {

void reducePortable(void* dst, const void* a, const void* b, size_t count, strataDataType_t dt, ReduceKind op) {
  reduceLoops(dst, a, b, count, dt, op);
}

void scalePortable(void* dst, const void* src, size_t count, strataDataType_t dt, double scalar) {
  scaleLoops(dst, src, count, dt, scalar);
}

}  // namespace strata::kernel_tiers
