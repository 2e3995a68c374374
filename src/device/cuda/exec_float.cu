// The device executor's kernels for float and double (exec_kernel.cuh).
#include "device/cuda/exec_kernel.cuh"

namespace strata {

const void* devExecKernelFloat(int dtype, int op) {
  switch (dtype) {
    case strataFloat32: return kernelOf<strataFloat32>(op);
    case strataFloat64: return kernelOf<strataFloat64>(op);
    default: return nullptr;
  }
}

}  // namespace strata
