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
  /// (a blocking call). Throws if the communicator has failed or was destroyed. With nothing queued, no one
  /// waiting and no executor running, the queue is claimed with one atomic instruction and released with another
  /// (no mutex): the training loop's back-to-back blocking calls.
  template <typename F>
  void runInline(F&& f) {
    failure_.throwIfFailed();
    uint32_t idle = 0;
    if (!state_.compare_exchange_strong(idle, kBusy, std::memory_order_acquire, std::memory_order_relaxed))
      claimSlow(/*giveUpOnFailure=*/true);
    Release release{this};
    failure_.throwIfFailed();
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
    claimSlow(/*giveUpOnFailure=*/false);
    Release release{this};
    f();
  }
  /// Waits until no call runs and none is queued (revoke).
  void waitQuiet() {
    std::unique_lock<std::mutex> lk(mutex_);
    waitIdle(lk, [&] { return items_.empty() && !busy(); });
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
  // state_: kBusy while an executor (an inline caller or the worker) runs calls; kBlocked while the fast claim
  // of runInline must not be taken: items are queued, a thread waits in waitIdle(), or the queue is closed. The
  // fast path claims only from 0 and releases only to 0, so whenever anything else is going on both go through
  // the mutex. kBlocked is changed under mutex_ only (syncBlocked); kBusy is claimed by compare-and-swap from
  // either side, so exactly one claimer wins.
  static constexpr uint32_t kBusy = 1, kBlocked = 2;
  bool busy() const { return (state_.load(std::memory_order_acquire) & kBusy) != 0; }
  /// Sets kBusy if it is clear; under mutex_ or not.
  bool tryClaim() {
    uint32_t s = state_.load(std::memory_order_relaxed);
    while (!(s & kBusy))
      if (state_.compare_exchange_weak(s, s | kBusy, std::memory_order_acquire, std::memory_order_relaxed)) return true;
    return false;
  }
  /// Recomputes kBlocked; under mutex_.
  void syncBlocked() {
    if (blockingWaiters_ > 0 || !items_.empty() || closed_) state_.fetch_or(kBlocked, std::memory_order_relaxed);
    else state_.fetch_and(~kBlocked, std::memory_order_relaxed);
  }
  /// Claims the queue through the mutex once nothing is queued and no executor runs. Throws if the queue is closed,
  /// and, with giveUpOnFailure, if the communicator fails meanwhile.
  void claimSlow(bool giveUpOnFailure);
  /// Clears kBusy; wakes waiters if there are any.
  void release() {
    uint32_t busyOnly = kBusy;
    if (state_.compare_exchange_strong(busyOnly, 0, std::memory_order_release, std::memory_order_relaxed)) return;
    bool wake;
    {
      std::lock_guard<std::mutex> lk(mutex_);
      state_.fetch_and(~kBusy, std::memory_order_release);
      wake = waiters_ > 0;
    }
    if (wake) cv_.notify_all();
  }
  struct Release {
    WorkQueue* q;
    ~Release() { q->release(); }
  };
  /// cv_.wait, counted in waiters_ (so that a release with nobody waiting skips the notify) and, unless it is the
  /// idle worker's wait for items (which a release need not end: queued items block the fast path themselves), in
  /// blockingWaiters_ (so that a release while someone waits goes through the mutex).
  template <typename Pred>
  void waitIdle(std::unique_lock<std::mutex>& lk, Pred pred, bool blocksFastPath = true) {
    ++waiters_;
    blockingWaiters_ += blocksFastPath ? 1 : 0;
    syncBlocked();
    cv_.wait(lk, pred);
    --waiters_;
    blockingWaiters_ -= blocksFastPath ? 1 : 0;
    syncBlocked();
  }
  [[noreturn]] void throwClosed() const;
  void workerLoop();

  const int rank_;
  const FailureState& failure_;
  Runner runner_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Item> items_;
  std::atomic<uint32_t> state_{0};  // kBusy | kBlocked, see above
  int waiters_ = 0;                 // threads inside waitIdle(); under mutex_
  int blockingWaiters_ = 0;         // those of them that block the fast path; under mutex_
  bool closed_ = false;
  bool stopWorker_ = false;
  std::thread worker_;
};

}  // namespace strata
