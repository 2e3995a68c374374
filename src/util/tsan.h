// ThreadSanitizer annotations for the synchronization it cannot see. Ranks that are threads of one process (the
// unit tests') talk through shared-memory segments that each maps at its own address, so TSan, which follows
// addresses, sees no order between a sender's release and its peer's acquire. The transport tells it through one
// object per segment name (tsanRelease/tsanAcquire). Without TSan these compile to nothing.
#pragma once

#include <cstdint>
#include <string_view>

#if defined(__SANITIZE_THREAD__)
#define STRATA_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define STRATA_TSAN 1
#endif
#endif

#ifdef STRATA_TSAN
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
#endif

namespace strata {

/// A key for a name both sides know (a segment's), the same in every thread of the process.
inline uint64_t tsanKey(std::string_view name) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (char c : name) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  return h;
}

#ifdef STRATA_TSAN
inline char* tsanSyncObject(uint64_t key) {
  static char objects[4096];  // distinct keys may share one: that only adds order, it never hides a release
  return &objects[key % sizeof(objects)];
}
inline void tsanRelease(uint64_t key) { __tsan_release(tsanSyncObject(key)); }
inline void tsanAcquire(uint64_t key) { __tsan_acquire(tsanSyncObject(key)); }
#else
inline void tsanRelease(uint64_t) {}
inline void tsanAcquire(uint64_t) {}
#endif

}  // namespace strata
