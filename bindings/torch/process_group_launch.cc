// How ProcessGroupStrata runs a torch call: host tensors as one Strata group ended asynchronously and completed by
// the completion thread (or, for a blocking call, on the caller's thread); device tensors on the communication
// stream (device_streams.h); and coalescing, which makes the calls between startCoalescing and endCoalescing one
// Strata group.
#include <c10/util/Exception.h>

#include <algorithm>
#include <string>
#include <utility>

#include "process_group_call.h"
#include "process_group_strata.h"
#include "result_error.h"

namespace strata::torch_backend {

// ---- launching ------------------------------------------------------------------------------------------------

bool ProcessGroupStrata::usesDevicePath(const std::vector<at::Tensor>& tensors) const {
  if (everyTensorOnStreams_) return true;
  return std::any_of(tensors.begin(), tensors.end(), [](const at::Tensor& t) { return t.defined() && !t.is_cpu(); });
}

DeviceStreams& ProcessGroupStrata::streamsFor(const c10::Device& device) {
  if (!streams_) streams_ = makeTorchDeviceStreams(device.type());
  return *streams_;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupStrata::run(c10d::OpType opType, const char* name, bool asyncOp,
                                                       std::vector<at::Tensor> outputs,
                                                       const std::vector<at::Tensor>& tensors,
                                                       const std::function<void(Call&)>& issue) {
  TORCH_CHECK(comm_ != nullptr, "strata: ", name, " on a process group that was shut down or aborted");
  if (usesDevicePath(tensors)) return runDevice(opType, name, std::move(outputs), tensors, issue);
  const uint64_t seq = nextSequenceNumber();
  if (coalesced_) {
    TORCH_CHECK(!coalescedOnDevice_, "strata: ", name, ": a coalesced group mixes host and device tensors");
    issue(*coalesced_);
    coalescedWork_->addOutputs(outputs);
    return coalescedWork_;
  }
  auto call = std::make_shared<Call>();
  call->comm = comm_;
  auto work = c10::make_intrusive<StrataWork>(rank_, opType, seq, name, std::move(outputs), std::vector<c10::Device>{});
  check(strataGroupStart(), name);
  try {
    issue(*call);
  } catch (...) {
    // End the group (the calls recorded so far still run, as NCCL's group would), then report.
    strataGroupEnd();
    call->destroyOps();
    throw;
  }
  if (!asyncOp) {
    // A blocking torch call (async_op=False) runs here, on the caller's thread, as the C API runs it: no hand-off
    // to the completion thread and back. The Work is complete on return.
    const strataResult_t r = strataGroupEnd();
    call->destroyOps();
    if (r != strataSuccess) throwResult(r, name);
    for (auto& copyBack : call->post) copyBack();
    work->complete(nullptr);
    return work;
  }
  endHostGroup(work, std::move(call), name);
  return work;
}

void ProcessGroupStrata::endHostGroup(const c10::intrusive_ptr<StrataWork>& work, std::shared_ptr<Call> call,
                                      const char* name) {
  strataWork_t handle = nullptr;
  const strataResult_t r = strataGroupEndAsync(&handle);
  if (r != strataSuccess) {
    call->destroyOps();
    throwResult(r, name);
  }
  auto launch = std::make_shared<Launch>();
  launch->handle = handle;
  launch->work = work;
  launch->call = std::move(call);
  launch->name = name;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    pending_.push_back(std::move(launch));
  }
  cv_.notify_all();
}

void ProcessGroupStrata::completionLoop() {
  for (;;) {
    std::shared_ptr<Launch> launch;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] { return stopping_ || !pending_.empty(); });
      if (pending_.empty()) return;
      launch = std::move(pending_.front());
      pending_.pop_front();
    }
    std::exception_ptr error;
    const strataResult_t r = strataWorkWait(launch->handle, -1);
    if (r != strataSuccess) {
      error = resultError(r, launch->name, strataWorkError(launch->handle));
    } else {
      try {
        for (auto& copyBack : launch->call->post) copyBack();
      } catch (...) {
        error = std::current_exception();
      }
    }
    strataWorkFree(launch->handle);
    launch->call->destroyOps();
    launch->call->keep.clear();
    launch->work->complete(error);
  }
}

c10::intrusive_ptr<c10d::Work> ProcessGroupStrata::runDevice(c10d::OpType opType, const char* name,
                                                             std::vector<at::Tensor> outputs,
                                                             const std::vector<at::Tensor>& tensors,
                                                             const std::function<void(Call&)>& issue) {
  TORCH_CHECK(!tensors.empty(), "strata: ", name, " without tensors");
  const c10::Device device = tensors.front().device();
  for (const auto& t : tensors) {
    TORCH_CHECK(t.device() == device, "strata: ", name, ": every tensor must be on one device; got ", device, " and ",
                t.device());
  }
  TORCH_CHECK(!coalesced_ || coalescedOnDevice_ || coalesced_->post.empty(), "strata: ", name,
              ": a coalesced group mixes host and device tensors");
  DeviceStreams& streams = streamsFor(device);
  auto* recording = dynamic_cast<RecordingDeviceStreams*>(&streams);
  const c10::Stream commStream = streams.comm(device);
  const uint64_t seq = nextSequenceNumber();

  std::shared_ptr<Call> call = coalesced_;
  const bool firstOfGroup = !call || !coalescedOnDevice_;
  if (!call) {
    call = std::make_shared<Call>();
    call->comm = comm_;
  }
  if (firstOfGroup) {
    // The communication stream starts after what the caller enqueued so far (the inputs' producers).
    streams.record(streams.current(device))->block(commStream);
    call->stream = streams.strataStream(commStream);
  }
  if (coalesced_) coalescedOnDevice_ = true;
  {
    // Staging copies (contiguous(), cat) run on the communication stream, after that wait.
    auto current = streams.makeCurrent(commStream);
    if (!coalesced_) check(strataGroupStart(), name);
    try {
      issue(*call);
    } catch (...) {
      if (!coalesced_) strataGroupEnd();
      throw;
    }
    if (recording) recording->note(std::string(name) + " on comm");
    for (const auto& t : tensors) streams.recordTensor(t, commStream);
    if (coalesced_) {
      coalescedWork_->addOutputs(outputs);
      return coalescedWork_;
    }
    const strataResult_t r = strataGroupEnd();  // device calls return once enqueued on the stream
    call->destroyOps();
    if (r != strataSuccess) throwResult(r, name);
    for (auto& copyBack : call->post) copyBack();
    for (const auto& t : call->keep) streams.recordTensor(t, commStream);
  }
  return deviceWork(opType, seq, name, std::move(outputs), streams, device, commStream);
}

c10::intrusive_ptr<StrataWork> ProcessGroupStrata::deviceWork(c10d::OpType opType, uint64_t seq, const char* name,
                                                              std::vector<at::Tensor> outputs, DeviceStreams& streams,
                                                              const c10::Device& device,
                                                              const c10::Stream& commStream) {
  std::vector<c10::Device> futureDevices;
  if (!device.is_cpu()) futureDevices.push_back(device);
  auto work = c10::make_intrusive<StrataWork>(rank_, opType, seq, name, std::move(outputs), futureDevices);
  work->completeOnStream(streams.record(commStream), &streams, device, commStream, comm_);
  return work;
}

// ---- coalescing -----------------------------------------------------------------------------------------------

void ProcessGroupStrata::startCoalescing() {
  TORCH_CHECK(!coalesced_, "strata: startCoalescing while a coalesced group is open");
  TORCH_CHECK(comm_ != nullptr, "strata: startCoalescing on a process group that was shut down or aborted");
  check(strataGroupStart(), "startCoalescing");
  coalesced_ = std::make_shared<Call>();
  coalesced_->comm = comm_;
  coalescedOnDevice_ = false;
  uint64_t seq;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    seq = seq_ + 1;
  }
  coalescedWork_ = c10::make_intrusive<StrataWork>(rank_, c10d::OpType::COALESCED, seq, "strata:coalesced",
                                                   std::vector<at::Tensor>{}, std::vector<c10::Device>{});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupStrata::endCoalescing() {
  TORCH_CHECK(coalesced_, "strata: endCoalescing without startCoalescing");
  std::shared_ptr<Call> call = std::exchange(coalesced_, nullptr);
  c10::intrusive_ptr<StrataWork> work = std::exchange(coalescedWork_, nullptr);
  if (coalescedOnDevice_) {
    coalescedOnDevice_ = false;
    // A device group: enqueued now on the communication stream of the device its calls used.
    const strataResult_t r = strataGroupEnd();
    call->destroyOps();
    if (r != strataSuccess) throwResult(r, "endCoalescing");
    const std::vector<at::Tensor> outputs = work->result();
    TORCH_CHECK(!outputs.empty(), "strata: endCoalescing: a device group without tensors");
    const c10::Device device = outputs.front().device();
    DeviceStreams& streams = streamsFor(device);
    const c10::Stream commStream = streams.comm(device);
    {
      auto current = streams.makeCurrent(commStream);
      for (auto& copyBack : call->post) copyBack();
      for (const auto& t : call->keep) streams.recordTensor(t, commStream);
    }
    return deviceWork(c10d::OpType::COALESCED, work->getSequencenumber(), "strata:coalesced", outputs, streams, device,
                      commStream);
  }
  endHostGroup(work, std::move(call), "coalesced calls");
  return work;
}

}  // namespace strata::torch_backend
