// The torch Work of one Strata group: what a torch.distributed call returns when the "strata" backend runs it.
#pragma once

#include <ATen/core/ivalue.h>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <vector>

#include "device_streams.h"
#include "strata/strata.h"

namespace strata::torch_backend {

/// Host tensors: the group runs asynchronously in Strata (strataGroupEndAsync) and the backend's completion
/// thread finishes the Work (copies back, then isCompleted() true, the Future set) when Strata reports the end.
/// Device tensors: the group was enqueued on the communication stream; the Work is complete when the end event
/// is, and wait() / synchronize() make the caller's current stream wait for that event, not the host. Errors found
/// after the call returned are the communicator's asynchronous error: wait() raises it, isCompleted() reports it
/// (as ProcessGroupNCCL's Work does with ncclCommGetAsyncError).
class StrataWork : public c10d::Work {
 public:
  StrataWork(int rank, c10d::OpType opType, uint64_t seq, const char* profilingTitle, std::vector<at::Tensor> outputs,
             std::vector<c10::Device> futureDevices);

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  std::vector<at::Tensor> result() override;
  void synchronize() override;
  bool wait(std::chrono::milliseconds timeout) override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  uint64_t getSequencenumber() const override { return seq_; }
  /// recv from any source: the rank the message came from (-1 until the Work completes); other Works throw, as
  /// c10d::Work does.
  int sourceRank() const override;

  /// recv from any source: where strataRecvAny stores the sender's rank, read by sourceRank().
  void setSource(std::shared_ptr<const int> source) { source_ = std::move(source); }

  /// Adds outputs (a coalesced group's later calls) before the Work is launched.
  void addOutputs(const std::vector<at::Tensor>& outputs);
  /// Host work: completes the Work (exception null on success) and its Future.
  void complete(std::exception_ptr exception);
  /// Device work: the end event and the streams model; the Work and its Future complete now (stream-ordered).
  void completeOnStream(std::shared_ptr<DeviceEvent> end, DeviceStreams* streams, c10::Device device,
                        const c10::Stream& commStream, strataComm_t comm);

 private:
  const uint64_t seq_;
  std::vector<at::Tensor> outputs_;
  std::shared_ptr<const int> source_;  // recv from any source only
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  // device work only
  std::shared_ptr<DeviceEvent> end_;
  DeviceStreams* streams_ = nullptr;
  std::optional<c10::Device> device_;
  strataComm_t comm_ = nullptr;  // a handle no longer live is refused by Strata, never touched

  /// Device work: records the communicator's asynchronous error as this Work's exception; returns it (or null).
  std::exception_ptr asyncError();
};

}  // namespace strata::torch_backend
