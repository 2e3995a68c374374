// The buffers of a run: one send and one receive buffer of maxbytes serve every size, type and mode (as in
// nccl-tests). With --device the calls use device copies of them and a stream, and the host buffers hold
// the inputs and results of the checks.
#pragma once

#include <cstddef>
#include <string>

namespace strata::perf {

class PerfBuffers {
 public:
  /// Allocates the buffers (and with `device`, picks this rank's GPU); a failure ends this rank.
  PerfBuffers(size_t maxBytes, bool device, int rank);
  ~PerfBuffers();
  PerfBuffers(const PerfBuffers&) = delete;
  PerfBuffers& operator=(const PerfBuffers&) = delete;

  bool onDevice() const { return device_; }
  /// The host buffers: the checks' inputs and results.
  void* hostSend() const { return hostSend_; }
  void* hostRecv() const { return hostRecv_; }
  /// The buffers the calls get: the device ones with --device, else the host ones.
  void* callSend() const { return device_ ? devSend_ : hostSend_; }
  void* callRecv() const { return device_ ? devRecv_ : hostRecv_; }
  /// The stream of the calls with --device, else nullptr.
  void* stream() const { return stream_; }

  /// --device: the first `bytes` of both host buffers to the device ones, and the receive buffer back.
  /// Throw DeviceError.
  void copyToDevice(size_t bytes) const;
  void copyResultToHost(size_t bytes) const;
  void syncStream() const;

  /// The device this rank uses (-1 without --device) and its description for the header.
  int deviceIndex() const { return deviceIndex_; }
  const std::string& deviceName() const { return deviceName_; }

 private:
  bool device_;
  void* hostSend_ = nullptr;
  void* hostRecv_ = nullptr;
  void* devSend_ = nullptr;
  void* devRecv_ = nullptr;
  void* stream_ = nullptr;
  int deviceIndex_ = -1;
  std::string deviceName_;
};

}  // namespace strata::perf
