// Helpers shared by the device engine's files (device_engine.cc, device_direct.cc, device_staged.cc).
#pragma once

#include <cstddef>

#include "kernels/cuda/cuda_api.h"

namespace strata::device_detail {

inline constexpr int kCudaErrorNotReady = 600;  // cudaErrorNotReady
inline constexpr size_t kAlign = 256;           // staging ranges and direct-path regions start on 256-byte boundaries

inline size_t alignUp(size_t v, size_t a) { return (v + a - 1) / a * a; }

// Restores the calling thread's current device when an enqueue is done.
class DeviceGuard {
 public:
  DeviceGuard(CudaApi& api, int device) : api_(api) {
    if (api_.getDevice(&saved_) != 0) saved_ = -1;
    if (device >= 0 && device != saved_) api_.setDevice(device);
  }
  ~DeviceGuard() {
    if (saved_ >= 0) api_.setDevice(saved_);
  }

 private:
  CudaApi& api_;
  int saved_ = -1;
};

}  // namespace strata::device_detail
