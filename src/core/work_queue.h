// The order calls run in. A communicator runs its work in issue order, one executor at a time: a blocking call
// with nothing queued runs inline on the caller's thread (the lowest latency), asynchronous work goes to the
// communicator's worker thread, which starts with the first such work.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/call.h"
#include "core/failure.h"
#include "util/error.h"

namespace strata {

/// Completion of a batch of calls on one communicator.
class Task {
 public:
  void complete(strataResult_t result, std::string error);
  /// Waits until done or timeoutMs passes (< 0: forever). Returns false on timeout.
  bool wait(int64_t timeoutMs);
  bool done() const { return done_.load(std::memory_order_acquire); }
  strataResult_t result() const { return result_; }
  const std::string& error() const { return error_; }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::atomic<bool> done_{false};
  strataResult_t result_ = strataSuccess;
  std::string error_;
};

class WorkQueue {
 public:
  /// Runs one item's calls on the worker thread (the communicator's executor).
  using Runner = std::function<void(std::span<const CollCall>)>;
  WorkQueue(int rank, const FailureState& failure, Runner runner);
  /// close() must have been called: the worker is joined there.
  ~WorkQueue();

  /// Runs `f` on the calling thread once every earlier call has finished, holding the queue while it runs
  /// (a blocking call). Throws if the communicator has failed or was destroyed.
  template <typename F>
  void runInline(F&& f) {
    failure_.throwIfFailed();
    {
      std::unique_lock<std::mutex> lk(mutex_);
      if (closed_) throwClosed();
      waitIdle(lk, [&] { return (items_.empty() && !busy_) || failure_.failed(); });
      failure_.throwIfFailed();
      busy_ = true;
    }
    Release release{this};
    f();
  }

  /// Like runInline, but does not give up when the communicator fails meanwhile (split keeps this rule).
  template <typename F>
  void runExclusive(F&& f) {
    failure_.throwIfFailed();
    runQuiesced(std::forward<F>(f));
  }

  /// Runs `f` once no call runs and none is queued, failed or not (shrink: after a failure, work ends at once).
  template <typename F>
  void runQuiesced(F&& f) {
    {
      std::unique_lock<std::mutex> lk(mutex_);
      if (closed_) throwClosed();
      waitIdle(lk, [&] { return items_.empty() && !busy_; });
      busy_ = true;
    }
    Release release{this};
    f();
  }
  /// Waits until no call runs and none is queued (revoke).
  void waitQuiet() {
    std::unique_lock<std::mutex> lk(mutex_);
    waitIdle(lk, [&] { return items_.empty() && !busy_; });
  }

  /// Queues the calls behind earlier work and returns at once. `before` runs on the worker just before the
  /// calls (it may throw: the calls then fail), `after` always runs once they finished or failed, or when the
  /// work is dropped by abort.
  std::shared_ptr<Task> submit(std::vector<CollCall> calls, std::function<void()> before = {},
                               std::function<void(strataResult_t)> after = {});

  /// Fails every queued item that has not started (abort), running its `after`.
  void dropPending(strataResult_t result, const std::string& message);
  /// Waits for queued work to finish (or for an abort), refuses new work and joins the worker. Returns false
  /// if it was already closed. Idempotent.
  bool close();
  /// close() has been called.
  bool closed() const;

 private:
  struct Item {
    std::vector<CollCall> calls;
    std::shared_ptr<Task> task;
    std::function<void()> before;
    std::function<void(strataResult_t)> after;
  };
  // Frees the queue after an inline call; a blocking caller alone (no worker, no other thread) wakes nobody.
  struct Release {
    WorkQueue* q;
    ~Release() {
      bool wake;
      {
        std::lock_guard<std::mutex> lk(q->mutex_);
        q->busy_ = false;
        wake = q->waiters_ > 0;
      }
      if (wake) q->cv_.notify_all();
    }
  };
  /// cv_.wait, counted in waiters_ so that a release with nobody waiting skips the notify.
  template <typename Pred>
  void waitIdle(std::unique_lock<std::mutex>& lk, Pred pred) {
    ++waiters_;
    cv_.wait(lk, pred);
    --waiters_;
  }
  [[noreturn]] void throwClosed() const;
  void workerLoop();

  const int rank_;
  const FailureState& failure_;
  Runner runner_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Item> items_;
  bool busy_ = false;  // an executor (inline caller or worker) is running calls
  int waiters_ = 0;    // threads inside waitIdle(); under mutex_
  bool closed_ = false;
  bool stopWorker_ = false;
  std::thread worker_;
};

}  // namespace strata
