// The element-wise operator of a reduction: what plans, kernels and their per-ISA tiers agree on.
#pragma once

#include <cstdint>

namespace strata {

/// The element-wise operator a kernel applies. Avg and PreMulSum are built from these by the executor.
/// Integer sum and prod wrap around (two's complement). Float max/min propagate NaN: if either input is NaN
/// the result is NaN (like torch.maximum, unlike fmaxf), so a NaN on one rank is never hidden by the others.
enum class ReduceKind : uint8_t { kSum = 0, kProd = 1, kMax = 2, kMin = 3 };

}  // namespace strata
