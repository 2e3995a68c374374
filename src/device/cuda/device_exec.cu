// The device executor's kernel: one thread block per lane of a lowered plan, each running device/proto.h's runLane
// under DevicePolicy, the same code the CPU tests run under HostPolicy. Launched through CudaApi::launchExecutor
// (kernels/cuda/cuda_kernels.h declares the launcher).
#include <cuda_runtime.h>

#include "device/device_policy.cuh"
#include "device/proto.h"
#include "kernels/cuda/cuda_kernels.h"

namespace strata {
namespace {

__global__ void devExecKernel(const devproto::LaneArgs* laneArgs) {
  __shared__ uint32_t verdict;
  const devproto::DevicePolicy policy{&verdict};
  devproto::runLane(policy, laneArgs[blockIdx.x]);
}

}  // namespace

int cudaDevExecLaunch(const void* laneArgs, int lanes, int threads, void* stream) {
  if (lanes <= 0) return cudaSuccess;
  devExecKernel<<<lanes, threads, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const devproto::LaneArgs*>(laneArgs));
  return static_cast<int>(cudaGetLastError());
}

}  // namespace strata
