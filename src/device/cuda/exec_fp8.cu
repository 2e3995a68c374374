// The device executor's kernels for the 8-bit floats (exec_kernel.cuh).
#include "device/cuda/exec_kernel.cuh"

namespace strata {

const void* devExecKernelFp8(int dtype, int op) {
  switch (dtype) {
    case strataFloat8e4m3: return kernelOf<strataFloat8e4m3>(op);
    case strataFloat8e5m2: return kernelOf<strataFloat8e5m2>(op);
    default: return nullptr;
  }
}

}  // namespace strata
