// Strata C++ API: RAII communicators, exceptions instead of status codes, and async Work handles.
// Header-only over the C ABI in strata.h, so it adds no C++ ABI to libstrata.so.
//
// Every call that fails throws strata::Exception carrying the C result and the message strataGetLastError gives
// (Communicator's destructor, move assignment and abort() excepted: they drop it). What each call does, its
// buffers' in-place rules and its errors are those of the C function it wraps (strata.h); strataInProgress is not
// a failure. Thread safety is the C API's (strata.h, "Threads"), with one addition: a Communicator, Work or Group
// object is not synchronised, so moving, assigning or destroying it, or Communicator::abort(), must not race with
// another call on the same object.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "strata/strata.h"

namespace strata {

/// Thrown by every C++ API call that fails; code() is the C result.
class Exception : public std::runtime_error {
 public:
  /// An exception for result `code` with message `msg` (what()).
  Exception(strataResult_t code, const std::string& msg) : std::runtime_error(msg), code_(code) {}
  /// The C result of the failed call (never strataSuccess or strataInProgress when thrown by this API).
  strataResult_t code() const { return code_; }

 private:
  strataResult_t code_;
};

namespace detail {
/// Throws Exception for a result other than strataSuccess and strataInProgress, with strataGetErrorString(r)
/// and, when there is one, strataGetLastError(comm) as its message. Thread-safe.
inline void check(strataResult_t r, strataComm_t comm = nullptr) {
  if (r != strataSuccess && r != strataInProgress) {
    std::string msg = strataGetLastError(comm);
    throw Exception(r, std::string(strataGetErrorString(r)) + (msg.empty() ? "" : ": " + msg));
  }
}
}  // namespace detail

/// The strataDataType_t of a C++ element type: int8_t and char, uint8_t, int32_t, uint32_t, int64_t, uint64_t,
/// float, double. Any other type fails to compile (pass a strataDataType_t to the type-erased calls instead).
template <typename T>
constexpr strataDataType_t dataTypeOf() {
  if constexpr (std::is_same_v<T, int8_t> || std::is_same_v<T, char>) return strataInt8;
  else if constexpr (std::is_same_v<T, uint8_t>) return strataUint8;
  else if constexpr (std::is_same_v<T, int32_t>) return strataInt32;
  else if constexpr (std::is_same_v<T, uint32_t>) return strataUint32;
  else if constexpr (std::is_same_v<T, int64_t>) return strataInt64;
  else if constexpr (std::is_same_v<T, uint64_t>) return strataUint64;
  else if constexpr (std::is_same_v<T, float>) return strataFloat32;
  else if constexpr (std::is_same_v<T, double>) return strataFloat64;
  else static_assert(sizeof(T) == 0, "no strata datatype for this C++ type; pass strataDataType_t explicitly");
}

/// Completion handle of asynchronous collectives. Waiting is optional; destroying it does not cancel.
/// Copies share one strataWork_t, freed (strataWorkFree) with the last copy.
class Work {
 public:
  /// An empty handle: complete at once, with no error.
  Work() = default;
  /// Takes ownership of `w` (from strataGroupEndAsync; nullptr: an empty handle).
  explicit Work(strataWork_t w) : work_(w, &strataWorkFree) {}
  /// Waits up to timeoutMs (< 0: no limit). Returns true when complete; throws if the work failed (on every
  /// call after it failed).
  bool wait(int64_t timeoutMs = -1) {
    if (!work_) return true;
    strataResult_t r = strataWorkWait(work_.get(), timeoutMs);
    if (r == strataInProgress) return false;
    detail::check(r);
    return true;
  }
  /// True when complete (throws if it failed). Never blocks.
  bool test() {
    if (!work_) return true;
    int done = 0;
    detail::check(strataWorkTest(work_.get(), &done));
    return done != 0;
  }
  /// The failure message, "" while no call of the work has failed (running or succeeded).
  std::string error() const { return work_ ? strataWorkError(work_.get()) : ""; }

 private:
  std::shared_ptr<strataWork> work_;
};

/// A communicator. Move-only; destroyed (waiting for outstanding work) when it goes out of scope.
/// The blocking calls work on host buffers (they pass no stream; device buffers are enqueued on the legacy
/// default stream, as strata.h describes); counts are in elements.
class Communicator {
 public:
  /// An empty communicator (operator bool is false); calls on it throw strataInvalidUsage.
  Communicator() = default;
  /// Joins the group of `nranks` ranks identified by `id` as `rank` (collective): strataCommInitRank.
  Communicator(int nranks, const strataUniqueId& id, int rank) {
    detail::check(strataCommInitRank(&comm_, nranks, id, rank));
  }
  /// Joins the group described by the launcher's environment (strata-run, torchrun, mpirun, srun):
  /// strataCommInitFromEnv.
  static Communicator fromEnv() {
    Communicator c;
    detail::check(strataCommInitFromEnv(&c.comm_));
    return c;
  }
  /// A new rendezvous token; this process then hosts the bootstrap root (strataGetUniqueId).
  static strataUniqueId uniqueId() {
    strataUniqueId id;
    detail::check(strataGetUniqueId(&id));
    return id;
  }
  /// strataCommDestroy: waits for outstanding work. Never throws; a teardown error is dropped.
  ~Communicator() {
    if (comm_) strataCommDestroy(comm_);
  }
  /// Takes o's communicator; o becomes empty.
  Communicator(Communicator&& o) noexcept : comm_(std::exchange(o.comm_, nullptr)) {}
  /// Destroys this communicator (as the destructor), then takes o's; o becomes empty.
  Communicator& operator=(Communicator&& o) noexcept {
    if (this != &o) {
      if (comm_) strataCommDestroy(comm_);
      comm_ = std::exchange(o.comm_, nullptr);
    }
    return *this;
  }
  /// Not copyable: the object owns its handle.
  Communicator(const Communicator&) = delete;
  /// Not copy-assignable: the object owns its handle.
  Communicator& operator=(const Communicator&) = delete;

  /// This rank in the communicator, in [0, size()) (strataCommUserRank).
  int rank() const {
    int r = 0;
    detail::check(strataCommUserRank(comm_, &r), comm_);
    return r;
  }
  /// The number of ranks (strataCommCount).
  int size() const {
    int n = 0;
    detail::check(strataCommCount(comm_, &n), comm_);
    return n;
  }
  /// The C handle, still owned by this object (nullptr when empty).
  strataComm_t get() const { return comm_; }
  /// True unless empty (default-constructed, moved from, aborted, or split with STRATA_SPLIT_NOCOLOR).
  explicit operator bool() const { return comm_ != nullptr; }

  /// Ranks with equal color form a new communicator ordered by key; an empty one for STRATA_SPLIT_NOCOLOR.
  /// Collective over this communicator (strataCommSplit).
  Communicator split(int color, int key) const {
    Communicator c;
    detail::check(strataCommSplit(comm_, color, key, &c.comm_, nullptr), comm_);
    return c;
  }
  /// strataCommAbort, result dropped; the object becomes empty. Nothing to do when empty. Never throws.
  void abort() {
    if (comm_) strataCommAbort(std::exchange(comm_, nullptr));
  }

  // Blocking collectives on host buffers (type-erased forms; the templates below deduce dtype).

  /// strataAllReduce: recv gets the reduction of every rank's send (count elements); in place when send == recv.
  void allReduce(const void* send, void* recv, size_t count, strataDataType_t dt, strataRedOp_t op) {
    detail::check(strataAllReduce(send, recv, count, dt, op, comm_, nullptr), comm_);
  }
  /// strataReduceScatter: recv gets block rank() (recvcount elements) of the reduction of every rank's send
  /// (size() * recvcount); in place when recv == send + rank() * recvcount.
  void reduceScatter(const void* send, void* recv, size_t recvcount, strataDataType_t dt, strataRedOp_t op) {
    detail::check(strataReduceScatter(send, recv, recvcount, dt, op, comm_, nullptr), comm_);
  }
  /// strataAllGather: recv (size() * sendcount) gets every rank's send in rank order; in place when
  /// send == recv + rank() * sendcount.
  void allGather(const void* send, void* recv, size_t sendcount, strataDataType_t dt) {
    detail::check(strataAllGather(send, recv, sendcount, dt, comm_, nullptr), comm_);
  }
  /// strataBroadcast: every rank's recv gets root's send (read on root only); in place when send == recv.
  void broadcast(const void* send, void* recv, size_t count, strataDataType_t dt, int root) {
    detail::check(strataBroadcast(send, recv, count, dt, root, comm_, nullptr), comm_);
  }
  /// strataReduce: root's recv gets the reduction of every rank's send (recv used on root only); in place when
  /// send == recv.
  void reduce(const void* send, void* recv, size_t count, strataDataType_t dt, strataRedOp_t op, int root) {
    detail::check(strataReduce(send, recv, count, dt, op, root, comm_, nullptr), comm_);
  }
  /// strataAllToAll: block j (count elements) of send goes to rank j's block rank() of recv; in place when
  /// send == recv.
  void allToAll(const void* send, void* recv, size_t count, strataDataType_t dt) {
    detail::check(strataAllToAll(send, recv, count, dt, comm_, nullptr), comm_);
  }
  /// strataSend of count elements to peer (to this rank itself only inside a group that also receives it).
  void send(const void* buf, size_t count, strataDataType_t dt, int peer) {
    detail::check(strataSend(buf, count, dt, peer, comm_, nullptr), comm_);
  }
  /// strataRecv of count elements from peer (from this rank itself only inside a group that also sends it).
  void recv(void* buf, size_t count, strataDataType_t dt, int peer) {
    detail::check(strataRecv(buf, count, dt, peer, comm_, nullptr), comm_);
  }
  /// strataBarrier: returns once every rank has called it.
  void barrier() { detail::check(strataBarrier(comm_, nullptr), comm_); }

  /// allReduce with the datatype deduced from T (dataTypeOf), op strataSum unless given.
  template <typename T>
  void allReduce(const T* send, T* recv, size_t count, strataRedOp_t op = strataSum) {
    allReduce(send, recv, count, dataTypeOf<T>(), op);
  }

  // Asynchronous forms: return at once; the Work completes when the result is in place. Each is a group of one
  // call ended by strataGroupEndAsync: buffers must stay valid until the Work completes, and they must not be
  // called inside a group (strata::Group, strataGroupStart), where they throw strataInvalidUsage.

  /// allReduce, asynchronous.
  Work allReduceAsync(const void* send, void* recv, size_t count, strataDataType_t dt, strataRedOp_t op) {
    return async([&] { return strataAllReduce(send, recv, count, dt, op, comm_, nullptr); });
  }
  /// reduceScatter, asynchronous.
  Work reduceScatterAsync(const void* send, void* recv, size_t recvcount, strataDataType_t dt, strataRedOp_t op) {
    return async([&] { return strataReduceScatter(send, recv, recvcount, dt, op, comm_, nullptr); });
  }
  /// allGather, asynchronous.
  Work allGatherAsync(const void* send, void* recv, size_t sendcount, strataDataType_t dt) {
    return async([&] { return strataAllGather(send, recv, sendcount, dt, comm_, nullptr); });
  }
  /// broadcast, asynchronous.
  Work broadcastAsync(const void* send, void* recv, size_t count, strataDataType_t dt, int root) {
    return async([&] { return strataBroadcast(send, recv, count, dt, root, comm_, nullptr); });
  }
  /// reduce, asynchronous.
  Work reduceAsync(const void* send, void* recv, size_t count, strataDataType_t dt, strataRedOp_t op, int root) {
    return async([&] { return strataReduce(send, recv, count, dt, op, root, comm_, nullptr); });
  }
  /// allToAll, asynchronous.
  Work allToAllAsync(const void* send, void* recv, size_t count, strataDataType_t dt) {
    return async([&] { return strataAllToAll(send, recv, count, dt, comm_, nullptr); });
  }
  /// barrier, asynchronous.
  Work barrierAsync() {
    return async([&] { return strataBarrier(comm_, nullptr); });
  }

 private:
  template <typename F>
  Work async(F&& issue) {
    detail::check(strataGroupStart());
    strataResult_t r = issue();
    strataWork_t w = nullptr;
    strataResult_t e = strataGroupEndAsync(&w);
    detail::check(r, comm_);
    detail::check(e, comm_);
    return Work(w);
  }

  strataComm_t comm_ = nullptr;
};

/// RAII group: operations issued while it lives run together when it ends. The group is the calling thread's
/// (strataGroupStart): create, use and end it on one thread.
class Group {
 public:
  /// strataGroupStart.
  Group() { detail::check(strataGroupStart()); }
  /// strataGroupEnd unless endAsync() was called; throws Exception if the group's calls fail, so a Group must
  /// not end during stack unwinding from another exception (that terminates).
  ~Group() noexcept(false) {
    if (!ended_) detail::check(strataGroupEnd());
  }
  /// Ends the group now, returning a Work instead of waiting (strataGroupEndAsync; the group must be the
  /// outermost). After it has thrown, the destructor does not end the group.
  Work endAsync() {
    ended_ = true;
    strataWork_t w = nullptr;
    detail::check(strataGroupEndAsync(&w));
    return Work(w);
  }

 private:
  bool ended_ = false;
};

}  // namespace strata
