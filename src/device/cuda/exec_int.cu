// The device executor's kernels for the integer types (exec_kernel.cuh).
#include "device/cuda/exec_kernel.cuh"

namespace strata {

const void* devExecKernelInt(int dtype, int op) {
  switch (dtype) {
    case strataInt8: return kernelOf<strataInt8>(op);
    case strataUint8: return kernelOf<strataUint8>(op);
    case strataInt32: return kernelOf<strataInt32>(op);
    case strataUint32: return kernelOf<strataUint32>(op);
    case strataInt64: return kernelOf<strataInt64>(op);
    case strataUint64: return kernelOf<strataUint64>(op);
    default: return nullptr;
  }
}

}  // namespace strata
