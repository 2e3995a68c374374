// The device executor's kernels for half and bfloat16 (exec_kernel.cuh).
#include "device/cuda/exec_kernel.cuh"

namespace strata {

const void* devExecKernelHalf(int dtype, int op) {
  switch (dtype) {
    case strataFloat16: return kernelOf<strataFloat16>(op);
    case strataBfloat16: return kernelOf<strataBfloat16>(op);
    default: return nullptr;
  }
}

}  // namespace strata
