// Launchers of the CUDA kernels, callable from plain C++ (no CUDA headers): the CudaApi implementation and the
// GPU tests call these. Each returns a cudaError_t value (0 = success) and only enqueues work on `stream`.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/cuda_api.h"

namespace strata {

/// See CudaApi::reduce.
int cudaReduce(void* dst, const void* const* srcs, int nsrcs, size_t count, strataDataType_t dt, ReduceKind op,
               void* stream);
/// One-thread kernels that wait for / write a 32-bit flag: the fallback of CudaApi::streamWaitValue/WriteValue.
int cudaWaitFlagKernel(void* stream, void* devAddr, uint32_t value);
int cudaWriteFlagKernel(void* stream, void* devAddr, uint32_t value);

/// Element size of a dtype (0 if invalid), usable without linking libstrata.
constexpr size_t dtypeSizeDevice(strataDataType_t dt) {
  switch (dt) {
    case strataInt8:
    case strataUint8:
    case strataFloat8e4m3:
    case strataFloat8e5m2:
      return 1;
    case strataFloat16:
    case strataBfloat16:
      return 2;
    case strataInt32:
    case strataUint32:
    case strataFloat32:
      return 4;
    case strataInt64:
    case strataUint64:
    case strataFloat64:
      return 8;
    default:
      return 0;
  }
}

}  // namespace strata
