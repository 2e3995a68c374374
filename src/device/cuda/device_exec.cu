#include <cuda_runtime.h>

#include "device/cuda/device_exec.h"
#include "device/device_policy.cuh"
#include "device/proto.h"

namespace strata {
namespace {

__global__ void devExecKernel(const devproto::LaneArgs* laneArgs) {
  __shared__ uint32_t verdict;
  const devproto::DevicePolicy policy{&verdict};
  devproto::runLane(policy, laneArgs[blockIdx.x]);
}

}  // namespace

int cudaDevExecLaunch(const devproto::LaneArgs* laneArgs, int lanes, int threads, void* stream) {
  if (lanes <= 0) return cudaSuccess;
  devExecKernel<<<lanes, threads, 0, static_cast<cudaStream_t>(stream)>>>(laneArgs);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace strata
