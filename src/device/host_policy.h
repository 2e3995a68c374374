// The CPU execution policy of the device protocol (device/proto.h): a lane's group is one CPU thread; atomics are
// std::atomic_ref on the shared memory the ranks map (a shared mapping in place of CUDA IPC); the clock is
// steady_clock; waiting spins briefly, then yields, then sleeps, so ranks sharing few cores never starve each
// other (a busy-wait without back-off looks like a hang on a 2-core machine).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

namespace strata::devproto {

struct HostPolicy {
  template <class T>
  static T loadAcquire(const T* p) {
    return std::atomic_ref<T>(*const_cast<T*>(p)).load(std::memory_order_acquire);
  }
  template <class T>
  static T loadRelaxed(const T* p) {
    return std::atomic_ref<T>(*const_cast<T*>(p)).load(std::memory_order_relaxed);
  }
  template <class T>
  static void storeRelease(T* p, T v) {
    std::atomic_ref<T>(*p).store(v, std::memory_order_release);
  }
  template <class T>
  static void storeRelaxed(T* p, T v) {
    std::atomic_ref<T>(*p).store(v, std::memory_order_relaxed);
  }
  static bool casU32(uint32_t* p, uint32_t expected, uint32_t desired) {
    return std::atomic_ref<uint32_t>(*p).compare_exchange_strong(expected, desired, std::memory_order_acq_rel);
  }
  static uint32_t fetchAddU32(uint32_t* p, uint32_t v) {
    return std::atomic_ref<uint32_t>(*p).fetch_add(v, std::memory_order_acq_rel);
  }
  static uint64_t nowNs() {
    return static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
            .count());
  }

  // The group: one thread.
  uint32_t tid() const { return 0; }
  uint32_t nthreads() const { return 1; }
  void sync() const {}
  uint32_t broadcastFailure(uint32_t v) const { return v; }
  uint32_t anyFailed(uint32_t v) const { return v; }
  // The release store of a head already orders the data for the one thread that wrote it.
  void fenceSystem() const {}
  void backoff(uint32_t spins) const {
    if (spins < 64) return;
    if (spins < 4096) {
      std::this_thread::yield();
      return;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
};

}  // namespace strata::devproto
