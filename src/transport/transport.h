// The transport interface: one Connection per (communicator, peer), moving whole messages ("pieces")
// whose sizes both sides already know from the plan. All calls are non-blocking; the executor polls.
#pragma once

#include <poll.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "util/error.h"

namespace strata {

class PeerExchange;
struct Config;

/// Which call a message belongs to, as the executor encodes it (core/call.h: sequence number, collective, type,
/// op, count, root). Opaque here: every message carries the sender's stamp and the receiver compares it with the
/// stamp it expects, so ranks that run different calls get an error instead of each other's bytes.
struct MsgStamp {
  uint64_t lo = 0, hi = 0;
  friend bool operator==(const MsgStamp&, const MsgStamp&) = default;
};

/// A message whose stamp is not the one the receiver expected: the ranks are running different calls. The
/// executor turns it into an error that names both calls.
class StampMismatch : public InvalidUsage {
 public:
  StampMismatch(int me, int peer, const MsgStamp& expected, const MsgStamp& got)
      : InvalidUsage(strprintf("rank %d got a message of another call from rank %d", me, peer)),
        peer(peer),
        expected(expected),
        got(got) {}
  int peer;
  MsgStamp expected, got;
};

/// The receiver of a reference (Connection::sendCommitRef) could not read the sender's memory: the sender freed
/// or unmapped the buffer before the call completed, or the read came back short. Names peer, address and size.
class SingleCopyReadError : public RemoteError {
 public:
  SingleCopyReadError(const std::string& msg, int peer, uint64_t address, size_t bytes)
      : RemoteError(msg), peer(peer), address(address), bytes(bytes) {}
  int peer;
  uint64_t address;
  size_t bytes;
};

/// A bidirectional, ordered, message-based link to one peer. Each direction holds up to
/// Config::nslots messages of at most Config::pieceBytes each.
class Connection {
 public:
  virtual ~Connection() = default;

  /// A buffer for the next outgoing message of `bytes` (<= pieceBytes), or nullptr while the peer's
  /// receive side is full. The caller fills it, then calls sendCommit(bytes, stamp). At most one reservation
  /// is outstanding per connection.
  virtual void* trySendReserve(size_t bytes) = 0;
  virtual void sendCommit(size_t bytes, const MsgStamp& stamp) = 0;

  /// The next incoming message, or nullptr if it has not fully arrived. Throws StampMismatch if it carries
  /// another stamp than `expected` (checked first), InvalidUsage if it has another size than `bytes` (the
  /// ranks disagree about the plan) and RemoteError if the peer is gone. The pointer stays valid until
  /// recvRelease().
  virtual const void* tryRecvPeek(size_t bytes, const MsgStamp& expected) = 0;
  virtual void recvRelease() = 0;

  /// What the head of the incoming side holds, for a receive from any source (peekStamp).
  enum class Head {
    kEmpty,    ///< nothing has arrived yet
    kArrived,  ///< a message is first in line; its stamp was stored
    kClosed,   ///< the peer closed its side in order after every message it sent was taken: nothing more can come
  };
  /// The stamp of the next incoming message once its header has arrived (ucx: the whole message, whose stamp
  /// follows the payload), consuming nothing: tryRecvPeek then still returns that message. A receive from any
  /// source compares it with what it expects of each peer before it receives from one. Throws RemoteError on a
  /// broken link, as tryRecvPeek does.
  virtual Head peekStamp(MsgStamp* stamp) = 0;

  /// Single copy (shm between processes of one host): the smallest message this connection sends as a reference
  /// to the sender's own memory, which the receiver then reads directly (process_vm_readv); 0 when it never does.
  virtual size_t refMinBytes() const { return 0; }
  /// Commits the reserved message as a reference to `bytes` (>= refMinBytes()) at `src` instead of the bytes
  /// themselves (nothing is written into the reservation). The caller keeps those bytes unchanged and mapped
  /// until flushed() is true: the receiver reads them when it gets to the message.
  virtual void sendCommitRef(const void* /*src*/, size_t /*bytes*/, const MsgStamp& /*stamp*/) {
    throw InternalError("sendCommitRef on a connection that sends no references");
  }
  /// tryRecvPeek for a receiver that wants the message in `dst`: a transport that can move it there itself (a
  /// reference read with one copy) does, and returns `dst`; otherwise it returns what tryRecvPeek returns and the
  /// caller copies. Either way the message stays first in line until recvRelease().
  virtual const void* tryRecvPeekInto(void* /*dst*/, size_t bytes, const MsgStamp& expected) {
    return tryRecvPeek(bytes, expected);
  }

  /// Moves queued bytes (TCP). Returns true if anything moved. Throws RemoteError on a broken link.
  virtual bool progress() = 0;
  /// True when every committed message has left this process (safe to destroy without losing data) and the
  /// receiver has read every reference (sendCommitRef) this side sent.
  virtual bool flushed() = 0;
  /// Cheap liveness check called while a wait is stalled; throws RemoteError naming the peer if dead.
  virtual void checkPeer() = 0;

  /// Appends the descriptors a stalled wait on this connection can block on (readable: a message may be
  /// coming; writable: queued bytes can leave) and returns true; returns false when the connection can
  /// only be polled (shared memory), so the caller must keep spinning or yielding.
  virtual bool addPollFds(std::vector<pollfd>& /*fds*/) { return false; }

  virtual int peer() const = 0;
  /// "shm", "tcp" or "ucx".
  virtual const char* kind() const = 0;
};

/// Creates the connection to `peer` for the communicator behind `exchange`. Collective between the
/// two ranks: both call it (in any order relative to other pairs' setups). `tag` separates the setups of
/// different connections between the same pair.
std::unique_ptr<Connection> connectShm(PeerExchange& exchange, const Config& config, int peer, uint32_t tag);
namespace shm {
/// Unlinks the FIFO segments in /dev/shm that no live process will unlink (their creator, in this pid
/// namespace, died during set-up); returns how many it found. Every shm set-up runs it first.
size_t removeStaleSegments();
/// "on" when the connection reads large pieces from the sender's memory (single copy), else "off: " and why.
std::string singleCopyState(const Connection& c);
/// Tests: set-ups in this process see `err` as the errno of their process_vm_readv probe (0: probe for real).
void setSingleCopyProbeErrorForTesting(int err);
}  // namespace shm
std::unique_ptr<Connection> connectTcp(PeerExchange& exchange, const Config& config, int peer, uint32_t tag);
/// UCP tagged messages (src/transport/ucx/). Throws InvalidUsage when Strata was built without UCX or the
/// UCX library cannot be loaded.
std::unique_ptr<Connection> connectUcx(PeerExchange& exchange, const Config& config, int peer, uint32_t tag);

}  // namespace strata
