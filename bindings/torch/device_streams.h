// The stream model of the torch backend for device tensors, as ProcessGroupNCCL has it: a collective runs on
// an internal communication stream of its device, which first waits for an event recorded on the caller's
// current stream; the tensors are recorded with the caching allocator on that stream (their memory is not
// reused before the collective ends); an end event recorded after the collective is what Work.wait() makes
// the caller's stream wait for, without blocking the host.
//
// DeviceStreams is that model's interface. TorchDeviceStreams implements it with torch's device-generic
// guard interface (c10::impl::DeviceGuardImplInterface), so this file needs no CUDA header: libc10_cuda
// registers the CUDA implementation at run time. RecordingDeviceStreams stands in where no GPU exists: it
// names streams and events and records every operation in order, so a test on a CPU machine can check that
// the backend orders them as the model says.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/Stream.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace at {
class Tensor;
}

namespace strata::torch_backend {

/// An event recorded on a stream; the backend only records, waits on and queries it.
class DeviceEvent {
 public:
  virtual ~DeviceEvent() = default;
  /// Whether the work before the event has finished.
  virtual bool query() const = 0;
  /// Makes `stream` wait for the event (the host does not block).
  virtual void block(const c10::Stream& stream) const = 0;
};

class DeviceStreams {
 public:
  virtual ~DeviceStreams() = default;
  /// The caller's current stream on `device`.
  virtual c10::Stream current(const c10::Device& device) = 0;
  /// The backend's communication stream on `device` (the same one every time).
  virtual c10::Stream comm(const c10::Device& device) = 0;
  /// Records an event on `stream`.
  virtual std::shared_ptr<DeviceEvent> record(const c10::Stream& stream) = 0;
  /// Tells the caching allocator that `stream` uses the tensor's memory.
  virtual void recordTensor(const at::Tensor& tensor, const c10::Stream& stream) = 0;
  /// The stream Strata enqueues on (a cudaStream_t), or nullptr for host execution.
  virtual void* strataStream(const c10::Stream& stream) = 0;
  /// Makes `stream` the current stream of its device until the returned guard is destroyed.
  virtual std::shared_ptr<void> makeCurrent(const c10::Stream& stream) = 0;
};

/// The real model over torch's device guard (CUDA, or any device type torch registers a guard for).
std::unique_ptr<DeviceStreams> makeTorchDeviceStreams(c10::DeviceType type);

/// The recording stand-in: streams are named "caller" and "comm", events "e1", "e2", ... Each operation
/// appends one line to the log: "record e1 on caller", "comm waits e1", "recordStream <name> on comm",
/// "caller waits e2", "query e2". Strata runs host buffers (strataStream is nullptr), synchronously.
class RecordingDeviceStreams : public DeviceStreams {
 public:
  c10::Stream current(const c10::Device& device) override;
  c10::Stream comm(const c10::Device& device) override;
  std::shared_ptr<DeviceEvent> record(const c10::Stream& stream) override;
  void recordTensor(const at::Tensor& tensor, const c10::Stream& stream) override;
  void* strataStream(const c10::Stream&) override { return nullptr; }
  std::shared_ptr<void> makeCurrent(const c10::Stream& stream) override;

  /// Appends a line of the backend's own (e.g. "allreduce on comm").
  void note(const std::string& line);
  std::vector<std::string> log() const;
  static std::string streamName(const c10::Stream& stream);

 private:
  mutable std::mutex mutex_;
  std::vector<std::string> log_;
  int events_ = 0;
  int currentId_ = 0;  // the stream the caller has current: 0 caller, 1 comm
};

}  // namespace strata::torch_backend
