// ProcessGroupStrata's calls made of point-to-point messages: all-to-all (even and uneven splits, and the list form),
// gather and scatter, send and receive; each as one Strata group of sends and receives.
#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <numeric>
#include <vector>

#include "process_group_call.h"
#include "process_group_strata.h"
#include "tensor_checks.h"
#include "tensor_wire.h"

namespace strata::torch_backend {

c10::intrusive_ptr<c10d::Work> ProcessGroupStrata::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                                 std::vector<int64_t>& outputSplitSizes,
                                                                 std::vector<int64_t>& inputSplitSizes,
                                                                 const c10d::AllToAllOptions& opts) {
  return all_to_all_single(output, input, outputSplitSizes, inputSplitSizes, opts);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupStrata::all_to_all_single(at::Tensor& output, at::Tensor& input,
                                                                     std::vector<int64_t>& outputSplitSizes,
                                                                     std::vector<int64_t>& inputSplitSizes,
                                                                     const c10d::AllToAllOptions& opts) {
  requireSameType(output, input, "all_to_all_single");
  std::vector<at::Tensor> outputs{output}, touched{output, input};
  if (outputSplitSizes.empty() && inputSplitSizes.empty()) {
    TORCH_CHECK(input.numel() == output.numel() && input.numel() % size_ == 0, "strata: all_to_all_single: input (",
                input.numel(), " elements) and output (", output.numel(),
                ") must be equal and divisible by the group size ", size_);
    return run(c10d::OpType::ALLTOALL_BASE, "strata:all_to_all_single", opts.asyncOp, outputs, touched, [&](Call& c) {
      const Wire in = c.read(input, false, "all_to_all_single");
      const Wire out = c.write(output, false, "all_to_all_single");
      check(strataAllToAll(in.data, out.data, in.count / size_, in.dtype, comm_, c.stream), "all_to_all_single");
    });
  }
  // Uneven splits, in rows of dim 0: one send and one receive per peer, in one group.
  auto splits = [&](std::vector<int64_t> given, const at::Tensor& t, const char* which) {
    const int64_t rows = t.dim() == 0 ? 1 : t.size(0);
    if (given.empty()) {
      TORCH_CHECK(rows % size_ == 0, "strata: all_to_all_single: ", which, " has ", rows,
                  " rows, not divisible by the group size ", size_);
      given.assign(size_, rows / size_);
    }
    TORCH_CHECK(static_cast<int>(given.size()) == size_, "strata: all_to_all_single: ", given.size(), " ", which,
                " split sizes for a group of ", size_);
    TORCH_CHECK(std::accumulate(given.begin(), given.end(), int64_t{0}) == rows, "strata: all_to_all_single: the ",
                which, " split sizes add up to ", std::accumulate(given.begin(), given.end(), int64_t{0}), ", not its ",
                rows, " rows");
    for (int64_t s : given) TORCH_CHECK(s >= 0, "strata: all_to_all_single: a negative split size");
    return given;
  };
  const std::vector<int64_t> ins = splits(inputSplitSizes, input, "input");
  const std::vector<int64_t> outs = splits(outputSplitSizes, output, "output");
  return run(c10d::OpType::ALLTOALL_BASE, "strata:all_to_all_single", opts.asyncOp, outputs, touched, [&](Call& c) {
    const Wire in = c.read(input, false, "all_to_all_single");
    const Wire out = c.write(output, false, "all_to_all_single");
    // Units per row: elements, or bytes where the dtype travels as bytes.
    const int64_t inRows = input.dim() ? input.size(0) : 1, outRows = output.dim() ? output.size(0) : 1;
    const size_t inRow = inRows ? in.count / inRows : 0, outRow = outRows ? out.count / outRows : 0;
    const size_t unit = input.numel() ? in.count / input.numel() : 1;  // 1, or the element size for bytes
    const size_t scale = input.element_size() / unit;                  // bytes per unit
    auto* inBytes = static_cast<char*>(in.data);
    auto* outBytes = static_cast<char*>(out.data);
    size_t inOff = 0, outOff = 0;
    int64_t inRowOff = 0, outRowOff = 0;
    for (int j = 0; j < size_; ++j) {
      const size_t sendCount = ins[j] * inRow, recvCount = outs[j] * outRow;
      if (j == rank_) {
        TORCH_CHECK(sendCount == recvCount, "strata: all_to_all_single: this rank sends itself ", ins[j],
                    " rows but expects ", outs[j]);
        // A tensor copy: on the communication stream for device tensors, at once for host ones.
        if (sendCount) out.tensor.narrow(0, outRowOff, outs[j]).copy_(in.tensor.narrow(0, inRowOff, ins[j]));
      } else {
        if (sendCount) check(strataSend(inBytes + inOff * scale, sendCount, in.dtype, j, comm_, c.stream), "send");
        if (recvCount) {
          check(strataRecv(outBytes + outOff * scale, recvCount, out.dtype, j, comm_, c.stream), "recv");
        }
      }
      inOff += sendCount;
      outOff += recvCount;
      inRowOff += ins[j];
      outRowOff += outs[j];
    }
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupStrata::alltoall(std::vector<at::Tensor>& outputs,
                                                            std::vector<at::Tensor>& inputs,
                                                            const c10d::AllToAllOptions& opts) {
  TORCH_CHECK(static_cast<int>(outputs.size()) == size_ && static_cast<int>(inputs.size()) == size_,
              "strata: all_to_all takes ", size_, " input and output tensors (one per rank), got ", inputs.size(),
              " and ", outputs.size());
  for (int j = 0; j < size_; ++j) {
    requireSameType(outputs[j], inputs[j], "all_to_all");
  }
  TORCH_CHECK(outputs[rank_].numel() == inputs[rank_].numel(), "strata: all_to_all: this rank sends itself ",
              inputs[rank_].numel(), " elements but expects ", outputs[rank_].numel());
  std::vector<at::Tensor> touched = outputs;
  touched.insert(touched.end(), inputs.begin(), inputs.end());
  return run(c10d::OpType::ALLTOALL, "strata:all_to_all", opts.asyncOp, outputs, touched, [&](Call& c) {
    for (int j = 0; j < size_; ++j) {
      const Wire in = c.read(inputs[j], false, "all_to_all");
      const Wire out = c.write(outputs[j], false, "all_to_all");
      if (j == rank_) {
        out.tensor.view(-1).copy_(in.tensor.view(-1));
        continue;
      }
      if (in.count) check(strataSend(in.data, in.count, in.dtype, j, comm_, c.stream), "send");
      if (out.count) check(strataRecv(out.data, out.count, out.dtype, j, comm_, c.stream), "recv");
    }
  });
}

void ProcessGroupStrata::requireRootList(const std::vector<std::vector<at::Tensor>>& lists, const at::Tensor& like,
                                         int root, const char* what, const char* which) const {
  TORCH_CHECK(root >= 0 && root < size_, "strata: ", what, ": root rank ", root, " is outside the group of ", size_);
  if (rank_ != root) {
    TORCH_CHECK(lists.empty() || (lists.size() == 1 && lists[0].empty()), "strata: ", what, ": only the root passes ",
                which, " tensors");
    return;
  }
  TORCH_CHECK(lists.size() == 1 && static_cast<int>(lists[0].size()) == size_, "strata: ", what, ": the root takes ",
              size_, " ", which, " tensors (one per rank)");
  for (const auto& t : lists[0]) {
    requireSameType(t, like, what);
    TORCH_CHECK(t.numel() == like.numel(), "strata: ", what, ": an ", which, " of ", t.numel(),
                " elements where the other side has ", like.numel());
  }
}

c10::intrusive_ptr<c10d::Work> ProcessGroupStrata::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                          std::vector<at::Tensor>& inputs,
                                                          const c10d::GatherOptions& opts) {
  requireOne(inputs, "gather");
  const int root = static_cast<int>(opts.rootRank);
  requireRootList(outputs, inputs[0], root, "gather", "output");
  std::vector<at::Tensor> all = flatten(outputs);
  std::vector<at::Tensor> touched = all;
  touched.push_back(inputs[0]);
  return run(c10d::OpType::GATHER, "strata:gather", opts.asyncOp, all, touched, [&](Call& c) {
    const Wire in = c.read(inputs[0], false, "gather");
    if (rank_ != root) {
      if (in.count) check(strataSend(in.data, in.count, in.dtype, root, comm_, c.stream), "send");
      return;
    }
    for (int j = 0; j < size_; ++j) {
      at::Tensor dst = outputs[0][j];
      if (j == rank_) {
        at::Tensor src = inputs[0];
        c.post.insert(c.post.begin(), [dst, src]() mutable { dst.copy_(src.view(dst.sizes())); });
        continue;
      }
      const Wire out = c.write(dst, false, "gather");
      if (out.count) check(strataRecv(out.data, out.count, out.dtype, j, comm_, c.stream), "recv");
    }
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupStrata::scatter(std::vector<at::Tensor>& outputs,
                                                           std::vector<std::vector<at::Tensor>>& inputs,
                                                           const c10d::ScatterOptions& opts) {
  requireOne(outputs, "scatter");
  const int root = static_cast<int>(opts.rootRank);
  requireRootList(inputs, outputs[0], root, "scatter", "input");
  std::vector<at::Tensor> touched = flatten(inputs);
  touched.push_back(outputs[0]);
  return run(c10d::OpType::SCATTER, "strata:scatter", opts.asyncOp, outputs, touched, [&](Call& c) {
    if (rank_ != root) {
      const Wire out = c.write(outputs[0], false, "scatter");
      if (out.count) check(strataRecv(out.data, out.count, out.dtype, root, comm_, c.stream), "recv");
      return;
    }
    for (int j = 0; j < size_; ++j) {
      if (j == rank_) {
        at::Tensor dst = outputs[0], src = inputs[0][j];
        c.post.insert(c.post.begin(), [dst, src]() mutable { dst.copy_(src.view(dst.sizes())); });
        continue;
      }
      const Wire in = c.read(inputs[0][j], false, "scatter");
      if (in.count) check(strataSend(in.data, in.count, in.dtype, j, comm_, c.stream), "send");
    }
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupStrata::send(std::vector<at::Tensor>& tensors, int dstRank, int) {
  requireOne(tensors, "send");
  TORCH_CHECK(dstRank >= 0 && dstRank < size_ && dstRank != rank_, "strata: send: destination rank ", dstRank,
              " is not another rank of the group of ", size_);
  return run(c10d::OpType::SEND, "strata:send", true, tensors, tensors, [&](Call& c) {
    const Wire in = c.read(tensors[0], false, "send");
    check(strataSend(in.data, in.count, in.dtype, dstRank, comm_, c.stream), "send");
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupStrata::recv(std::vector<at::Tensor>& tensors, int srcRank, int) {
  requireOne(tensors, "recv");
  TORCH_CHECK(srcRank >= 0 && srcRank < size_ && srcRank != rank_, "strata: recv: source rank ", srcRank,
              " is not another rank of the group of ", size_);
  return run(c10d::OpType::RECV, "strata:recv", true, tensors, tensors, [&](Call& c) {
    const Wire out = c.write(tensors[0], false, "recv");
    check(strataRecv(out.data, out.count, out.dtype, srcRank, comm_, c.stream), "recv");
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupStrata::recvAnysource(std::vector<at::Tensor>& tensors, int) {
  requireOne(tensors, "recv from any source");
  TORCH_CHECK(!usesDevicePath(tensors),
              "strata: recv from any source serves CPU tensors only: device work is enqueued on its stream with its "
              "peers fixed, while this receive's peer is known only once a message has arrived");
  TORCH_CHECK(!coalesced_,
              "strata: recv from any source cannot be coalesced: it must be alone in its Strata group (its peer is "
              "known only once a message has arrived)");
  // strataRecvAny stores the sender's rank here when the receive completes; the Work keeps it for sourceRank().
  auto source = std::make_shared<int>(-1);
  auto work = run(c10d::OpType::RECVANYSOURCE, "strata:recvAnySource", true, tensors, tensors, [&](Call& c) {
    const Wire out = c.write(tensors[0], false, "recv from any source");
    check(strataRecvAny(out.data, out.count, out.dtype, source.get(), comm_, c.stream), "recv from any source");
  });
  static_cast<StrataWork*>(work.get())->setSource(source);
  return work;
}

}  // namespace strata::torch_backend
