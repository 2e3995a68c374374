// Host reduction kernels: pure functions over type-erased buffers (void* + dtype), vectorized per dtype.
// f16, bf16 and fp8 (e4m3, e5m2) are widened to f32, combined, and rounded back (round to nearest even).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/reduce_kind.h"
#include "strata/strata.h"
#include "util/dtype.h"

namespace strata {

/// Instruction-set tiers the loops are compiled for. reduce2 and scaleBy use the best one the CPU supports;
/// the *WithIsa variants force one so tests can check every tier against the portable reference.
/// kAvx512 is x86-64-v4 (AVX-512 F/BW/DQ/VL, e.g. Skylake-SP); kAvx512Vbmi adds AVX512-VBMI byte permutes
/// (Ice Lake, Zen 4 and later), which the fp8 kernels use for table lookups. Each tier implies the ones below.
enum class KernelIsa : uint8_t { kPortable = 0, kAvx2 = 1, kAvx512 = 2, kAvx512Vbmi = 3 };
KernelIsa bestKernelIsa();
bool kernelIsaSupported(KernelIsa isa);
const char* kernelIsaName(KernelIsa isa);

/// dst[i] = a[i] (op) b[i] for i < count. dst may alias a and/or b exactly (not partially).
/// Destinations of at least kReduceStreamingBytes (and element-aligned) are written with non-temporal stores:
/// such a buffer does not fit the last-level cache anyway, and skipping the read-for-ownership is worth ~30%.
void reduce2(void* dst, const void* a, const void* b, size_t count, strataDataType_t dt, ReduceKind op);
void reduce2WithIsa(void* dst, const void* a, const void* b, size_t count, strataDataType_t dt, ReduceKind op,
                    KernelIsa isa);
inline constexpr size_t kReduceStreamingBytes = size_t{8} << 20;

/// dst[i] = src[i] * scalar, computed in f64 for 64-bit types and f32 otherwise (the way NCCL's PreMulSum
/// widens), then rounded to dt. Integer types round toward zero and saturate at their range (NaN gives 0).
/// dst may alias src.
void scaleBy(void* dst, const void* src, size_t count, strataDataType_t dt, double scalar);
void scaleByWithIsa(void* dst, const void* src, size_t count, strataDataType_t dt, double scalar, KernelIsa isa);

/// dst[i] = src[i] * factor for integer dtypes, in the integer's own arithmetic (wrapping modulo 2^bits, as NCCL's
/// PreMulSum multiplies in the data type); dst may alias src. Throws InvalidArgument for float dtypes.
void multiplyBy(void* dst, const void* src, size_t count, strataDataType_t dt, int64_t factor);

/// dst[i] = src[i] / divisor for integer dtypes (truncating, as NCCL's integer Avg); dst may alias src.
/// Throws InvalidArgument for float dtypes (scale by 1/n instead) and for a zero divisor.
void divideBy(void* dst, const void* src, size_t count, strataDataType_t dt, uint64_t divisor);

/// Scalar conversions used by kernels, tests and tools.
float halfToFloat(uint16_t h);
uint16_t floatToHalf(float f);
float bf16ToFloat(uint16_t b);
uint16_t floatToBf16(float f);
float fp8e4m3ToFloat(uint8_t v);
uint8_t floatToFp8e4m3(float f);  // saturates to +-448, NaN stays NaN
float fp8e5m2ToFloat(uint8_t v);
uint8_t floatToFp8e5m2(float f);  // rounds to nearest even; overflow to +-inf

/// Reads element i of buf as double (tests and tools); writes a double into element i with rounding: floats round
/// to nearest even in one step (no double rounding through f32), integers truncate toward zero and saturate.
double loadAsDouble(const void* buf, size_t i, strataDataType_t dt);
void storeFromDouble(void* buf, size_t i, strataDataType_t dt, double v);

}  // namespace strata
