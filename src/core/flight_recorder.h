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
#include <mutex>
#include <string>
#include <vector>

#include "core/call.h"

namespace strata {

class FlightRecorder {
 public:
  enum class State : uint8_t { kStarted = 1, kCompleted = 2, kFailed = 3, kRefused = 4 };

  explicit FlightRecorder(size_t capacity);
  size_t capacity() const { return capacity_; }

  /// Records that operation `seq` (a collective's number, or a send/recv group's) started; returns its id for
  /// finish(). `peer` is the first peer of a send/recv group (-1 otherwise); `count` is its number of calls.
  uint64_t start(uint64_t seq, CollKind kind, strataDataType_t dtype, strataRedOp_t op, size_t count, int root,
                 int peer, const char* algorithm);
  void finish(uint64_t id, State state);

  /// A call refused on entry because the communicator had already failed: what this rank tried next is what tells
  /// a desync from a late rank, and no executor runs it. Any thread may call it; the first kMaxRefused are kept
  /// (after the ring's entries in a dump). `seq` is the number the call would have had. Returns true for the
  /// first such call, whose caller rewrites the rank's dump so that it shows the call.
  bool refuse(uint64_t seq, CollKind kind, strataDataType_t dtype, strataRedOp_t op, size_t count, int root, int peer);
  static constexpr size_t kMaxRefused = 16;

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
  // One entry as a dump shows it.
  struct Record {
    uint64_t id = 0, seq = 0, meta = 0, peerCount = 0, startNs = 0, endNs = 0;
    uint64_t algo[2] = {0, 0};
  };
  static uint64_t packMeta(CollKind kind, strataDataType_t dtype, strataRedOp_t op, State state, int root);
  static uint64_t packPeerCount(int peer, size_t count);
  static void appendJson(std::string& out, const Record& r);

  const size_t capacity_;
  std::unique_ptr<Entry[]> entries_;
  std::atomic<uint64_t> next_{0};  // ids: entry id % capacity_
  mutable std::mutex refusedMutex_;
  std::vector<Record> refused_;  // under refusedMutex_
};

/// Wall-clock nanoseconds from the coarse clock (a few ns to read; resolution of a scheduler tick).
uint64_t flightClockNs();

}  // namespace strata
