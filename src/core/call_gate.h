// The calls inside a communicator. Destroy and abort may come from any thread (a watchdog aborts while the
// training thread is blocked in a collective): they close the gate and wait until every call inside has left,
// and only then free what those calls use.
#pragma once

#include <atomic>
#include <condition_variable>
#include <mutex>

namespace strata {

class CallGate {
 public:
  /// One call inside the gate, from construction to destruction. ok() is false if the gate was closed first:
  /// the call must not touch the communicator.
  class Scope {
   public:
    explicit Scope(CallGate& gate) : gate_(gate) {
      gate_.inside_.fetch_add(1);
      ok_ = !gate_.closed_.load();
      if (!ok_) gate_.leave();
    }
    ~Scope() {
      if (ok_) gate_.leave();
    }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;
    bool ok() const { return ok_; }

   private:
    CallGate& gate_;
    bool ok_;
  };

  /// Refuses new calls and waits until every call inside has left. Idempotent. Must not be called from inside
  /// the gate (it would wait for itself).
  void closeAndWait() {
    closed_.store(true);
    std::unique_lock<std::mutex> lk(mutex_);
    cv_.wait(lk, [&] { return inside_.load() == 0; });
  }
  bool closed() const { return closed_.load(); }

 private:
  // Sequentially consistent throughout: a call that saw the gate open is counted before the closer reads the
  // count, and a closer that saw a count is woken by the last call's leave().
  void leave() {
    if (inside_.fetch_sub(1) == 1 && closed_.load()) {
      std::lock_guard<std::mutex> lk(mutex_);
      cv_.notify_all();
    }
  }

  std::atomic<int> inside_{0};
  std::atomic<bool> closed_{false};
  std::mutex mutex_;
  std::condition_variable cv_;
};

}  // namespace strata
