#include "core/failure.h"

#include "util/error.h"

namespace strata {

bool FailureState::record(strataResult_t code, const std::string& message) {
  std::function<void(strataResult_t, const std::string&)> listener;
  {
    std::lock_guard<std::mutex> lk(mutex_);
    if (failed_.load()) return false;
    code_ = code;
    message_ = message;
    failed_.store(true, std::memory_order_release);
    for (uint32_t* w : words_) std::atomic_ref<uint32_t>(*w).store(1, std::memory_order_release);
    if (!aborted_.load()) listener = std::move(listener_);
    listener_ = nullptr;
  }
  if (listener) listener(code, message);
  return true;
}

void FailureState::setListener(std::function<void(strataResult_t, const std::string&)> listener) {
  std::lock_guard<std::mutex> lk(mutex_);
  listener_ = std::move(listener);
}

void FailureState::watch(uint32_t* word) const {
  std::lock_guard<std::mutex> lk(mutex_);
  words_.push_back(word);
  if (failed_.load()) std::atomic_ref<uint32_t>(*word).store(1, std::memory_order_release);
}

void FailureState::unwatch(uint32_t* word) const {
  std::lock_guard<std::mutex> lk(mutex_);
  std::erase(words_, word);
}

void FailureState::markAborted() {
  aborted_.store(true);
  record(strataInvalidUsage, strprintf("rank %d: communicator aborted", rank_));
}

strataResult_t FailureState::code() const {
  std::lock_guard<std::mutex> lk(mutex_);
  return code_;
}

std::string FailureState::message() const {
  std::lock_guard<std::mutex> lk(mutex_);
  return message_;
}

void FailureState::throwFailed() const {
  std::lock_guard<std::mutex> lk(mutex_);
  throw Error(code_ == strataSuccess ? strataInvalidUsage : code_,
              strprintf("rank %d: communicator is unusable after an earlier error: %s", rank_, message_.c_str()));
}

}  // namespace strata
