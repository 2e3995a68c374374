// ProcessGroupStrata: torch.distributed's "strata" backend, a c10d::Backend over Strata's C API, as
// ProcessGroupNCCL, ProcessGroupUCC and oneCCL's torch-ccl are over theirs.
//
// Host tensors run asynchronously: every call is one Strata group ended with strataGroupEndAsync, and one
// completion thread per backend waits for the groups in issue order (the order a communicator completes
// them), copies results back where a tensor had to be staged, and completes the Work and its Future. Device
// tensors follow ProcessGroupNCCL's stream model (device_streams.h). startCoalescing/endCoalescing make the
// calls between them one Strata group (batch_isend_irecv, DDP's and FSDP's coalesced calls); split() is
// strataCommSplit (no new rendezvous) and shrink() strataCommShrink.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <vector>

#include "device_streams.h"
#include "strata/strata.h"
#include "strata_work.h"

namespace strata::torch_backend {

class ProcessGroupStrata : public c10d::Backend {
 public:
  struct Options : c10d::Backend::Options {
    explicit Options(std::chrono::milliseconds timeout = kBackendDefaultTimeout)
        : Backend::Options("strata", timeout) {}
    c10::intrusive_ptr<c10d::Backend::Options> clone() const override { return c10::make_intrusive<Options>(*this); }
  };

  /// Joins the group's communicator: rank 0 makes a unique id and puts it in `store`, every rank reads it.
  /// The options' timeout becomes the communicator's deadline (STRATA_TIMEOUT_MS unless that is set).
  ProcessGroupStrata(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                     c10::intrusive_ptr<Options> options);
  /// Takes over a communicator made by a split or a shrink.
  ProcessGroupStrata(strataComm_t comm, c10::intrusive_ptr<c10d::Store> store, c10::intrusive_ptr<Options> options);
  ~ProcessGroupStrata() override;

  /// Test hook: device work goes through `streams` (RecordingDeviceStreams) and every tensor, host memory
  /// included, takes the device path.
  void useStreamsForEveryTensor(std::shared_ptr<DeviceStreams> streams);

  const std::string getBackendName() const override { return "strata"; }
  c10::intrusive_ptr<c10d::Backend::Options> getBackendOptions() override { return options_; }
  bool supportsSplitting() const override { return true; }
  bool supportsCoalescing() const override { return true; }
  bool supportsShrinking() const override { return true; }
  uint64_t getSequenceNumberForGroup() override;
  void setSequenceNumberForGroup() override {}
  c10d::ErrorType getError() override;

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> all_gather_single(at::Tensor& output, at::Tensor& input,
                                                   const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> all_gather_single_coalesced(std::vector<at::Tensor>& outputs,
                                                             std::vector<at::Tensor>& inputs,
                                                             const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_single(at::Tensor& output, at::Tensor& input,
                                                       const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_single_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> all_to_all_single(at::Tensor& output, at::Tensor& input,
                                                   std::vector<int64_t>& outputSplitSizes,
                                                   std::vector<int64_t>& inputSplitSizes,
                                                   const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& outputSplitSizes,
                                               std::vector<int64_t>& inputSplitSizes,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dstRank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int srcRank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks) override;

  void startCoalescing() override;
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;

  c10::intrusive_ptr<c10d::Backend> split(const c10::intrusive_ptr<c10d::Store>& store, const std::vector<int>& ranks,
                                          const c10::intrusive_ptr<c10d::Backend::Options>& opts) override;
  /// The split call of a rank that joins no new group (torch calls it on the ranks outside a new_group).
  void performNocolorSplit();
  c10::intrusive_ptr<c10d::Backend> shrink(const std::vector<int64_t>& ranksToExclude, int shrinkFlags,
                                           const c10::intrusive_ptr<c10d::Backend::Options>& optsOverride) override;

  void shutdown() override;
  void abort() override;

  strataComm_t comm() const { return comm_; }

 private:
  struct Call;  // one torch call's Strata calls, staged tensors and copies back (process_group_call.h)
  struct Launch;

  void startCompletionThread();
  void completionLoop();
  /// Runs `issue` (which makes Strata calls) as one group, or into the open coalesced group; a host group of a
  /// blocking call (asyncOp false) runs on the caller's thread.
  c10::intrusive_ptr<c10d::Work> run(c10d::OpType opType, const char* name, bool asyncOp,
                                     std::vector<at::Tensor> outputs, const std::vector<at::Tensor>& tensors,
                                     const std::function<void(Call&)>& issue);
  c10::intrusive_ptr<c10d::Work> runDevice(c10d::OpType opType, const char* name, std::vector<at::Tensor> outputs,
                                           const std::vector<at::Tensor>& tensors,
                                           const std::function<void(Call&)>& issue);
  c10::intrusive_ptr<c10d::Work> allreduceSparse(at::Tensor& tensor, const c10d::AllreduceOptions& opts);
  /// Blocking all-gather of a host tensor: [group size, *t.shape].
  at::Tensor gatherFromAll(const at::Tensor& t);
  /// Ends the open host group (strataGroupEndAsync) and hands it to the completion thread, which completes `work`.
  void endHostGroup(const c10::intrusive_ptr<StrataWork>& work, std::shared_ptr<Call> call, const char* name);
  /// The Work of device calls just enqueued on `commStream`: complete in stream order, at its end event.
  c10::intrusive_ptr<StrataWork> deviceWork(c10d::OpType opType, uint64_t seq, const char* name,
                                            std::vector<at::Tensor> outputs, DeviceStreams& streams,
                                            const c10::Device& device, const c10::Stream& commStream);
  uint64_t nextSequenceNumber();
  bool usesDevicePath(const std::vector<at::Tensor>& tensors) const;
  DeviceStreams& streamsFor(const c10::Device& device);
  [[noreturn]] void throwResult(strataResult_t result, const std::string& what) const;
  void check(strataResult_t result, const char* what) const;
  int globalRank() const;
  /// gather's outputs and scatter's inputs: on the root one list of a tensor per rank shaped like `like`, none
  /// elsewhere.
  void requireRootList(const std::vector<std::vector<at::Tensor>>& lists, const at::Tensor& like, int root,
                       const char* what, const char* which) const;

  strataComm_t comm_ = nullptr;
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<Options> options_;
  uint64_t seq_ = 0;
  uint64_t monitoredBarriers_ = 0;
  int splits_ = 0;

  // Coalescing: the open group's Work and its calls.
  std::shared_ptr<Call> coalesced_;
  c10::intrusive_ptr<StrataWork> coalescedWork_;
  bool coalescedOnDevice_ = false;

  // Device path.
  std::shared_ptr<DeviceStreams> streams_;
  bool everyTensorOnStreams_ = false;

  // Completion thread (host work).
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Launch>> pending_;
  bool stopping_ = false;
  std::thread completer_;
};

}  // namespace strata::torch_backend
