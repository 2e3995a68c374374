// The device executor's kernels: one per (dtype, operator) pair, each a thread block per lane of a lowered plan
// running device/proto.h's runLaneAs under DevicePolicy, the code the CPU tests run under HostPolicy. A kernel per
// pair, as NCCL's are, keeps each one's registers to what its own data loops need and lets nvcc inline the whole
// lane; the pairs are spread over a few translation units (exec_*.cu) so that they compile in parallel.
// device_exec.cu picks the kernel of a call and launches it.
#pragma once

#include <cuda_runtime.h>

#include "device/device_policy.cuh"
#include "device/proto.h"

namespace strata {

/// Threads per block the kernels are built for (the launch refuses more, and fewer than DevicePolicy::kMinThreads).
inline constexpr int kExecMaxThreads = 256;

namespace {

template <strataDataType_t T, ReduceKind K>
__global__ void __launch_bounds__(kExecMaxThreads, 1) devExecKernel(const devproto::LaneArgs* __restrict__ laneArgs) {
  __shared__ uint32_t verdict;
  const devproto::DevicePolicy policy{&verdict};
  devproto::runLaneAs<devproto::DevicePolicy, typename devproto::ElemOf<T>::type, K>(policy, laneArgs[blockIdx.x]);
}

template <strataDataType_t T>
const void* kernelOf(int op) {
  switch (static_cast<ReduceKind>(op)) {
    case ReduceKind::kSum: return reinterpret_cast<const void*>(&devExecKernel<T, ReduceKind::kSum>);
    case ReduceKind::kProd: return reinterpret_cast<const void*>(&devExecKernel<T, ReduceKind::kProd>);
    case ReduceKind::kMax: return reinterpret_cast<const void*>(&devExecKernel<T, ReduceKind::kMax>);
    case ReduceKind::kMin: return reinterpret_cast<const void*>(&devExecKernel<T, ReduceKind::kMin>);
  }
  return nullptr;
}

}  // namespace

/// The kernel of (dtype, op) among each translation unit's dtypes, or nullptr when it has none.
const void* devExecKernelInt(int dtype, int op);
const void* devExecKernelFloat(int dtype, int op);
const void* devExecKernelHalf(int dtype, int op);
const void* devExecKernelFp8(int dtype, int op);

}  // namespace strata
