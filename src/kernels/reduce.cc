// Argument checks and the run-time choice of an instruction-set tier for the reduce loops.
#include "kernels/reduce.h"

#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "kernels/reduce_tiers.h"
#include "util/error.h"

namespace strata {
namespace {

KernelIsa detectKernelIsa() {
#if defined(STRATA_KERNEL_X86_TIERS)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("f16c") && __builtin_cpu_supports("fma") &&
      __builtin_cpu_supports("bmi2")) {
    return __builtin_cpu_supports("avx512vbmi") ? KernelIsa::kAvx512Vbmi : KernelIsa::kAvx512;
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c") && __builtin_cpu_supports("fma") &&
      __builtin_cpu_supports("bmi2")) {
    return KernelIsa::kAvx2;
  }
#endif
  return KernelIsa::kPortable;
}

void checkDtype(const char* what, strataDataType_t dt) {
  if (!dtypeValid(dt)) throw InvalidArgument(strprintf("%s: invalid datatype %d", what, static_cast<int>(dt)));
}

void checkIsa(const char* what, KernelIsa isa) {
  if (!kernelIsaSupported(isa)) {
    throw InvalidArgument(strprintf("%s: instruction set %s is not supported by this CPU", what, kernelIsaName(isa)));
  }
}

// x * factor in T's arithmetic, wrapping modulo 2^bits as the integer's own multiplication does (NCCL's PreMulSum
// multiplies in the data type); computed unsigned, where wrapping is defined.
template <class T>
void multiplyInts(void* dstv, const void* srcv, size_t count, int64_t factor) {
  using U = std::make_unsigned_t<T>;
  T* dst = static_cast<T*>(dstv);
  const T* src = static_cast<const T*>(srcv);
  const U f = static_cast<U>(static_cast<uint64_t>(factor));
  for (size_t i = 0; i < count; ++i) dst[i] = static_cast<T>(static_cast<U>(static_cast<U>(src[i]) * f));
}

template <class T>
void divideInts(void* dstv, const void* srcv, size_t count, uint64_t divisor) {
  T* dst = static_cast<T*>(dstv);
  const T* src = static_cast<const T*>(srcv);
  if constexpr (std::numeric_limits<T>::is_signed) {
    if (divisor > static_cast<uint64_t>(std::numeric_limits<T>::max())) {
      // |x| < divisor for every x except T's minimum when divisor is exactly -min.
      for (size_t i = 0; i < count; ++i) {
        bool minusOne = src[i] == std::numeric_limits<T>::min() &&
                        divisor == static_cast<uint64_t>(std::numeric_limits<T>::max()) + 1;
        dst[i] = minusOne ? T(-1) : T(0);
      }
      return;
    }
    const T d = static_cast<T>(divisor);
    for (size_t i = 0; i < count; ++i) dst[i] = static_cast<T>(src[i] / d);
  } else {
    for (size_t i = 0; i < count; ++i) dst[i] = static_cast<T>(src[i] / divisor);
  }
}

}  // namespace

KernelIsa bestKernelIsa() {
  static const KernelIsa best = detectKernelIsa();
  return best;
}

bool kernelIsaSupported(KernelIsa isa) {
  switch (isa) {
    case KernelIsa::kPortable: return true;
    case KernelIsa::kAvx2: return bestKernelIsa() >= KernelIsa::kAvx2;
    case KernelIsa::kAvx512: return bestKernelIsa() >= KernelIsa::kAvx512;
    case KernelIsa::kAvx512Vbmi: return bestKernelIsa() >= KernelIsa::kAvx512Vbmi;
  }
  return false;
}

const char* kernelIsaName(KernelIsa isa) {
  switch (isa) {
    case KernelIsa::kPortable: return "portable";
    case KernelIsa::kAvx2: return "avx2";
    case KernelIsa::kAvx512: return "avx512";
    case KernelIsa::kAvx512Vbmi: return "avx512vbmi";
  }
  return "invalid";
}

void reduce2(void* dst, const void* a, const void* b, size_t count, strataDataType_t dt, ReduceKind op) {
  reduce2WithIsa(dst, a, b, count, dt, op, bestKernelIsa());
}

void reduce2WithIsa(void* dst, const void* a, const void* b, size_t count, strataDataType_t dt, ReduceKind op,
                    KernelIsa isa) {
  checkDtype("reduce2", dt);
  if (static_cast<uint8_t>(op) > static_cast<uint8_t>(ReduceKind::kMin)) {
    throw InvalidArgument(strprintf("reduce2: invalid reduce operator %d", static_cast<int>(op)));
  }
  checkIsa("reduce2", isa);
  if (count == 0) return;
  switch (isa) {
#if defined(STRATA_KERNEL_X86_TIERS)
    case KernelIsa::kAvx512Vbmi: return kernel_tiers::reduceAvx512Vbmi(dst, a, b, count, dt, op);
    case KernelIsa::kAvx512: return kernel_tiers::reduceAvx512(dst, a, b, count, dt, op);
    case KernelIsa::kAvx2: return kernel_tiers::reduceAvx2(dst, a, b, count, dt, op);
#endif
    default: return kernel_tiers::reducePortable(dst, a, b, count, dt, op);
  }
}

void scaleBy(void* dst, const void* src, size_t count, strataDataType_t dt, double scalar) {
  scaleByWithIsa(dst, src, count, dt, scalar, bestKernelIsa());
}

void scaleByWithIsa(void* dst, const void* src, size_t count, strataDataType_t dt, double scalar, KernelIsa isa) {
  checkDtype("scaleBy", dt);
  checkIsa("scaleBy", isa);
  if (count == 0) return;
  switch (isa) {
#if defined(STRATA_KERNEL_X86_TIERS)
    case KernelIsa::kAvx512Vbmi: return kernel_tiers::scaleAvx512Vbmi(dst, src, count, dt, scalar);
    case KernelIsa::kAvx512: return kernel_tiers::scaleAvx512(dst, src, count, dt, scalar);
    case KernelIsa::kAvx2: return kernel_tiers::scaleAvx2(dst, src, count, dt, scalar);
#endif
    default: return kernel_tiers::scalePortable(dst, src, count, dt, scalar);
  }
}

void multiplyBy(void* dst, const void* src, size_t count, strataDataType_t dt, int64_t factor) {
  checkDtype("multiplyBy", dt);
  if (dtypeIsFloat(dt)) {
    throw InvalidArgument(strprintf("multiplyBy: datatype %s is a float type; use scaleBy", dtypeName(dt)));
  }
  switch (dt) {
    case strataInt8: return multiplyInts<int8_t>(dst, src, count, factor);
    case strataUint8: return multiplyInts<uint8_t>(dst, src, count, factor);
    case strataInt32: return multiplyInts<int32_t>(dst, src, count, factor);
    case strataUint32: return multiplyInts<uint32_t>(dst, src, count, factor);
    case strataInt64: return multiplyInts<int64_t>(dst, src, count, factor);
    case strataUint64: return multiplyInts<uint64_t>(dst, src, count, factor);
    default: return;
  }
}

void divideBy(void* dst, const void* src, size_t count, strataDataType_t dt, uint64_t divisor) {
  checkDtype("divideBy", dt);
  if (dtypeIsFloat(dt)) {
    throw InvalidArgument(strprintf("divideBy: datatype %s is a float type; scale by 1/n instead", dtypeName(dt)));
  }
  if (divisor == 0) throw InvalidArgument(strprintf("divideBy: divisor is 0 (datatype %s)", dtypeName(dt)));
  switch (dt) {
    case strataInt8: return divideInts<int8_t>(dst, src, count, divisor);
    case strataUint8: return divideInts<uint8_t>(dst, src, count, divisor);
    case strataInt32: return divideInts<int32_t>(dst, src, count, divisor);
    case strataUint32: return divideInts<uint32_t>(dst, src, count, divisor);
    case strataInt64: return divideInts<int64_t>(dst, src, count, divisor);
    case strataUint64: return divideInts<uint64_t>(dst, src, count, divisor);
    default: return;
  }
}

}  // namespace strata
