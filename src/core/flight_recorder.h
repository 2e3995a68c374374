// The flight recorder: every communicator keeps its last N operations (STRATA_FLIGHT_RECORDER_ENTRIES, default
// 2000; 0: off), each with its number, kind, type, op, count, root or peer, algorithm, state and times, and
// writes them as JSON (one file per rank) when it times out, fails, hears of a peer's failure, is aborted, gets
// SIGUSR1, or is asked (strataCommDumpFlightRecorder). `strata-doctor DIR` reads the files of all ranks.
//
// One thread records (the one executing the communicator's work); any thread may dump. Entries are words of
// relaxed atomics under a per-entry version (a seqlock): recording costs a few plain stores and one coarse clock
// read, and a dump skips an entry caught mid-write.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/call.h"

namespace strata {

class FlightRecorder {
 public:
  enum class State : uint8_t { kStarted = 1, kCompleted = 2, kFailed = 3 };

  explicit FlightRecorder(size_t capacity);
  size_t capacity() const { return capacity_; }

  /// Records that operation `seq` (a collective's number, or a send/recv group's) started; returns its id for
  /// finish(). `peer` is the first peer of a send/recv group (-1 otherwise); `count` is its number of calls.
  uint64_t start(uint64_t seq, CollKind kind, strataDataType_t dtype, strataRedOp_t op, size_t count, int root,
                 int peer, const char* algorithm);
  void finish(uint64_t id, State state);

  /// Everything recorded, oldest first, as the "entries" array of a dump.
  std::string entriesJson() const;

 private:
  struct Entry {
    std::atomic<uint64_t> version{0};  // odd while being written
    std::atomic<uint64_t> seq{0};
    std::atomic<uint64_t> meta{0};       // kind | dtype << 8 | op << 16 | state << 24 | (root + 1) << 32 (20 bits)
    std::atomic<uint64_t> peerCount{0};  // (peer + 1) << 44 | count (44 bits)
    std::atomic<uint64_t> startNs{0}, endNs{0};
    std::atomic<uint64_t> algo[2]{};  // up to 16 characters of the algorithm's name
  };
  const size_t capacity_;
  std::unique_ptr<Entry[]> entries_;
  std::atomic<uint64_t> next_{0};  // ids: entry id % capacity_
};

/// Wall-clock nanoseconds from the coarse clock (a few ns to read; resolution of a scheduler tick).
uint64_t flightClockNs();

}  // namespace strata
