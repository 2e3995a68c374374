// A communicator's failure state: the first error that made it unusable (its own, a peer's reported by the
// bootstrap, or an abort), read on every call and while every wait stalls.
#pragma once

#include <atomic>
#include <mutex>
#include <string>

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
};

}  // namespace strata
