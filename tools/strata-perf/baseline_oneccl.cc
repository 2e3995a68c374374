// The oneCCL baseline: Intel's oneCCL (the library under torch-ccl, Intel's CPU backend for torch.distributed), its
// CPU collectives ccl::allreduce, reduce_scatter, allgather, broadcast, reduce and alltoall, with the algorithms
// oneCCL selects. PyPI's oneccl-cpu 2021.16.2 (scripts/install_deps.sh puts it in /opt/strata-deps/oneccl), over
// libfabric (the `ofi` transport; its default provider is tcp).
//
// Ranks meet through oneCCL's key-value store: rank 0 creates the main store and broadcasts its address over
// Strata. oneCCL is started as its docs describe for launcher-less runs: CCL_PROCESS_LAUNCHER=none,
// CCL_ATL_TRANSPORT=ofi and this rank's place on its host (CCL_LOCAL_RANK, CCL_LOCAL_SIZE), each set only where the
// user has not. Its worker thread is off (CCL_WORKER_OFFLOAD=0: the calling thread progresses the call, as every
// other library timed here does): with a spinning worker thread per rank, oneCCL measured 20-44 ms per 4 MiB
// all-reduce on two cores against 1.1-1.4 ms without. The settings used are part of the version string.
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <cstring>
#include <oneapi/ccl.hpp>
#include <optional>
#include <string>
#include <vector>

#include "baseline.h"

namespace strata::perf {
namespace {

// The oneCCL type a reduction runs on; none for the half-precision and 8-bit floats, whose CPU reductions need
// instruction sets this baseline cannot count on.
std::optional<ccl::datatype> reductionType(strataDataType_t type) {
  switch (type) {
    case strataInt8: return ccl::datatype::int8;
    case strataUint8: return ccl::datatype::uint8;
    case strataInt32: return ccl::datatype::int32;
    case strataUint32: return ccl::datatype::uint32;
    case strataInt64: return ccl::datatype::int64;
    case strataUint64: return ccl::datatype::uint64;
    case strataFloat32: return ccl::datatype::float32;
    case strataFloat64: return ccl::datatype::float64;
    default: return std::nullopt;
  }
}

std::optional<ccl::reduction> reductionOp(strataRedOp_t op) {
  switch (op) {
    case strataSum: return ccl::reduction::sum;
    case strataProd: return ccl::reduction::prod;
    case strataMax: return ccl::reduction::max;
    case strataMin: return ccl::reduction::min;
    default: return std::nullopt;
  }
}

const char* callName(const CollSpec& coll) {
  switch (*coll.collective) {
    case strataCollAllReduce: return "ccl::allreduce";
    case strataCollReduceScatter: return "ccl::reduce_scatter";
    case strataCollAllGather: return "ccl::allgather";
    case strataCollBroadcast: return "ccl::broadcast";
    case strataCollReduce: return "ccl::reduce";
    case strataCollAllToAll: return "ccl::alltoall";
  }
  return "?";
}

// One oneCCL call on fixed buffers. Collectives that only move data move bytes, so every type is supported.
class OnecclCollective : public BaselineCollective {
 public:
  OnecclCollective(ccl::communicator& comm, const BaselineCall& call, int rank)
      : comm_(comm), call_(call), rank_(rank) {
    if (call.coll->reduces) {
      type_ = *reductionType(call.type->type);
      op_ = *reductionOp(call.op);
      count_ = call.layout.paramCount;
    } else {
      type_ = ccl::datatype::uint8;
      count_ = call.layout.paramCount * call.type->size;
    }
    bytes_ = call.layout.paramCount * call.type->size;
  }

  void run() override {
    try {
      issue().wait();
    } catch (const std::exception& e) {
      throw BaselineError("rank " + std::to_string(rank_) + ": " + callName(*call_.coll) + " (count " +
                          std::to_string(count_) + ") failed: " + e.what());
    }
  }

 private:
  ccl::event issue() {
    const void* send = call_.send;
    void* recv = call_.recv;
    switch (*call_.coll->collective) {
      case strataCollAllReduce: return ccl::allreduce(send, recv, count_, type_, op_, comm_);
      case strataCollReduceScatter: return ccl::reduce_scatter(send, recv, count_, type_, op_, comm_);
      case strataCollAllGather: return ccl::allgather(send, recv, count_, type_, comm_);
      case strataCollBroadcast:
        // ccl::broadcast works in place; out of place, the root's receive buffer gets its copy first (as NCCL's root
        // copies sendbuff to recvbuff).
        if (rank_ == call_.root && bytes_ > 0) std::memcpy(recv, send, bytes_);
        return ccl::broadcast(recv, count_, type_, call_.root, comm_);
      case strataCollReduce: return ccl::reduce(send, recv, count_, type_, op_, call_.root, comm_);
      case strataCollAllToAll: return ccl::alltoall(send, recv, count_, type_, comm_);
    }
    throw BaselineError("unknown collective");
  }

  ccl::communicator& comm_;
  BaselineCall call_;
  int rank_;
  ccl::datatype type_ = ccl::datatype::uint8;
  ccl::reduction op_ = ccl::reduction::sum;
  size_t count_ = 0;
  size_t bytes_ = 0;
};

// Sets `name` to `value` unless the user set it; returns what it is now.
std::string defaultEnv(const char* name, const std::string& value) {
  setenv(name, value.c_str(), 0);
  return std::getenv(name);
}

class OnecclBaseline : public Baseline {
 public:
  explicit OnecclBaseline(const BaselineSettings& settings) : s_(settings) {
    // This rank's place among the ranks of its host (by host name), which oneCCL's shared-memory paths use.
    const std::vector<std::string> hosts = rankHostNames(s_);
    int localRank = 0, localSize = 0;
    for (int r = 0; r < s_.nranks; ++r) {
      if (hosts[static_cast<size_t>(r)] != hosts[static_cast<size_t>(s_.rank)]) continue;
      if (r < s_.rank) ++localRank;
      ++localSize;
    }
    settingsText_ = "CCL_ATL_TRANSPORT=" + defaultEnv("CCL_ATL_TRANSPORT", "ofi") +
                    ", CCL_WORKER_OFFLOAD=" + defaultEnv("CCL_WORKER_OFFLOAD", "0");
    defaultEnv("CCL_PROCESS_LAUNCHER", "none");
    defaultEnv("CCL_LOG_LEVEL", "error");  // not a warning per setting above
    defaultEnv("CCL_LOCAL_RANK", std::to_string(localRank));
    defaultEnv("CCL_LOCAL_SIZE", std::to_string(localSize));
    if (const char* p = std::getenv("FI_PROVIDER"); p != nullptr && *p != '\0')
      settingsText_ += ", FI_PROVIDER=" + std::string(p);

    std::string failure;
    ccl::kvs::address_type address{};
    try {
      ccl::init();
      if (s_.rank == 0) {
        kvs_ = ccl::create_main_kvs();
        address = kvs_->get_address();
      }
    } catch (const std::exception& e) {
      failure = e.what();
    }
    // Rank 0's address (or, if it failed, nothing: every rank then fails with it).
    int32_t ok = failure.empty() ? 1 : 0;
    checkStrata(s_, strataBroadcast(&ok, &ok, 1, strataInt32, 0, s_.comm, nullptr), "strataBroadcast for oneCCL");
    if (ok == 0)
      throw BaselineError("rank " + std::to_string(s_.rank) + ": oneCCL's key-value store on rank 0 failed" +
                          (failure.empty() ? std::string() : ": " + failure));
    checkStrata(s_, strataBroadcast(address.data(), address.data(), address.size(), strataUint8, 0, s_.comm, nullptr),
                "strataBroadcast of oneCCL's key-value store address");
    try {
      if (s_.rank != 0) kvs_ = ccl::create_kvs(address);
      comm_.emplace(ccl::create_communicator(s_.nranks, s_.rank, kvs_));
    } catch (const std::exception& e) {
      throw BaselineError("rank " + std::to_string(s_.rank) + ": oneCCL communicator set-up failed: " + e.what());
    }
    if (comm_->size() != s_.nranks || comm_->rank() != s_.rank) {
      throw BaselineError("rank " + std::to_string(s_.rank) + ": oneCCL numbers this rank " +
                          std::to_string(comm_->rank()) + " of " + std::to_string(comm_->size()));
    }
  }

  const char* name() const override { return "oneccl"; }

  std::string version() const override {
    const ccl::library_version v = ccl::get_library_version();
    return "oneCCL " + std::to_string(v.major) + "." + std::to_string(v.minor) + "." + std::to_string(v.update) + " (" +
           (v.product_status ? v.product_status : "") + "; " + settingsText_ + ")";
  }

  std::vector<std::string> algorithms(const BaselineCall& call) const override {
    if (call.coll->isSendRecv() || call.layout.paramCount == 0) return {};
    if (call.coll->reduces && (!reductionType(call.type->type) || !reductionOp(call.op))) return {};
    if (call.layout.paramCount * call.type->size > static_cast<size_t>(INT_MAX)) return {};
    return {callName(*call.coll)};
  }

  std::unique_ptr<BaselineCollective> prepare(const BaselineCall& call, const std::string&) override {
    return std::make_unique<OnecclCollective>(*comm_, call, s_.rank);
  }

 private:
  BaselineSettings s_;
  std::string settingsText_;
  std::shared_ptr<ccl::kvs> kvs_;
  std::optional<ccl::communicator> comm_;
};

}  // namespace

std::unique_ptr<Baseline> makeOnecclBaseline(const BaselineSettings& settings) {
  return std::make_unique<OnecclBaseline>(settings);
}

}  // namespace strata::perf
