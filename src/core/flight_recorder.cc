#include "core/flight_recorder.h"

#include <time.h>

#include <algorithm>
#include <cstring>

#include "collectives/coll_args.h"
#include "util/dtype.h"
#include "util/error.h"
#include "util/json_escape.h"

namespace strata {
namespace {

const char* opText(unsigned op) {
  switch (op) {
    case strataSum: return "sum";
    case strataProd: return "prod";
    case strataMax: return "max";
    case strataMin: return "min";
    case strataAvg: return "avg";
    default: return "premulsum";
  }
}

const char* stateText(unsigned s) {
  switch (s) {
    case 1: return "started";
    case 2: return "completed";
    case 3: return "failed";
    case 4: return "refused";
    default: return "unknown";
  }
}

}  // namespace

uint64_t flightClockNs() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME_COARSE, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec);
}

FlightRecorder::FlightRecorder(size_t capacity)
    : capacity_(capacity), entries_(capacity ? new Entry[capacity] : nullptr) {}

uint64_t FlightRecorder::packMeta(CollKind kind, strataDataType_t dtype, strataRedOp_t op, State state, int root) {
  const unsigned opByte = static_cast<unsigned>(op) < strataNumOps ? static_cast<unsigned>(op) : 255u;
  return uint64_t(kind) | uint64_t(dtype) << 8 | uint64_t(opByte) << 16 | uint64_t(state) << 24 |
         (uint64_t(root + 1) & 0xfffff) << 32;
}

uint64_t FlightRecorder::packPeerCount(int peer, size_t count) {
  return (uint64_t(peer + 1) & 0xfffff) << 44 | (uint64_t(count) & ((uint64_t{1} << 44) - 1));
}

uint64_t FlightRecorder::start(uint64_t seq, CollKind kind, strataDataType_t dtype, strataRedOp_t op, size_t count,
                               int root, int peer, const char* algorithm) {
  // One writer at a time (the communicator's work runs in order), so no locked increment: a dump reading
  // meanwhile relies on the entry's version.
  const uint64_t id = next_.load(std::memory_order_relaxed);
  next_.store(id + 1, std::memory_order_relaxed);
  if (capacity_ == 0) return id;
  Entry& e = entries_[id % capacity_];
  const uint64_t v = e.version.load(std::memory_order_relaxed);
  e.version.store(v + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  e.seq.store(seq, std::memory_order_relaxed);
  e.meta.store(packMeta(kind, dtype, op, State::kStarted, root), std::memory_order_relaxed);
  e.peerCount.store(packPeerCount(peer, count), std::memory_order_relaxed);
  e.startNs.store(flightClockNs(), std::memory_order_relaxed);
  e.endNs.store(0, std::memory_order_relaxed);
  uint64_t name[2] = {0, 0};
  if (algorithm) std::memcpy(name, algorithm, std::min(std::strlen(algorithm), sizeof(name)));
  e.algo[0].store(name[0], std::memory_order_relaxed);
  e.algo[1].store(name[1], std::memory_order_relaxed);
  e.version.store(v + 2, std::memory_order_release);
  return id;
}

bool FlightRecorder::refuse(uint64_t seq, CollKind kind, strataDataType_t dtype, strataRedOp_t op, size_t count,
                            int root, int peer) {
  if (capacity_ == 0) return false;
  std::lock_guard<std::mutex> lk(refusedMutex_);
  if (refused_.size() >= kMaxRefused) return false;
  Record r;
  r.id = refused_.size();
  r.seq = seq;
  r.meta = packMeta(kind, dtype, op, State::kRefused, root);
  r.peerCount = packPeerCount(peer, count);
  r.startNs = r.endNs = flightClockNs();
  refused_.push_back(r);
  return refused_.size() == 1;
}

void FlightRecorder::finish(uint64_t id, State state) {
  if (capacity_ == 0) return;
  Entry& e = entries_[id % capacity_];
  const uint64_t v = e.version.load(std::memory_order_relaxed);
  e.version.store(v + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  const uint64_t meta = e.meta.load(std::memory_order_relaxed);
  e.meta.store((meta & ~(uint64_t{0xff} << 24)) | uint64_t(state) << 24, std::memory_order_relaxed);
  e.endNs.store(flightClockNs(), std::memory_order_relaxed);
  e.version.store(v + 2, std::memory_order_release);
}

void FlightRecorder::appendJson(std::string& out, const Record& r) {
  const auto kind = static_cast<CollKind>(r.meta & 0xff);
  const auto dtype = static_cast<unsigned>((r.meta >> 8) & 0xff);
  const int root = static_cast<int>((r.meta >> 32) & 0xfffff) - 1;
  const int peer = static_cast<int>(r.peerCount >> 44) - 1;
  const auto count = static_cast<unsigned long long>(r.peerCount & ((uint64_t{1} << 44) - 1));
  const bool p2p = isP2P(kind);
  out += strprintf("{\"id\": %llu, \"seq\": %llu, \"kind\": \"%s\", ", static_cast<unsigned long long>(r.id),
                   static_cast<unsigned long long>(r.seq), p2p ? "sendrecv" : collName(kind));
  if (!p2p) {
    out += strprintf("\"dtype\": \"%s\", \"op\": \"%s\", \"count\": %llu, \"root\": %d, ",
                     dtype < strataNumTypes ? dtypeName(static_cast<strataDataType_t>(dtype)) : "invalid",
                     opText(static_cast<unsigned>((r.meta >> 16) & 0xff)), count, root);
  } else {
    out += strprintf("\"calls\": %llu, \"peer\": %d, ", count, peer);
  }
  char algo[17] = {0};
  std::memcpy(algo, r.algo, 16);
  out += "\"algorithm\": ";
  appendJsonString(out, algo);
  out += strprintf(", \"state\": \"%s\", \"start_ns\": %llu, \"end_ns\": %llu}",
                   stateText(static_cast<unsigned>((r.meta >> 24) & 0xff)), static_cast<unsigned long long>(r.startNs),
                   static_cast<unsigned long long>(r.endNs));
}

std::string FlightRecorder::entriesJson() const {
  std::string out = "[";
  const uint64_t end = next_.load(std::memory_order_acquire);
  const uint64_t begin = end > capacity_ ? end - capacity_ : 0;
  bool first = true;
  for (uint64_t id = begin; id < end && capacity_; ++id) {
    const Entry& e = entries_[id % capacity_];
    const uint64_t v1 = e.version.load(std::memory_order_acquire);
    if (v1 & 1) continue;  // being written
    Record r;
    r.id = id;
    r.seq = e.seq.load(std::memory_order_relaxed);
    r.meta = e.meta.load(std::memory_order_relaxed);
    r.peerCount = e.peerCount.load(std::memory_order_relaxed);
    r.startNs = e.startNs.load(std::memory_order_relaxed);
    r.endNs = e.endNs.load(std::memory_order_relaxed);
    r.algo[0] = e.algo[0].load(std::memory_order_relaxed);
    r.algo[1] = e.algo[1].load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (e.version.load(std::memory_order_relaxed) != v1) continue;  // rewritten meanwhile
    out += first ? "\n    " : ",\n    ";
    first = false;
    appendJson(out, r);
  }
  {
    // Refused calls come after everything that ran; their ids continue the ring's.
    std::lock_guard<std::mutex> lk(refusedMutex_);
    for (Record r : refused_) {
      r.id += end;
      out += first ? "\n    " : ",\n    ";
      first = false;
      appendJson(out, r);
    }
  }
  out += first ? "]" : "\n  ]";
  return out;
}

}  // namespace strata
