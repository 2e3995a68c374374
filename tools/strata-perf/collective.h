// The collectives strata-perf measures: how nccl-tests sizes each one, how to call it through the public
// C API, and how to fill its inputs and verify its outputs with values every type holds exactly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "dtype.h"
#include "strata/strata.h"

namespace strata::perf {

/// What strata-perf measures: one of the library's collectives, named by the public strataCollective_t, or
/// nccl-tests' sendrecv benchmark, which is no collective of the library: each rank strataSend()s to the
/// next and strataRecv()s from the previous, in one group.
struct CollSpec {
  const char* name;                              // command-line name, also the collective's name in STRATA_ALGO
  std::optional<strataCollective_t> collective;  // none: the sendrecv benchmark
  const char* call;                              // the API call it makes, for error messages
  bool reduces;                                  // takes an op
  bool rooted;                                   // takes a root
  bool isSendRecv() const { return !collective.has_value(); }
  bool is(strataCollective_t c) const { return collective == c; }
};
/// The collective with this name ("allreduce", ..., also nccl-tests' "all_reduce"), or nullptr.
const CollSpec* findColl(std::string_view name);
const char* collNames();  // "allreduce|reducescatter|..." for usage text

/// nccl-tests' busbw = algbw x this factor (the fraction of the data each rank must send on the wire).
double busBandwidthFactor(const CollSpec& coll, int nranks);

/// Element counts of one run, as nccl-tests' getCollByteCount defines them.
struct Layout {
  size_t sendCount = 0;          // elements in the send buffer
  size_t recvCount = 0;          // elements in the receive buffer
  size_t paramCount = 0;         // the count argument of the call (and nccl-tests' "count" column)
  size_t sendInplaceOffset = 0;  // in place: send from recvbuff + rank * this
  size_t recvInplaceOffset = 0;  // in place: receive into recvbuff + rank * this
  /// nccl-tests' "size" column: the larger buffer, in bytes.
  size_t reportedBytes(size_t eltSize) const { return (sendCount > recvCount ? sendCount : recvCount) * eltSize; }
};
/// The layout for a run of `bytes` (nccl-tests' size parameter: count = bytes / element size).
Layout layoutFor(const CollSpec& coll, size_t bytes, size_t eltSize, int nranks);

/// The buffers of one run: where this rank sends from and receives into.
struct RunBuffers {
  const void* send;
  void* recv;
};
RunBuffers runBuffers(const Layout& layout, size_t eltSize, void* sendbuff, void* recvbuff, bool inPlace, int rank);

/// Issues one collective: blocking on host buffers (stream NULL), or enqueued on `stream` for device buffers.
strataResult_t runCollective(const CollSpec& coll, const RunBuffers& bufs, const Layout& layout, strataDataType_t type,
                             strataRedOp_t op, int root, strataComm_t comm, int rank, int nranks,
                             strataStream_t stream = nullptr);

/// What one check compares: which elements of which buffer this rank verifies.
struct CheckContext {
  const CollSpec* coll;
  const DtypeInfo* type;
  strataRedOp_t op;  // ignored by collectives that do not reduce
  int root;
  int rank, nranks;
  Layout layout;
};
/// Fills this rank's input (in recvbuff when in place) and poisons the rest of the receive buffer, so a
/// result that was never written does not pass for a correct one.
void fillInputs(const CheckContext& ctx, void* sendbuff, void* recvbuff, bool inPlace);
/// Where this rank's result lies and how many elements it has (0 when this rank checks nothing, e.g. a
/// non-root rank of a reduce).
struct ResultRegion {
  void* data;
  size_t count;
};
ResultRegion resultRegion(const CheckContext& ctx, void* recvbuff, bool inPlace);
/// Elements of the result that differ from what the collective must produce. The first `showMax` of them
/// are described on stderr (index, expected, got).
int64_t countWrong(const CheckContext& ctx, const ResultRegion& result, int showMax = 0);

}  // namespace strata::perf
