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
/// The device executor's kernel of (dtype, op) (defined in src/device/cuda/device_exec.cu): `lanes` blocks of
/// `threads` (64..256, whole warps), block l running devproto::runLaneAs on ((const devproto::LaneArgs*)laneArgs)[l].
int cudaDevExecLaunch(const void* laneArgs, int lanes, int threads, int dtype, int op, void* stream);

}  // namespace strata
