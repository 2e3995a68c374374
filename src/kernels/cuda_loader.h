// Loading CUDA on first use. libstrata.so never links CUDA; the CUDA side lives in libstrata_cuda.so (see
// src/kernels/cuda/cuda_api.h), which this loads the first time a call passes a CUDA stream or a device
// pointer. Host buffers never pay for it: while the process has not loaded the CUDA driver, no pointer can be
// device memory, and that check costs one walk of the loader's list head, without loading anything.
#pragma once

#include "kernels/cuda/cuda_api.h"

namespace strata {

/// True once this process has loaded the CUDA driver (libcuda.so.1), by itself or through Strata. Cheap: it
/// re-checks only when the set of loaded objects has grown since the last negative answer.
bool cudaDriverLoaded();

/// The CUDA interface, loading libstrata_cuda.so and initialising the runtime on first use. Throws CudaError
/// (strataUnhandledCudaError) naming the cause when CUDA cannot be used: a build without CUDA, the library
/// missing, no driver, a driver older than the runtime, or no visible device. The same error repeats on later
/// calls without retrying the load.
CudaApi& cudaApi();

/// Tests only: makes cudaApi() return `api` (nullptr: forget it and load the real one on next use).
void setCudaApiForTesting(CudaApi* api);

/// The device owning `p` if it is device or managed memory, else -1. Never loads CUDA: without the driver in
/// the process every pointer is host memory.
int devicePointerOwner(const void* p);

}  // namespace strata
