// The NCCL drop-in (libnccl.so.2): NCCL's C API on Strata. This header is what its files share: the communicator
// an ncclComm_t points to, the macro that defines an API function with its profiler alias (pnccl*), and the
// error helpers.
//
// Every function is defined as pncclX with ncclX a weak alias of it, as NCCL does, so that a profiler can
// interpose ncclX and still call the implementation. The library is compiled against the newest nccl.h of the
// machine, so its types, enum values and struct layouts are NCCL's by construction.
#pragma once

#include <nccl.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "strata/strata.h"

/// Defines `name` (NCCL's API) as a weak alias of p`name`, and opens the definition of p`name`.
#define STRATA_NCCL_API(ret, name, ...)                                           \
  extern "C" ret name(__VA_ARGS__) __attribute__((weak, alias("p" #name), used)); \
  extern "C" __attribute__((visibility("default"))) ret p##name(__VA_ARGS__)

/// What an ncclWindow_t points to (ncclCommWindowRegister): a registered region, whose address
/// ncclWinGetUserPtr gives back.
struct ncclWindow_vidmem {
  ncclComm_t comm = nullptr;
  void* ptr = nullptr;
  size_t bytes = 0;
  int flags = 0;
};

namespace strata::nccl {

/// A buffer registered with ncclCommRegister: accepted and recorded (Strata's transports do not need
/// registration; the record lets deregistration check its handle).
struct Region {
  void* ptr = nullptr;
  size_t bytes = 0;
};

/// Asynchronous work (strataGroupEndAsync) that a non-blocking communicator waits for; freed with the last owner
/// (a group's work is shared by every non-blocking communicator in it).
using PendingWork = std::shared_ptr<strataWork>;
PendingWork adoptWork(strataWork_t work);

/// The state of one NCCL communicator. Shared with a thread that runs a non-blocking init, split, shrink or grow.
struct CommState {
  strataComm_t comm = nullptr;  ///< set once the communicator exists (at once for blocking calls)
  bool blocking = true;         ///< config->blocking (NCCL's default: 1)
  std::string name;             ///< config->commName, for logs
  int cudaDev = -1;             ///< the current CUDA device at creation (-1: the process had not loaded CUDA)

  /// ncclInProgress while a non-blocking creation runs (on a detached thread holding this state); then its
  /// result. `comm` is written before this leaves ncclInProgress (release).
  std::atomic<int> createResult{ncclSuccess};
  std::string createError;  ///< why the creation failed (under mu)
  /// The creation was abandoned (abort or destroy while it ran): its thread frees what it made.
  std::atomic<bool> abandoned{false};

  std::atomic<bool> suspended{false};  ///< ncclCommSuspend: calls are refused until ncclCommResume
  std::atomic<bool> revoked{false};    ///< ncclCommRevoke returned: quiescent, only shrink or the end remain

  std::mutex mu;                     ///< guards what follows
  std::vector<PendingWork> pending;  ///< host work of a non-blocking communicator not yet seen done
  std::vector<std::unique_ptr<Region>> regions;
  std::vector<std::unique_ptr<ncclWindow_vidmem>> windows;
  bool growIdIssued = false;  ///< ncclCommGetUniqueId gave an id not yet used by ncclCommGrow
};

}  // namespace strata::nccl

/// What an ncclComm_t points to. The object outlives the communicator: after destroy or abort `state` is null and
/// `magic` says so, so a call on a destroyed handle is refused (ncclInvalidUsage) instead of reading freed memory.
struct ncclComm {
  std::atomic<uint32_t> magic{0};
  std::shared_ptr<strata::nccl::CommState> state;
};

namespace strata::nccl {

inline constexpr uint32_t kLiveComm = 0x5354434d;  // "STCM"
inline constexpr uint32_t kDeadComm = 0x44454144;  // "DEAD"

/// Records an error for ncclGetLastError (Strata's record: strataGetLastError) and returns it as NCCL's code.
ncclResult_t fail(ncclComm_t comm, ncclResult_t code, const std::string& message);
/// Strata's result code as NCCL's (the values are equal; checked at compile time in nccl_comm.cc).
inline ncclResult_t asNccl(strataResult_t r) { return static_cast<ncclResult_t>(r); }
/// The error the Strata call just made on this thread (recorded there), renamed for NCCL's user: "strataAllReduce:
/// invalid datatype 99" becomes "ncclAllReduce: ...". Returns `r` as NCCL's code.
ncclResult_t renameError(strataResult_t r);
/// The result of a Strata call made for an NCCL one: its code, with its message renamed when it failed.
inline ncclResult_t fromStrata(strataResult_t r) {
  if (r == strataSuccess || r == strataInProgress) [[likely]]
    return static_cast<ncclResult_t>(r);
  return renameError(r);
}

/// The state of a live communicator whose creation has finished (waiting for a non-blocking one), or null with
/// the error recorded in *err: a NULL, destroyed or unknown handle, or a failed creation.
CommState* usable(ncclComm_t comm, const char* what, ncclResult_t* err);
/// usable() for the calls a suspended communicator refuses (NCCL: it "cannot be used while suspended"): all but
/// resume, the end, and queries.
CommState* active(ncclComm_t comm, const char* what, ncclResult_t* err);

/// A new handle for `state` (kept for the life of the process; see ncclComm).
ncclComm_t newHandle(std::shared_ptr<CommState> state);
/// Marks the handle destroyed and drops its state. Returns false if it was not live.
bool retireHandle(ncclComm_t comm);

/// Reads the config fields Strata uses (blocking, commName) into `state`, after checking the struct's size,
/// magic and version as NCCL does; fields Strata does not use are accepted and logged once at INFO. NULL is
/// the default config.
ncclResult_t applyConfig(const ncclConfig_t* config, CommState& state, const char* what);

/// What the calling thread's NCCL group holds beside the core's group. The group is the core's (ncclGroupStart is
/// strataGroupStart; its depth is apiGroupDepth()); NCCL adds the non-blocking communicators with host work in it,
/// the calls seen (for ncclGroupSimulateEnd), the creations it holds and its first refused call.
struct GroupCall {
  strataComm_t comm;
  int collective;  ///< strataCollective_t, or -1 for send/recv
  size_t count;
  ncclDataType_t dtype;
};
struct GroupExtras {
  std::vector<std::shared_ptr<CommState>> nonBlocking;
  std::vector<GroupCall> calls;
  /// Communicators whose creation was called inside the group: created together at the outermost end.
  std::vector<std::function<ncclResult_t()>> creations;
  std::vector<std::shared_ptr<CommState>> creationStates;
  /// The first call of the group that was refused: as NCCL, the group then fails as a whole and runs nothing.
  ncclResult_t error = ncclSuccess;
  std::string errorMessage;
};
GroupExtras& groupExtras();

}  // namespace strata::nccl
