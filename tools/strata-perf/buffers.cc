#include "buffers.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>

#include "device.h"
#include "options.h"

namespace strata::perf {

PerfBuffers::PerfBuffers(size_t maxBytes, bool device, int rank) : device_(device) {
  const size_t page = 4096;
  const size_t bytes = (std::max<size_t>(maxBytes, 1) + page - 1) / page * page;
  hostSend_ = std::aligned_alloc(page, bytes);
  hostRecv_ = std::aligned_alloc(page, bytes);
  if (hostSend_ == nullptr || hostRecv_ == nullptr) {
    std::fprintf(stderr, "strata-perf: rank %d: cannot allocate 2 x %zu bytes\n", rank, bytes);
    std::exit(kExitFailure);
  }
  // Touch every page now, so no timed run pays for the first fault.
  std::memset(hostSend_, 0, bytes);
  std::memset(hostRecv_, 0, bytes);
  if (!device_) return;
  try {
    const char* lr = std::getenv("LOCAL_RANK");
    deviceName_ = selectDevice(lr ? std::atoi(lr) : rank, &deviceIndex_);
    devSend_ = deviceAlloc(bytes);
    devRecv_ = deviceAlloc(bytes);
    stream_ = streamCreate();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "strata-perf: rank %d: --device: %s\n", rank, e.what());
    std::exit(kExitFailure);
  }
}

PerfBuffers::~PerfBuffers() {
  std::free(hostSend_);
  std::free(hostRecv_);
  if (device_) {
    deviceFree(devSend_);
    deviceFree(devRecv_);
    streamDestroy(stream_);
  }
}

void PerfBuffers::copyToDevice(size_t bytes) const {
  strata::perf::copyToDevice(devSend_, hostSend_, bytes);
  strata::perf::copyToDevice(devRecv_, hostRecv_, bytes);
}

void PerfBuffers::copyResultToHost(size_t bytes) const { copyToHost(hostRecv_, devRecv_, bytes); }

void PerfBuffers::syncStream() const { streamSync(stream_); }

}  // namespace strata::perf
