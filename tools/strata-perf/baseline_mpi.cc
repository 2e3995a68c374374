// The MPI baseline: the standard's collectives (MPI_Allreduce, MPI_Reduce_scatter_block, MPI_Allgather,
// MPI_Bcast, MPI_Reduce, MPI_Alltoall, MPI_Sendrecv), with whatever algorithms the MPI library strata-perf
// was built against (Open MPI here) selects. MPI_Init only sees Strata's ranks when mpirun started them,
// so the baseline refuses to run under any other launcher instead of timing a world of one.
// The C API only: without these, Open MPI's and MPICH's mpi.h pull in the C++ bindings, which need their
// own library (MPI::MPI_C does not link it).
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <climits>
#include <cstring>
#include <string>

#include "baseline.h"

namespace strata::perf {
namespace {

std::string mpiErrorText(int code) {
  char text[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(text, static_cast<size_t>(len));
}

// The MPI type a reduction runs on; MPI_DATATYPE_NULL where MPI has none (the 16- and 8-bit floats).
MPI_Datatype reductionType(strataDataType_t type) {
  switch (type) {
    case strataInt8: return MPI_INT8_T;
    case strataUint8: return MPI_UINT8_T;
    case strataInt32: return MPI_INT32_T;
    case strataUint32: return MPI_UINT32_T;
    case strataInt64: return MPI_INT64_T;
    case strataUint64: return MPI_UINT64_T;
    case strataFloat32: return MPI_FLOAT;
    case strataFloat64: return MPI_DOUBLE;
    default: return MPI_DATATYPE_NULL;
  }
}

// MPI_OP_NULL for avg: MPI has no average.
MPI_Op reductionOp(strataRedOp_t op) {
  switch (op) {
    case strataSum: return MPI_SUM;
    case strataProd: return MPI_PROD;
    case strataMax: return MPI_MAX;
    case strataMin: return MPI_MIN;
    default: return MPI_OP_NULL;
  }
}

const char* callName(const CollSpec& coll) {
  if (coll.isSendRecv()) return "MPI_Sendrecv";
  switch (*coll.collective) {
    case strataCollAllReduce: return "MPI_Allreduce";
    case strataCollReduceScatter: return "MPI_Reduce_scatter_block";
    case strataCollAllGather: return "MPI_Allgather";
    case strataCollBroadcast: return "MPI_Bcast";
    case strataCollReduce: return "MPI_Reduce";
    case strataCollAllToAll: return "MPI_Alltoall";
  }
  return "?";
}

// One MPI call on fixed buffers. Collectives that only move data move bytes, so every type is supported.
class MpiCollective : public BaselineCollective {
 public:
  MpiCollective(MPI_Comm comm, const BaselineCall& call, int rank, int nranks)
      : comm_(comm), call_(call), rank_(rank), nranks_(nranks) {
    const size_t eltSize = call.type->size;
    if (call.coll->reduces) {
      type_ = reductionType(call.type->type);
      op_ = reductionOp(call.op);
      count_ = static_cast<int>(call.layout.paramCount);
    } else {
      type_ = MPI_BYTE;
      count_ = static_cast<int>(call.layout.paramCount * eltSize);
    }
    bytes_ = call.layout.paramCount * eltSize;
  }

  void run() override {
    const int rc = issue();
    if (rc != MPI_SUCCESS) {
      throw BaselineError(std::string("rank ") + std::to_string(rank_) + ": " + callName(*call_.coll) + " (count " +
                          std::to_string(count_) + ") failed: " + mpiErrorText(rc));
    }
  }

 private:
  int issue() {
    void* send = const_cast<void*>(call_.send);
    if (call_.coll->isSendRecv()) {
      // nccl-tests' sendrecv: every rank sends to the next and receives from the previous.
      const int next = (rank_ + 1) % nranks_, prev = (rank_ + nranks_ - 1) % nranks_;
      return MPI_Sendrecv(send, count_, type_, next, 0, call_.recv, count_, type_, prev, 0, comm_, MPI_STATUS_IGNORE);
    }
    switch (*call_.coll->collective) {
      case strataCollAllReduce: return MPI_Allreduce(send, call_.recv, count_, type_, op_, comm_);
      case strataCollReduceScatter: return MPI_Reduce_scatter_block(send, call_.recv, count_, type_, op_, comm_);
      case strataCollAllGather: return MPI_Allgather(send, count_, type_, call_.recv, count_, type_, comm_);
      case strataCollBroadcast:
        // MPI_Bcast works in place; out of place, the root's receive buffer gets its copy first (as NCCL's
        // root copies sendbuff to recvbuff).
        if (rank_ == call_.root && bytes_ > 0) std::memcpy(call_.recv, call_.send, bytes_);
        return MPI_Bcast(call_.recv, count_, type_, call_.root, comm_);
      case strataCollReduce: return MPI_Reduce(send, call_.recv, count_, type_, op_, call_.root, comm_);
      case strataCollAllToAll: return MPI_Alltoall(send, count_, type_, call_.recv, count_, type_, comm_);
    }
    return MPI_ERR_OTHER;
  }

  MPI_Comm comm_;
  BaselineCall call_;
  int rank_, nranks_;
  MPI_Datatype type_ = MPI_DATATYPE_NULL;
  MPI_Op op_ = MPI_OP_NULL;
  int count_ = 0;
  size_t bytes_ = 0;
};

// MPI_Init / MPI_Finalize, owned: the baseline finalizes MPI only if it initialized it.
class MpiSession {
 public:
  MpiSession() {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (initialized) return;
    const int rc = MPI_Init(nullptr, nullptr);
    if (rc != MPI_SUCCESS) throw BaselineError("MPI_Init failed: " + mpiErrorText(rc));
    owned_ = true;
  }
  ~MpiSession() {
    if (owned_) MPI_Finalize();
  }
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

 private:
  bool owned_ = false;
};

class MpiBaseline : public Baseline {
 public:
  explicit MpiBaseline(const BaselineSettings& settings) : rank_(settings.rank), nranks_(settings.nranks) {
    int worldSize = 0, worldRank = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &worldSize);
    MPI_Comm_rank(MPI_COMM_WORLD, &worldRank);
    if (worldSize != nranks_) {
      throw BaselineError("--baseline mpi needs the ranks to be launched by mpirun: on Strata's rank " +
                          std::to_string(rank_) + ", MPI sees a world of " + std::to_string(worldSize) +
                          " rank(s), Strata " + std::to_string(nranks_));
    }
    // Number the MPI ranks as Strata numbers them, so both send from and to the same processes.
    int rc = MPI_Comm_split(MPI_COMM_WORLD, 0, rank_, &comm_);
    if (rc != MPI_SUCCESS) throw BaselineError("MPI_Comm_split failed: " + mpiErrorText(rc));
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);

    char text[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
    int len = 0;
    MPI_Get_library_version(text, &len);
    // The length may count a terminating NUL; Open MPI's first line names the library and its version.
    version_.assign(text, strnlen(text, static_cast<size_t>(len)));
    version_ = version_.substr(0, version_.find('\n'));
  }
  ~MpiBaseline() override {
    if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  }

  const char* name() const override { return "mpi"; }
  std::string version() const override { return version_; }

  std::vector<std::string> algorithms(const BaselineCall& call) const override {
    // MPI counts are ints; collectives that only move data count bytes.
    const bool reduces = call.coll->reduces;
    const size_t units = reduces ? call.layout.paramCount : call.layout.paramCount * call.type->size;
    if (units > static_cast<size_t>(INT_MAX)) return {};
    if (reduces && (reductionType(call.type->type) == MPI_DATATYPE_NULL || reductionOp(call.op) == MPI_OP_NULL)) {
      return {};
    }
    return {callName(*call.coll)};
  }

  std::unique_ptr<BaselineCollective> prepare(const BaselineCall& call, const std::string&) override {
    return std::make_unique<MpiCollective>(comm_, call, rank_, nranks_);
  }

 private:
  MpiSession session_;  // first member: initialized before, finalized after everything else
  int rank_, nranks_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  std::string version_;
};

}  // namespace

std::unique_ptr<Baseline> makeMpiBaseline(const BaselineSettings& settings) {
  return std::make_unique<MpiBaseline>(settings);
}

}  // namespace strata::perf
