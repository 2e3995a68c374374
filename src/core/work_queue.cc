#include "core/work_queue.h"

#include <chrono>

namespace strata {

// ---- Task ---------------------------------------------------------------------------------------------

void Task::complete(strataResult_t result, std::string error) {
  {
    std::lock_guard<std::mutex> lk(mutex_);
    result_ = result;
    error_ = std::move(error);
    done_.store(true, std::memory_order_release);
  }
  cv_.notify_all();
}

bool Task::wait(int64_t timeoutMs) {
  std::unique_lock<std::mutex> lk(mutex_);
  if (timeoutMs < 0) {
    cv_.wait(lk, [&] { return done_.load(); });
    return true;
  }
  return cv_.wait_for(lk, std::chrono::milliseconds(timeoutMs), [&] { return done_.load(); });
}

// ---- WorkQueue ----------------------------------------------------------------------------------------

WorkQueue::WorkQueue(int rank, const FailureState& failure, Runner runner)
    : rank_(rank), failure_(failure), runner_(std::move(runner)) {}

WorkQueue::~WorkQueue() { close(); }

void WorkQueue::throwClosed() const {
  throw InvalidUsage(strprintf("rank %d: communicator used after destroy", rank_));
}

void WorkQueue::claimSlow(bool giveUpOnFailure) {
  std::unique_lock<std::mutex> lk(mutex_);
  for (;;) {
    if (closed_) throwClosed();
    if (giveUpOnFailure) failure_.throwIfFailed();
    if (items_.empty() && tryClaim()) return;
    waitIdle(lk, [&] { return closed_ || (items_.empty() && !busy()) || (giveUpOnFailure && failure_.failed()); });
  }
}

std::shared_ptr<Task> WorkQueue::submit(std::vector<CollCall> calls, std::function<void()> before,
                                        std::function<void(strataResult_t)> after) {
  failure_.throwIfFailed();
  auto task = std::make_shared<Task>();
  {
    std::lock_guard<std::mutex> lk(mutex_);
    if (closed_) throwClosed();
    items_.push_back(Item{std::move(calls), task, std::move(before), std::move(after)});
    syncBlocked();
    if (!worker_.joinable()) worker_ = std::thread([this] { workerLoop(); });
  }
  cv_.notify_all();
  return task;
}

void WorkQueue::workerLoop() {
  std::unique_lock<std::mutex> lk(mutex_);
  for (;;) {
    waitIdle(
        lk, [&] { return stopWorker_ || (!items_.empty() && !busy()); }, /*blocksFastPath=*/false);
    if (items_.empty()) {
      if (stopWorker_) return;
      continue;
    }
    if (!tryClaim()) continue;  // cannot happen: with items queued the fast claim is blocked
    Item item = std::move(items_.front());
    items_.pop_front();
    syncBlocked();
    lk.unlock();
    strataResult_t result = strataSuccess;
    std::string message;
    try {
      failure_.throwIfFailed();
      if (item.before) item.before();
      runner_(item.calls);
    } catch (const Error& e) {
      result = e.code();
      message = e.what();
    } catch (const std::exception& e) {
      result = strataInternalError;
      message = e.what();
    }
    if (item.after) item.after(result);
    item.task->complete(result, message);
    lk.lock();
    state_.fetch_and(~kBusy, std::memory_order_release);
    cv_.notify_all();
  }
}

void WorkQueue::dropPending(strataResult_t result, const std::string& message) {
  {
    std::lock_guard<std::mutex> lk(mutex_);
    for (auto& item : items_) {
      item.task->complete(result, message);
      if (item.after) item.after(result);
    }
    items_.clear();
    syncBlocked();
  }
  cv_.notify_all();
}

bool WorkQueue::close() {
  {
    std::unique_lock<std::mutex> lk(mutex_);
    if (closed_) return false;
    waitIdle(lk, [&] { return (items_.empty() && !busy()) || failure_.aborted(); });
    closed_ = true;
    stopWorker_ = true;
    syncBlocked();
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
  return true;
}

bool WorkQueue::closed() const {
  std::lock_guard<std::mutex> lk(mutex_);
  return closed_;
}

}  // namespace strata
