// The device executor's launch: the kernel of the call's (dtype, operator) pair (exec_kernel.cuh), one thread block
// per lane. Reached through CudaApi::launchExecutor (kernels/cuda/cuda_kernels.h declares the launcher).
#include <cuda_runtime.h>

#include "device/cuda/exec_kernel.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace strata {

int cudaDevExecLaunch(const void* laneArgs, int lanes, int threads, int dtype, int op, void* stream) {
  if (lanes <= 0) return cudaSuccess;
  // A piece's unaligned edges take one pass of the block (DevicePolicy::kMinThreads), the data loops whole warps.
  if (threads < static_cast<int>(devproto::DevicePolicy::kMinThreads) || threads > kExecMaxThreads ||
      threads % static_cast<int>(devproto::DevicePolicy::kWarp) != 0)
    return cudaErrorInvalidValue;
  const void* kernel = devExecKernelFloat(dtype, op);
  if (kernel == nullptr) kernel = devExecKernelHalf(dtype, op);
  if (kernel == nullptr) kernel = devExecKernelInt(dtype, op);
  if (kernel == nullptr) kernel = devExecKernelFp8(dtype, op);
  if (kernel == nullptr) return cudaErrorInvalidValue;
  const void* arg = laneArgs;
  void* args[] = {&arg};
  return static_cast<int>(cudaLaunchKernel(kernel, dim3(static_cast<unsigned>(lanes)),
                                           dim3(static_cast<unsigned>(threads)), args, 0,
                                           static_cast<cudaStream_t>(stream)));
}

}  // namespace strata
