// A communicator's failure state: the first error that made it unusable (its own, a peer's reported by the
// bootstrap, or an abort), read on every call and while every wait stalls.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "strata/strata.h"

namespace strata {

class FailureState {
 public:
  explicit FailureState(int rank) : rank_(rank) {}

  /// Records the first failure; later ones are ignored. Returns true if this one was the first.
  bool record(strataResult_t code, const std::string& message);
  /// strataCommAbort: records "communicator aborted" (unless an earlier failure is kept) and marks the abort,
  /// so teardown does not wait for peers.
  void markAborted();

  bool failed() const { return failed_.load(std::memory_order_acquire); }
  bool aborted() const { return aborted_.load(std::memory_order_acquire); }
  /// The first failure's code (strataSuccess if none) and message.
  strataResult_t code() const;
  std::string message() const;
  /// Words set to 1 (a release store) when the communicator fails or is aborted, or at once if it already has:
  /// the abort words that device kernels poll (mapped host memory), so a peer's death seen by the bootstrap or a
  /// strataCommAbort ends every device wait. A subscription, not a change of the state, hence const.
  void watch(uint32_t* word) const;
  void unwatch(uint32_t* word) const;
  /// Called once, with the code and message, after the first failure that is not an abort is recorded (outside the
  /// state's lock, on the recording thread): a sub-communicator's failure made its parent's.
  void setListener(std::function<void(strataResult_t, const std::string&)> listener);
  /// Throws the "unusable after an earlier error" error if the communicator has failed.
  void throwIfFailed() const {
    if (failed()) throwFailed();
  }

 private:
  [[noreturn]] void throwFailed() const;

  const int rank_;
  std::atomic<bool> failed_{false};
  std::atomic<bool> aborted_{false};
  mutable std::mutex mutex_;
  strataResult_t code_ = strataSuccess;
  std::string message_;
  mutable std::vector<uint32_t*> words_;                              // under mutex_
  std::function<void(strataResult_t, const std::string&)> listener_;  // under mutex_
};

}  // namespace strata
