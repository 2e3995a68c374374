// Strata C++ API: RAII communicators, exceptions instead of status codes, and async Work handles.
// Header-only over the C ABI in strata.h, so it adds no C++ ABI to libstrata.so.
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
  Exception(strataResult_t code, const std::string& msg) : std::runtime_error(msg), code_(code) {}
  strataResult_t code() const { return code_; }

 private:
  strataResult_t code_;
};

namespace detail {
inline void check(strataResult_t r, strataComm_t comm = nullptr) {
  if (r != strataSuccess && r != strataInProgress) {
    std::string msg = strataGetLastError(comm);
    throw Exception(r, std::string(strataGetErrorString(r)) + (msg.empty() ? "" : ": " + msg));
  }
}
}  // namespace detail

/// The strataDataType_t of a C++ element type.
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
class Work {
 public:
  Work() = default;
  explicit Work(strataWork_t w) : work_(w, &strataWorkFree) {}
  /// Waits up to timeoutMs (< 0: no limit). Returns true when complete; throws if the work failed.
  bool wait(int64_t timeoutMs = -1) {
    if (!work_) return true;
    strataResult_t r = strataWorkWait(work_.get(), timeoutMs);
    if (r == strataInProgress) return false;
    detail::check(r);
    return true;
  }
  /// True when complete (throws if it failed).
  bool test() {
    if (!work_) return true;
    int done = 0;
    detail::check(strataWorkTest(work_.get(), &done));
    return done != 0;
  }
  /// The failure message, "" while running or after success.
  std::string error() const { return work_ ? strataWorkError(work_.get()) : ""; }

 private:
  std::shared_ptr<strataWork> work_;
};

/// A communicator. Move-only; destroyed (waiting for outstanding work) when it goes out of scope.
class Communicator {
 public:
  Communicator() = default;
  /// Joins the group of `nranks` ranks identified by `id` as `rank` (collective).
  Communicator(int nranks, const strataUniqueId& id, int rank) {
    detail::check(strataCommInitRank(&comm_, nranks, id, rank));
  }
  /// Joins the group described by the launcher's environment (strata-run, torchrun, mpirun, srun).
  static Communicator fromEnv() {
    Communicator c;
    detail::check(strataCommInitFromEnv(&c.comm_));
    return c;
  }
  static strataUniqueId uniqueId() {
    strataUniqueId id;
    detail::check(strataGetUniqueId(&id));
    return id;
  }
  ~Communicator() {
    if (comm_) strataCommDestroy(comm_);
  }
  Communicator(Communicator&& o) noexcept : comm_(std::exchange(o.comm_, nullptr)) {}
  Communicator& operator=(Communicator&& o) noexcept {
    if (this != &o) {
      if (comm_) strataCommDestroy(comm_);
      comm_ = std::exchange(o.comm_, nullptr);
    }
    return *this;
  }
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const {
    int r = 0;
    detail::check(strataCommUserRank(comm_, &r), comm_);
    return r;
  }
  int size() const {
    int n = 0;
    detail::check(strataCommCount(comm_, &n), comm_);
    return n;
  }
  strataComm_t get() const { return comm_; }
  explicit operator bool() const { return comm_ != nullptr; }

  /// Ranks with equal color form a new communicator ordered by key; an empty one for STRATA_SPLIT_NOCOLOR.
  Communicator split(int color, int key) const {
    Communicator c;
    detail::check(strataCommSplit(comm_, color, key, &c.comm_, nullptr), comm_);
    return c;
  }
  void abort() {
    if (comm_) strataCommAbort(std::exchange(comm_, nullptr));
  }

  // Blocking collectives on host buffers (type-erased forms; the templates below deduce dtype).
  void allReduce(const void* send, void* recv, size_t count, strataDataType_t dt, strataRedOp_t op) {
    detail::check(strataAllReduce(send, recv, count, dt, op, comm_, nullptr), comm_);
  }
  void reduceScatter(const void* send, void* recv, size_t recvcount, strataDataType_t dt, strataRedOp_t op) {
    detail::check(strataReduceScatter(send, recv, recvcount, dt, op, comm_, nullptr), comm_);
  }
  void allGather(const void* send, void* recv, size_t sendcount, strataDataType_t dt) {
    detail::check(strataAllGather(send, recv, sendcount, dt, comm_, nullptr), comm_);
  }
  void broadcast(const void* send, void* recv, size_t count, strataDataType_t dt, int root) {
    detail::check(strataBroadcast(send, recv, count, dt, root, comm_, nullptr), comm_);
  }
  void reduce(const void* send, void* recv, size_t count, strataDataType_t dt, strataRedOp_t op, int root) {
    detail::check(strataReduce(send, recv, count, dt, op, root, comm_, nullptr), comm_);
  }
  void allToAll(const void* send, void* recv, size_t count, strataDataType_t dt) {
    detail::check(strataAllToAll(send, recv, count, dt, comm_, nullptr), comm_);
  }
  void send(const void* buf, size_t count, strataDataType_t dt, int peer) {
    detail::check(strataSend(buf, count, dt, peer, comm_, nullptr), comm_);
  }
  void recv(void* buf, size_t count, strataDataType_t dt, int peer) {
    detail::check(strataRecv(buf, count, dt, peer, comm_, nullptr), comm_);
  }
  void barrier() { detail::check(strataBarrier(comm_, nullptr), comm_); }

  template <typename T>
  void allReduce(const T* send, T* recv, size_t count, strataRedOp_t op = strataSum) {
    allReduce(send, recv, count, dataTypeOf<T>(), op);
  }

  // Asynchronous forms: return at once; the Work completes when the result is in place.
  Work allReduceAsync(const void* send, void* recv, size_t count, strataDataType_t dt, strataRedOp_t op) {
    return async([&] { return strataAllReduce(send, recv, count, dt, op, comm_, nullptr); });
  }
  Work reduceScatterAsync(const void* send, void* recv, size_t recvcount, strataDataType_t dt, strataRedOp_t op) {
    return async([&] { return strataReduceScatter(send, recv, recvcount, dt, op, comm_, nullptr); });
  }
  Work allGatherAsync(const void* send, void* recv, size_t sendcount, strataDataType_t dt) {
    return async([&] { return strataAllGather(send, recv, sendcount, dt, comm_, nullptr); });
  }
  Work broadcastAsync(const void* send, void* recv, size_t count, strataDataType_t dt, int root) {
    return async([&] { return strataBroadcast(send, recv, count, dt, root, comm_, nullptr); });
  }
  Work reduceAsync(const void* send, void* recv, size_t count, strataDataType_t dt, strataRedOp_t op, int root) {
    return async([&] { return strataReduce(send, recv, count, dt, op, root, comm_, nullptr); });
  }
  Work allToAllAsync(const void* send, void* recv, size_t count, strataDataType_t dt) {
    return async([&] { return strataAllToAll(send, recv, count, dt, comm_, nullptr); });
  }
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

/// RAII group: operations issued while it lives run together when it ends.
class Group {
 public:
  Group() { detail::check(strataGroupStart()); }
  ~Group() noexcept(false) {
    if (!ended_) detail::check(strataGroupEnd());
  }
  /// Ends the group now, returning a Work instead of waiting.
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
