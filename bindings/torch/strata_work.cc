#include "strata_work.h"

#include <ATen/core/jit_type.h>

#include <string>
#include <utility>

#include "result_error.h"

namespace strata::torch_backend {

StrataWork::StrataWork(int rank, c10d::OpType opType, uint64_t seq, const char* profilingTitle,
                       std::vector<at::Tensor> outputs, std::vector<c10::Device> futureDevices)
    : Work(rank, opType, profilingTitle),
      seq_(seq),
      outputs_(std::move(outputs)),
      future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()),
                                                       std::move(futureDevices))) {}

void StrataWork::addOutputs(const std::vector<at::Tensor>& outputs) {
  outputs_.insert(outputs_.end(), outputs.begin(), outputs.end());
}

bool StrataWork::isCompleted() {
  if (end_) return asyncError() != nullptr || end_->query();
  std::lock_guard<std::mutex> lock(mutex_);
  return completed_;
}

bool StrataWork::isSuccess() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return exception_ == nullptr;
}

std::exception_ptr StrataWork::exception() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return exception_;
}

std::vector<at::Tensor> StrataWork::result() { return outputs_; }

int StrataWork::sourceRank() const { return source_ ? *source_ : c10d::Work::sourceRank(); }

void StrataWork::synchronize() {
  if (end_) end_->block(streams_->current(*device_));
}

bool StrataWork::wait(std::chrono::milliseconds timeout) {
  if (end_) {
    // Stream-ordered: the caller's stream waits for the collective; the host goes on (as ProcessGroupNCCL).
    // What failed since the call was enqueued is raised here, not only through getError() and the next call.
    if (std::exception_ptr error = asyncError()) std::rethrow_exception(error);
    synchronize();
    return true;
  }
  std::unique_lock<std::mutex> lock(mutex_);
  if (timeout == kNoTimeout) {
    cv_.wait(lock, [&] { return completed_; });
  } else if (!cv_.wait_for(lock, timeout, [&] { return completed_; })) {
    TORCH_CHECK(false, "strata: Timed out after ", timeout.count(), " ms waiting for ", c10d::opTypeToString(opType_),
                " (sequence number ", seq_, ") on rank ", rank_, "; it is still running");
  }
  if (exception_) std::rethrow_exception(exception_);
  return true;
}

c10::intrusive_ptr<c10::ivalue::Future> StrataWork::getFuture() { return future_; }

std::exception_ptr StrataWork::asyncError() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (exception_) return exception_;
  }
  strataResult_t async = strataSuccess;
  if (comm_ == nullptr || strataCommGetAsyncError(comm_, &async) != strataSuccess || async == strataSuccess)
    return nullptr;
  const std::string what = std::string(c10d::opTypeToString(opType_)) + " (sequence number " + std::to_string(seq_) +
                           ") on rank " + std::to_string(rank_);
  std::exception_ptr error = resultError(async, what, strataGetLastError(comm_));
  std::lock_guard<std::mutex> lock(mutex_);
  if (!exception_) exception_ = error;
  return exception_;
}

void StrataWork::complete(std::exception_ptr exception) {
  finish(exception);
  if (exception) {
    future_->setError(exception);
  } else {
    future_->markCompleted(c10::IValue(outputs_));
  }
}

void StrataWork::completeOnStream(std::shared_ptr<DeviceEvent> end, DeviceStreams* streams, c10::Device device,
                                  const c10::Stream& commStream, strataComm_t comm) {
  end_ = std::move(end);
  comm_ = comm;
  streams_ = streams;
  device_ = device;
  {
    // The Future records its own events on the current streams of its devices: make that the comm stream.
    auto current = streams->makeCurrent(commStream);
    future_->markCompleted(c10::IValue(outputs_));
  }
  finish(nullptr);
}

}  // namespace strata::torch_backend
