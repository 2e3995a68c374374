// ProcessGroupStrata's collectives over Strata's own: all-reduce (dense, coalesced, and sparse as gloo does it),
// broadcast, reduce, the all-gathers, the reduce-scatters; the barrier, and the monitored barrier through the store.
#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "process_group_call.h"
#include "process_group_strata.h"
#include "tensor_checks.h"
#include "tensor_wire.h"

namespace strata::torch_backend {

c10::intrusive_ptr<c10d::Work> ProcessGroupStrata::allreduce(std::vector<at::Tensor>& tensors,
                                                             const c10d::AllreduceOptions& opts) {
  requireOne(tensors, "all_reduce");
  if (tensors[0].is_sparse()) return allreduceSparse(tensors[0], opts);
  return allreduce_coalesced(tensors, c10d::AllreduceCoalescedOptions{opts});
}

at::Tensor ProcessGroupStrata::gatherFromAll(const at::Tensor& t) {
  const at::Tensor in = t.contiguous();
  std::vector<int64_t> shape{size_};
  shape.insert(shape.end(), in.sizes().begin(), in.sizes().end());
  at::Tensor out = at::empty(shape, in.options());
  const Wire a = wireOf(in, false, "all_reduce (sparse)"), b = wireOf(out, false, "all_reduce (sparse)");
  check(strataAllGather(a.data, b.data, a.count, a.dtype, comm_, nullptr), "all_reduce (sparse)");
  return out;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupStrata::allreduceSparse(at::Tensor& tensor,
                                                                   const c10d::AllreduceOptions& opts) {
  // As gloo does it: every rank's indices and values are gathered (padded to the largest count) and summed
  // locally into a coalesced result, which replaces the tensor. Blocking; the Work is complete on return.
  TORCH_CHECK(opts.reduceOp.op_ == c10d::ReduceOp::SUM, "strata: all_reduce of sparse tensors serves SUM only, not ",
              opName(opts.reduceOp.op_));
  TORCH_CHECK(tensor.is_cpu(), "strata: all_reduce of sparse tensors serves CPU tensors only");
  TORCH_CHECK(comm_ != nullptr, "strata: all_reduce on a process group that was shut down or aborted");
  const uint64_t seq = nextSequenceNumber();
  const at::Tensor input = tensor.coalesce();
  const at::Tensor indices = input._indices(), values = input._values();
  const int64_t nnz = input._nnz();
  const at::Tensor counts = gatherFromAll(at::full({1}, nnz, at::kLong));
  const int64_t most = counts.max().item<int64_t>();
  at::Tensor paddedIndices = at::zeros({indices.size(0), most}, indices.options());
  std::vector<int64_t> valueShape{most};
  valueShape.insert(valueShape.end(), values.sizes().begin() + 1, values.sizes().end());
  at::Tensor paddedValues = at::zeros(valueShape, values.options());
  paddedIndices.narrow(1, 0, nnz).copy_(indices);
  paddedValues.narrow(0, 0, nnz).copy_(values);
  const at::Tensor allIndices = gatherFromAll(paddedIndices), allValues = gatherFromAll(paddedValues);
  at::Tensor sum = at::zeros(input.sizes(), input.options());
  for (int r = 0; r < size_; ++r) {
    const int64_t n = counts[r][0].item<int64_t>();
    sum = sum + at::sparse_coo_tensor(allIndices[r].narrow(1, 0, n), allValues[r].narrow(0, 0, n), input.sizes());
  }
  tensor.copy_(sum.coalesce());
  auto work = c10::make_intrusive<StrataWork>(rank_, c10d::OpType::ALLREDUCE, seq, "strata:all_reduce_sparse",
                                              std::vector<at::Tensor>{tensor}, std::vector<c10::Device>{});
  work->complete(nullptr);
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupStrata::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                                       const c10d::AllreduceCoalescedOptions& opts) {
  for (const auto& t : tensors) {
    TORCH_CHECK(!t.is_sparse(), "strata: all_reduce of sparse tensors is not served; use a dense tensor");
  }
  const auto opType = tensors.size() == 1 ? c10d::OpType::ALLREDUCE : c10d::OpType::ALLREDUCE_COALESCED;
  return run(opType, "strata:all_reduce", opts.asyncOp, tensors, tensors, [&](Call& c) {
    for (const auto& t : tensors) {
      const Wire w = c.write(t, true, "all_reduce");
      const strataRedOp_t op = c.op(opts.reduceOp, t.scalar_type(), "all_reduce");
      check(strataAllReduce(w.data, w.data, w.count, w.dtype, op, comm_, c.stream), "all_reduce");
    }
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupStrata::broadcast(std::vector<at::Tensor>& tensors,
                                                             const c10d::BroadcastOptions& opts) {
  requireOne(tensors, "broadcast");
  TORCH_CHECK(opts.rootTensor == 0, "strata: broadcast: rootTensor must be 0 (one tensor per rank)");
  TORCH_CHECK(opts.rootRank >= 0 && opts.rootRank < size_, "strata: broadcast: root rank ", opts.rootRank,
              " is outside the group of ", size_);
  return run(c10d::OpType::BROADCAST, "strata:broadcast", opts.asyncOp, tensors, tensors, [&](Call& c) {
    const Wire w = c.write(tensors[0], false, "broadcast");
    check(strataBroadcast(w.data, w.data, w.count, w.dtype, static_cast<int>(opts.rootRank), comm_, c.stream),
          "broadcast");
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupStrata::reduce(std::vector<at::Tensor>& tensors,
                                                          const c10d::ReduceOptions& opts) {
  requireOne(tensors, "reduce");
  TORCH_CHECK(opts.rootRank >= 0 && opts.rootRank < size_, "strata: reduce: root rank ", opts.rootRank,
              " is outside the group of ", size_);
  return run(c10d::OpType::REDUCE, "strata:reduce", opts.asyncOp, tensors, tensors, [&](Call& c) {
    const at::Tensor& t = tensors[0];
    const Wire w = c.write(t, true, "reduce");
    const strataRedOp_t op = c.op(opts.reduceOp, t.scalar_type(), "reduce");
    check(strataReduce(w.data, w.data, w.count, w.dtype, op, static_cast<int>(opts.rootRank), comm_, c.stream),
          "reduce");
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupStrata::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                             std::vector<at::Tensor>& inputs,
                                                             const c10d::AllgatherOptions& opts) {
  requireOne(inputs, "all_gather");
  TORCH_CHECK(outputs.size() == 1, "strata: all_gather takes one output list per rank, got ", outputs.size());
  std::vector<std::vector<at::Tensor>> perRank;
  for (const auto& t : outputs[0]) perRank.push_back({t});
  return allgather_coalesced(perRank, inputs, opts);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupStrata::allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                                       std::vector<at::Tensor>& inputs,
                                                                       const c10d::AllgatherOptions& opts) {
  // outputs[r][i] receives rank r's inputs[i].
  TORCH_CHECK(static_cast<int>(outputs.size()) == size_, "strata: all_gather: ", outputs.size(),
              " output lists for a group of ", size_);
  for (const auto& list : outputs) {
    TORCH_CHECK(list.size() == inputs.size(), "strata: all_gather: an output list of ", list.size(), " tensors for ",
                inputs.size(), " inputs");
    for (size_t i = 0; i < inputs.size(); ++i) {
      requireSameType(list[i], inputs[i], "all_gather");
      TORCH_CHECK(list[i].numel() == inputs[i].numel(), "strata: all_gather: an output of ", list[i].numel(),
                  " elements for an input of ", inputs[i].numel());
    }
  }
  std::vector<at::Tensor> all = flatten(outputs);
  std::vector<at::Tensor> touched = all;
  touched.insert(touched.end(), inputs.begin(), inputs.end());
  return run(c10d::OpType::ALLGATHER, "strata:all_gather", opts.asyncOp, all, touched, [&](Call& c) {
    for (size_t i = 0; i < inputs.size(); ++i) {
      const Wire in = c.read(inputs[i], false, "all_gather");
      // Gathered into one buffer, then each rank's block copied to its own output tensor.
      at::Tensor flat = at::empty({static_cast<int64_t>(size_) * inputs[i].numel()}, inputs[i].options());
      c.keep.push_back(flat);
      const Wire out = wireOf(flat, false, "all_gather");
      check(strataAllGather(in.data, out.data, in.count, in.dtype, comm_, c.stream), "all_gather");
      const int64_t n = inputs[i].numel();
      for (int r = 0; r < size_; ++r) {
        at::Tensor dst = outputs[r][i];
        c.post.push_back([dst, flat, r, n]() mutable { dst.copy_(flat.narrow(0, r * n, n).view(dst.sizes())); });
      }
    }
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupStrata::all_gather_single(at::Tensor& output, at::Tensor& input,
                                                                     const c10d::AllgatherOptions& opts) {
  std::vector<at::Tensor> outputs{output}, inputs{input};
  return all_gather_single_coalesced(outputs, inputs, opts);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupStrata::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                                   const c10d::AllgatherOptions& opts) {
  return all_gather_single(output, input, opts);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupStrata::allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                                   std::vector<at::Tensor>& inputs,
                                                                                   const c10d::AllgatherOptions& opts) {
  return all_gather_single_coalesced(outputs, inputs, opts);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupStrata::all_gather_single_coalesced(std::vector<at::Tensor>& outputs,
                                                                               std::vector<at::Tensor>& inputs,
                                                                               const c10d::AllgatherOptions& opts) {
  TORCH_CHECK(outputs.size() == inputs.size(), "strata: all_gather_into_tensor: ", outputs.size(), " outputs for ",
              inputs.size(), " inputs");
  for (size_t i = 0; i < inputs.size(); ++i) {
    requireSameType(outputs[i], inputs[i], "all_gather_into_tensor");
    TORCH_CHECK(outputs[i].numel() == size_ * inputs[i].numel(), "strata: all_gather_into_tensor: the output has ",
                outputs[i].numel(), " elements; it must have group size (", size_, ") x the input's ",
                inputs[i].numel());
  }
  std::vector<at::Tensor> touched = outputs;
  touched.insert(touched.end(), inputs.begin(), inputs.end());
  return run(
      c10d::OpType::_ALLGATHER_BASE, "strata:all_gather_into_tensor", opts.asyncOp, outputs, touched, [&](Call& c) {
        for (size_t i = 0; i < inputs.size(); ++i) {
          const Wire in = c.read(inputs[i], false, "all_gather_into_tensor");
          const Wire out = c.write(outputs[i], false, "all_gather_into_tensor");
          check(strataAllGather(in.data, out.data, in.count, in.dtype, comm_, c.stream), "all_gather_into_tensor");
        }
      });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupStrata::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                                  std::vector<std::vector<at::Tensor>>& inputs,
                                                                  const c10d::ReduceScatterOptions& opts) {
  requireOne(outputs, "reduce_scatter");
  TORCH_CHECK(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == size_, "strata: reduce_scatter takes ", size_,
              " input tensors (one per rank)");
  const at::Tensor& out = outputs[0];
  for (const auto& t : inputs[0]) {
    requireSameType(out, t, "reduce_scatter");
    TORCH_CHECK(t.numel() == out.numel(), "strata: reduce_scatter: an input of ", t.numel(),
                " elements for an output of ", out.numel());
  }
  std::vector<at::Tensor> touched = flatten(inputs);
  touched.push_back(out);
  return run(c10d::OpType::REDUCE_SCATTER, "strata:reduce_scatter", opts.asyncOp, outputs, touched, [&](Call& c) {
    std::vector<at::Tensor> parts;
    for (const auto& t : inputs[0]) parts.push_back(t.reshape({-1}));
    at::Tensor flat = at::cat(parts);
    c.keep.push_back(flat);
    const Wire in = wireOf(flat, true, "reduce_scatter");
    const Wire w = c.write(out, true, "reduce_scatter");
    const strataRedOp_t op = c.op(opts.reduceOp, out.scalar_type(), "reduce_scatter");
    check(strataReduceScatter(in.data, w.data, w.count, w.dtype, op, comm_, c.stream), "reduce_scatter");
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupStrata::reduce_scatter_single(at::Tensor& output, at::Tensor& input,
                                                                         const c10d::ReduceScatterOptions& opts) {
  std::vector<at::Tensor> outputs{output}, inputs{input};
  return reduce_scatter_single_coalesced(outputs, inputs, opts);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupStrata::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                        const c10d::ReduceScatterOptions& opts) {
  return reduce_scatter_single(output, input, opts);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupStrata::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs, const c10d::ReduceScatterOptions& opts) {
  return reduce_scatter_single_coalesced(outputs, inputs, opts);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupStrata::reduce_scatter_single_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs, const c10d::ReduceScatterOptions& opts) {
  TORCH_CHECK(outputs.size() == inputs.size(), "strata: reduce_scatter_tensor: ", outputs.size(), " outputs for ",
              inputs.size(), " inputs");
  for (size_t i = 0; i < inputs.size(); ++i) {
    requireSameType(outputs[i], inputs[i], "reduce_scatter_tensor");
    TORCH_CHECK(inputs[i].numel() == size_ * outputs[i].numel(), "strata: reduce_scatter_tensor: the input has ",
                inputs[i].numel(), " elements; it must have group size (", size_, ") x the output's ",
                outputs[i].numel());
  }
  std::vector<at::Tensor> touched = outputs;
  touched.insert(touched.end(), inputs.begin(), inputs.end());
  return run(c10d::OpType::_REDUCE_SCATTER_BASE, "strata:reduce_scatter_tensor", opts.asyncOp, outputs, touched,
             [&](Call& c) {
               for (size_t i = 0; i < inputs.size(); ++i) {
                 const Wire in = c.read(inputs[i], true, "reduce_scatter_tensor");
                 const Wire out = c.write(outputs[i], true, "reduce_scatter_tensor");
                 const strataRedOp_t op = c.op(opts.reduceOp, outputs[i].scalar_type(), "reduce_scatter_tensor");
                 check(strataReduceScatter(in.data, out.data, out.count, out.dtype, op, comm_, c.stream),
                       "reduce_scatter_tensor");
               }
             });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupStrata::barrier(const c10d::BarrierOptions& opts) {
  return run(c10d::OpType::BARRIER, "strata:barrier", opts.asyncOp, {}, {},
             [&](Call&) { check(strataBarrier(comm_, nullptr), "barrier"); });
}

void ProcessGroupStrata::monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks) {
  // Through the group's store, as gloo's behaves: every other rank checks in and waits for rank 0's verdict;
  // rank 0 waits for each within the timeout, names the first rank missing (or all, with waitAllRanks), and
  // tells the others, which then fail at once instead of at their own timeout.
  const std::chrono::milliseconds timeout = opts.timeout == c10d::kUnsetTimeout ? options_->timeout : opts.timeout;
  const std::string prefix = "strata/monitored_barrier/" + std::to_string(++monitoredBarriers_) + "/";
  const std::string verdictKey = prefix + "verdict";
  if (rank_ != 0) {
    store_->set(prefix + std::to_string(rank_), std::vector<uint8_t>{1});
    const std::string reached = "Rank " + std::to_string(rank_) +
                                " successfully reached monitoredBarrier, but received errors while waiting for "
                                "send/recv from rank 0. Please check rank 0 logs for faulty rank.";
    try {
      store_->wait({verdictKey}, timeout);
    } catch (const c10::Error&) {
      TORCH_CHECK(false, reached, " (no word from rank 0 within ", timeout.count(), " ms)");
    }
    const std::vector<uint8_t> verdict = store_->get(verdictKey);
    TORCH_CHECK(verdict.size() == 1 && verdict[0] == 1, reached);
    return;
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::vector<int> missing;
  for (int r = 1; r < size_; ++r) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0 && !waitAllRanks) {
      store_->set(verdictKey, std::vector<uint8_t>{0});
      TORCH_CHECK(false, "[Rank 0]: Rank 0 timed out in monitoredBarrier after ", timeout.count(), " ms");
    }
    try {
      store_->wait({prefix + std::to_string(r)}, std::max(left, std::chrono::milliseconds(1)));
    } catch (const c10::Error&) {
      missing.push_back(r);
      if (!waitAllRanks) break;
    }
  }
  if (!missing.empty()) {
    store_->set(verdictKey, std::vector<uint8_t>{0});
    std::string names;
    for (int r : missing) names += (names.empty() ? "" : ", ") + std::to_string(r);
    TORCH_CHECK(false, "[Rank 0]: ", missing.size() == 1 ? "Rank " : "Ranks ", names,
                " failed to pass monitoredBarrier in ", timeout.count(), " ms");
  }
  store_->set(verdictKey, std::vector<uint8_t>{1});
}

}  // namespace strata::torch_backend
