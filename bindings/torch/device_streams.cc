#include "device_streams.h"

#include <ATen/core/Tensor.h>
#include <c10/core/Event.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <map>
#include <utility>

namespace strata::torch_backend {

namespace {

class TorchEvent : public DeviceEvent {
 public:
  explicit TorchEvent(c10::DeviceType type) : event_(type) {}
  void recordOn(const c10::Stream& stream) { event_.record(stream); }
  bool query() const override { return event_.query(); }
  void block(const c10::Stream& stream) const override { event_.block(stream); }

 private:
  c10::Event event_;
};

class TorchDeviceStreams : public DeviceStreams {
 public:
  explicit TorchDeviceStreams(c10::DeviceType type) : type_(type), impl_(c10::impl::getDeviceGuardImpl(type)) {}

  c10::Stream current(const c10::Device& device) override { return impl_->getStream(device); }

  c10::Stream comm(const c10::Device& device) override {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = comm_.find(device.index());
    if (it == comm_.end()) {
      // A pool stream, as ProcessGroupNCCL takes: never the default stream, so compute on it overlaps.
      it = comm_.emplace(device.index(), impl_->getStreamFromGlobalPool(device, /*isHighPriority=*/false)).first;
    }
    return it->second;
  }

  std::shared_ptr<DeviceEvent> record(const c10::Stream& stream) override {
    auto event = std::make_shared<TorchEvent>(type_);
    event->recordOn(stream);
    return event;
  }

  void recordTensor(const at::Tensor& tensor, const c10::Stream& stream) override {
    if (tensor.defined() && tensor.has_storage()) impl_->recordDataPtrOnStream(tensor.storage().data_ptr(), stream);
  }

  void* strataStream(const c10::Stream& stream) override { return impl_->getStreamNativeHandle(stream); }

  std::shared_ptr<void> makeCurrent(const c10::Stream& stream) override {
    return std::make_shared<c10::StreamGuard>(stream);
  }

 private:
  c10::DeviceType type_;
  const c10::impl::DeviceGuardImplInterface* impl_;
  std::mutex mutex_;
  std::map<c10::DeviceIndex, c10::Stream> comm_;
};

constexpr c10::StreamId kCallerId = 0;
constexpr c10::StreamId kCommId = 1;

class RecordedEvent : public DeviceEvent {
 public:
  RecordedEvent(RecordingDeviceStreams* owner, std::string name) : owner_(owner), name_(std::move(name)) {}
  bool query() const override {
    owner_->note("query " + name_);
    return true;  // the recording model runs everything synchronously
  }
  void block(const c10::Stream& stream) const override {
    owner_->note(RecordingDeviceStreams::streamName(stream) + " waits " + name_);
  }

 private:
  RecordingDeviceStreams* owner_;
  std::string name_;
};

}  // namespace

std::unique_ptr<DeviceStreams> makeTorchDeviceStreams(c10::DeviceType type) {
  return std::make_unique<TorchDeviceStreams>(type);
}

std::string RecordingDeviceStreams::streamName(const c10::Stream& stream) {
  return stream.id() == kCommId ? "comm" : "caller";
}

c10::Stream RecordingDeviceStreams::current(const c10::Device& device) {
  std::lock_guard<std::mutex> lock(mutex_);
  return c10::Stream(c10::Stream::UNSAFE, device, currentId_);
}

c10::Stream RecordingDeviceStreams::comm(const c10::Device& device) {
  return c10::Stream(c10::Stream::UNSAFE, device, kCommId);
}

std::shared_ptr<DeviceEvent> RecordingDeviceStreams::record(const c10::Stream& stream) {
  std::string name;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    name = "e" + std::to_string(++events_);
  }
  note("record " + name + " on " + streamName(stream));
  return std::make_shared<RecordedEvent>(this, name);
}

void RecordingDeviceStreams::recordTensor(const at::Tensor& tensor, const c10::Stream& stream) {
  note("recordStream " + std::to_string(tensor.numel()) + " elements on " + streamName(stream));
}

std::shared_ptr<void> RecordingDeviceStreams::makeCurrent(const c10::Stream& stream) {
  c10::StreamId previous;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    previous = currentId_;
    currentId_ = stream.id();
  }
  note("current stream " + streamName(stream));
  return std::shared_ptr<void>(nullptr, [this, previous](void*) {
    std::lock_guard<std::mutex> lock(mutex_);
    currentId_ = previous;
  });
}

void RecordingDeviceStreams::note(const std::string& line) {
  std::lock_guard<std::mutex> lock(mutex_);
  log_.push_back(line);
}

std::vector<std::string> RecordingDeviceStreams::log() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return log_;
}

}  // namespace strata::torch_backend
