// Entry points of the per-instruction-set builds of kernels/reduce_loops.h; reduce.cc picks one at run time.
// Arguments are validated by the caller.
#pragma once

#include <cstddef>

#include "kernels/reduce_kind.h"
#include "strata/strata.h"

namespace strata::kernel_tiers {

void reducePortable(void* dst, const void* a, const void* b, size_t count, strataDataType_t dt, ReduceKind op);
void scalePortable(void* dst, const void* src, size_t count, strataDataType_t dt, double scalar);

#if defined(__x86_64__)
#define STRATA_KERNEL_X86_TIERS 1
void reduceAvx2(void* dst, const void* a, const void* b, size_t count, strataDataType_t dt, ReduceKind op);
void scaleAvx2(void* dst, const void* src, size_t count, strataDataType_t dt, double scalar);
void reduceAvx512(void* dst, const void* a, const void* b, size_t count, strataDataType_t dt, ReduceKind op);
void scaleAvx512(void* dst, const void* src, size_t count, strataDataType_t dt, double scalar);
void reduceAvx512Vbmi(void* dst, const void* a, const void* b, size_t count, strataDataType_t dt, ReduceKind op);
void scaleAvx512Vbmi(void* dst, const void* src, size_t count, strataDataType_t dt, double scalar);
#endif

}  // namespace strata::kernel_tiers
