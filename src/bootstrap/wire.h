// Internal to the bootstrap: the messages between ranks and the root, and their encoding.
//
// A frame is [u32 type][u32 payload length][payload], integers little-endian on the wire so that hosts
// of either byte order agree. Rendezvous:
//   root -> rank  kChallenge  u32 protocol magic, 16 random bytes
//   rank -> root  kHello      u32 rank, u32 nranks, u64 MAC, u32 pid, str host, str address
//                             MAC = sipHash24(secret, challenge || rank || nranks)
//   root -> rank  kTable      u32 n, n x (str address, str host, u32 pid)      once every rank arrived
//   root -> rank  kError      str reason                                       rendezvous refused
// Control plane (after the table):
//   rank <-> root kRelay      u64 commId, u32 from, u32 to, u64 tag, bytes     root forwards to `to`
//   rank -> root  kReportFailure str reason, u32 epoch, u64 commId             root -> others: kFailure
//   root -> rank  kFailure    str reason, u32 epoch, u32 dead rank + 1 (0: none), u64 commId
//                             a rank died or gave up (epoch: the shrink epoch of the communicator that failed;
//                             commId non-zero: about that communicator only; see failure_scope.h)
//   rank -> root  kGoodbye    (empty)                                          orderly exit: not a death
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "util/error.h"

namespace strata::bootstrap_wire {

enum class MsgType : uint32_t {
  kChallenge = 1,
  kHello = 2,
  kTable = 3,
  kError = 4,
  kRelay = 5,
  kReportFailure = 6,
  kFailure = 7,
  kGoodbye = 8,
  /// Root -> rank: every rank living in the root's own process has left; the root ends with that process,
  /// so its closing the connection later is not a failure of the job.
  kRootLeaving = 9,
  /// Rank -> root: the ranks this rank has been waiting on for a while, and in what (none: not waiting any
  /// more). The root keeps the last one of each rank, to tell who is at the end of a chain of waits.
  kWaitState = 10,
  /// Rank -> root: who are these ranks waiting on? Answered with kWaitAnswer (same query id).
  kWaitQuery = 11,
  kWaitAnswer = 12,
};

constexpr uint32_t kProtocolMagic = 0x53425431;  // "STB1": a Strata bootstrap root, protocol version 1
constexpr size_t kFrameHeaderBytes = 8;
constexpr size_t kChallengeBytes = 16;
/// Before authentication a peer may only send a hello; this bounds what a stranger can make us buffer.
constexpr size_t kMaxUnauthenticatedFrame = 4096;
/// Bootstrap messages are small (addresses, handles, gathered tables); this only catches garbage.
constexpr size_t kMaxFrame = size_t(1) << 28;

/// Little-endian serializer.
class WireWriter {
 public:
  WireWriter& u32(uint32_t v) {
    for (int i = 0; i < 4; ++i) buf_.push_back(static_cast<uint8_t>(v >> (8 * i)));
    return *this;
  }
  WireWriter& u64(uint64_t v) {
    for (int i = 0; i < 8; ++i) buf_.push_back(static_cast<uint8_t>(v >> (8 * i)));
    return *this;
  }
  WireWriter& bytes(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    buf_.insert(buf_.end(), b, b + n);
    return *this;
  }
  WireWriter& str(const std::string& s) {
    u32(static_cast<uint32_t>(s.size()));
    return bytes(s.data(), s.size());
  }
  const std::vector<uint8_t>& data() const { return buf_; }
  std::vector<uint8_t> take() { return std::move(buf_); }

 private:
  std::vector<uint8_t> buf_;
};

/// Little-endian parser over a received payload; a short or inconsistent payload throws RemoteError
/// (it came from another process, so it is that process's fault, not the caller's).
class WireReader {
 public:
  WireReader(const uint8_t* p, size_t n) : p_(p), n_(n) {}
  explicit WireReader(const std::vector<uint8_t>& v) : WireReader(v.data(), v.size()) {}
  uint32_t u32() {
    need(4);
    uint32_t v = 0;
    for (int i = 3; i >= 0; --i) v = (v << 8) | p_[pos_ + static_cast<size_t>(i)];
    pos_ += 4;
    return v;
  }
  uint64_t u64() {
    need(8);
    uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = (v << 8) | p_[pos_ + static_cast<size_t>(i)];
    pos_ += 8;
    return v;
  }
  void bytes(void* out, size_t n) {
    need(n);
    if (n) std::memcpy(out, p_ + pos_, n);  // out may be null for n == 0 (an empty vector's data())
    pos_ += n;
  }
  std::string str() {
    size_t n = u32();
    need(n);
    std::string s(reinterpret_cast<const char*>(p_ + pos_), n);
    pos_ += n;
    return s;
  }
  /// Everything not yet read.
  std::vector<uint8_t> rest() {
    std::vector<uint8_t> v(p_ + pos_, p_ + n_);
    pos_ = n_;
    return v;
  }
  size_t remaining() const { return n_ - pos_; }

 private:
  void need(size_t n) const {
    if (n > n_ - pos_) {
      throw RemoteError(
          strprintf("bootstrap: malformed message (needs %zu more bytes at offset %zu of %zu)", n, pos_, n_));
    }
  }
  const uint8_t* p_;
  size_t n_;
  size_t pos_ = 0;
};

/// Header + payload, ready to write.
inline std::vector<uint8_t> makeFrame(MsgType type, const std::vector<uint8_t>& payload) {
  WireWriter w;
  w.u32(static_cast<uint32_t>(type)).u32(static_cast<uint32_t>(payload.size())).bytes(payload.data(), payload.size());
  return w.take();
}

/// Data of a RELAY message.
struct Relay {
  uint64_t commId = 0;
  uint32_t from = 0, to = 0;
  uint64_t tag = 0;
};

}  // namespace strata::bootstrap_wire
