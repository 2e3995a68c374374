// Device buffers for --device: strata-perf allocates them with the CUDA runtime, fills and checks on the host
// copies, and uploads/downloads around each check. Built when CUDA is (STRATA_PERF_WITH_CUDA); otherwise
// every function throws DeviceError saying so.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>

namespace strata::perf {

class DeviceError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// True when this strata-perf can use device buffers.
bool deviceBuilt();
/// Picks the device of this rank (local rank modulo the device count); returns a description for the header.
std::string selectDevice(int localRank, int* device);
void* deviceAlloc(size_t bytes);
void deviceFree(void* p);
/// A non-blocking stream on the current device.
void* streamCreate();
void streamDestroy(void* stream);
void streamSync(void* stream);
void copyToDevice(void* dst, const void* src, size_t bytes);
void copyToHost(void* dst, const void* src, size_t bytes);

}  // namespace strata::perf
