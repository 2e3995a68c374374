// The POSIX shared-memory segments the shm FIFOs live in (internal to src/transport/shm/): their names, their
// creation and mapping with the checks a peer's segment must pass, and the removal of segments that a process
// killed during set-up left in /dev/shm (transport.h: shm::removeStaleSegments).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

namespace strata::shm {

/// A fresh, unguessable segment name for the FIFO that `receiver` creates for messages from `sender`:
/// "/strata-<commId>-<sender>-<receiver>-<tag>-<random>". The prefix is what removeStaleSegments looks for.
std::string newFifoSegmentName(uint64_t commId, int sender, int receiver, uint32_t tag);
/// Whether a name a peer sent is a FIFO segment name (the prefix, and no other '/').
bool isFifoSegmentName(const std::string& name);

/// A mapped POSIX shared-memory segment. Unmaps on destruction, and unlinks the name too while this
/// process still owns it (setup failed before the peer mapped it).
class ShmSegment {
 public:
  ShmSegment() = default;
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;
  ShmSegment(ShmSegment&& o) noexcept { *this = std::move(o); }
  ShmSegment& operator=(ShmSegment&& o) noexcept;
  ~ShmSegment() { release(); }

  /// Creates, sizes, maps and pre-faults a new segment readable and writable by this user only.
  static ShmSegment create(const std::string& name, size_t bytes, int me, int peer);
  /// Maps an existing segment created by the peer, after checking it belongs to this user, is private
  /// to it and is large enough.
  static ShmSegment open(const std::string& name, size_t bytes, int me, int peer);

  /// Removes the name from /dev/shm; the mappings stay valid.
  void unlink();

  void* base() const { return base_; }
  const std::string& name() const { return name_; }

 private:
  void map(int fd, size_t bytes, int me);
  void release();

  std::string name_;
  void* base_ = nullptr;
  size_t bytes_ = 0;
  bool linked_ = false;
};

}  // namespace strata::shm
