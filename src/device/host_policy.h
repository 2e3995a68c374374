// The CPU execution policy of the device protocol (device/proto.h): a lane's group is one CPU thread, or several
// (HostGroup: a barrier in place of __syncthreads, a shared word in place of the block's shared memory, so the
// leader-waits-then-everyone-moves structure the GPU runs is exercised on the CPU too); atomics are
// std::atomic_ref on the shared memory the ranks map (a shared mapping in place of CUDA IPC); the clock is
// steady_clock; waiting spins briefly, then yields, then sleeps, so ranks sharing few cores never starve each
// other (a busy-wait without back-off looks like a hang on a 2-core machine).
#pragma once

#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdint>
#include <thread>

#include "device/dev_types.h"

namespace strata::devproto {

/// What the threads of one lane share (one per lane of a call): the block's barrier and shared words.
struct HostGroup {
  explicit HostGroup(uint32_t threads) : size(threads), barrier(static_cast<std::ptrdiff_t>(threads)) {}
  uint32_t size;
  std::barrier<> barrier;
  uint32_t word = 0;                // broadcast: written by the leader between two barriers
  std::atomic<uint32_t> orWord{0};  // anyFailed
};

struct HostPolicy {
  HostGroup* group = nullptr;  // nullptr: a group of one thread
  uint32_t thread = 0;         // this thread's index in the group

  // As DevicePolicy's: a group of any size, each thread's vectors consecutive.
  static constexpr uint32_t kWarp = 1;
  static constexpr uint32_t kMinThreads = 1;

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
  // LL128 (device/proto.h): a thread writes and reads whole lines, eight vectors. The flag (the last word) is
  // stored last with release and loaded first with acquire, so the line's data seen after a matching flag is the
  // data written before it; the data words are relaxed atomics (a reader may poll a line being written).
  static constexpr uint32_t kLineThreads = 1;
  template <uint32_t N>
  static void storeLinePart(Vec16* p, const Vec16 (&v)[N], bool holdsFlag) {
    auto* w = reinterpret_cast<uint64_t*>(p);
    for (uint32_t j = 0; j < 2 * N; ++j) {
      const uint64_t x =
          static_cast<uint64_t>(v[j / 2].w[2 * (j % 2)]) | (static_cast<uint64_t>(v[j / 2].w[2 * (j % 2) + 1]) << 32);
      std::atomic_ref<uint64_t>(w[j]).store(
          x, holdsFlag && j == 2 * N - 1 ? std::memory_order_release : std::memory_order_relaxed);
    }
  }
  template <uint32_t N>
  static void loadLinePart(const Vec16* p, Vec16 (&v)[N], bool holdsFlag) {
    auto* w = reinterpret_cast<uint64_t*>(const_cast<Vec16*>(p));
    const uint32_t last = 2 * N - 1;
    uint64_t words[2 * N];
    if (holdsFlag) words[last] = std::atomic_ref<uint64_t>(w[last]).load(std::memory_order_acquire);
    for (uint32_t j = 0; j < 2 * N; ++j)
      if (!holdsFlag || j != last) words[j] = std::atomic_ref<uint64_t>(w[j]).load(std::memory_order_relaxed);
    for (uint32_t j = 0; j < 2 * N; ++j) {
      v[j / 2].w[2 * (j % 2)] = static_cast<uint32_t>(words[j]);
      v[j / 2].w[2 * (j % 2) + 1] = static_cast<uint32_t>(words[j] >> 32);
    }
  }
  // A warp's vote (one thread here).
  static bool warpAll(bool x) { return x; }
  static bool warpAny(bool x) { return x; }

  static Vec16 load16(const void* p) { return *static_cast<const Vec16*>(p); }
  static void store16(void* p, const Vec16& v) { *static_cast<Vec16*>(p) = v; }
  static uint64_t nowNs() {
    return static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
            .count());
  }

  // The group.
  uint32_t tid() const { return thread; }
  uint32_t nthreads() const { return group ? group->size : 1; }
  void sync() const {
    if (group) group->barrier.arrive_and_wait();
  }
  // The leader's value, seen by every thread.
  uint32_t broadcast(uint32_t v) const {
    if (!group) return v;
    if (thread == 0) group->word = v;
    sync();
    const uint32_t out = group->word;
    sync();
    return out;
  }
  // Nonzero on every thread when any thread passed nonzero (__syncthreads_or).
  uint32_t anyFailed(uint32_t v) const {
    if (!group) return v;
    if (v != 0) group->orWord.store(1, std::memory_order_relaxed);
    sync();
    const uint32_t out = group->orWord.load(std::memory_order_relaxed);
    sync();
    if (thread == 0) group->orWord.store(0, std::memory_order_relaxed);
    sync();
    return out;
  }
  // The group's writes reach the leader through the barrier (happens-before), and its release store of a head
  // publishes them: nothing more is needed on the CPU.
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
