// Shared-memory transport between two ranks of one host: one FIFO per direction (see shm_fifo.h), the connection
// (its data path) and connectShm (its set-up). The segments the FIFOs live in are shm_segment.h's; the agreement on
// single copy is shm_single_copy.h's.
//
// Setup (both ranks run the same steps):
//   1. create the FIFO this rank RECEIVES on: shm_open(O_CREAT|O_EXCL, 0600) under a random name that
//      carries the communicator id, reserve its pages (posix_fallocate: ENOSPC instead of a SIGBUS later),
//      map and pre-fault it, fill its header;
//   2. send the name to the peer through the PeerExchange; map the peer's FIFO (the one this rank sends into);
//   3. exchange a "mapped" ack, then unlink the own segment: from here on nothing is left in /dev/shm, even
//      if a process dies. Any error before that unlinks what was created (ShmSegment is RAII).
// Only kill -9 between steps 1 and 3 leaves a segment behind; the next set-up on the host removes it
// (removeStaleSegments: segments whose creator is dead).
// The data path has no system calls, no locks and no allocations: two atomics per message.
//
// Single copy (STRATA_SHM_SINGLE_COPY=auto): set-up step 4 probes whether each rank may read the other's memory
// (process_vm_readv of a word the peer names); both ranks use it only if both probes succeeded. Then a large piece
// that the plan sends unchanged travels as a reference (kRefFlag, an address and a size in the slot), and the
// receiver reads it with process_vm_readv straight into its destination (or into a bounce buffer for a reducing
// receive) before it frees the slot. The sender's flushed() is false until `tail` has passed its last reference,
// so no call completes (and no connection is destroyed) while the peer may still read its memory.
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bootstrap/peer_exchange.h"
#include "transport/connect_check.h"
#include "transport/shm/shm_fifo.h"
#include "transport/shm/shm_segment.h"
#include "transport/shm/shm_single_copy.h"
#include "transport/transport.h"
#include "util/config.h"
#include "util/error.h"
#include "util/log.h"
#include "util/sys.h"
#include "util/tsan.h"

namespace strata {
namespace shm {
namespace {

constexpr uint8_t kAckMapped = 1;
constexpr uint8_t kAckFailed = 0;

ShmSlotHeader* slotHeader(char* slots, size_t stride, uint64_t slot) {
  return reinterpret_cast<ShmSlotHeader*>(slots + slot * stride);
}

class ShmConnection final : public Connection {
 public:
  ShmConnection(ShmSegment recvSeg, ShmSegment sendSeg, int me, int peer, size_t pieceBytes, uint32_t nslots,
                SingleCopyMode singleCopy)
      : recvSeg_(std::move(recvSeg)),
        sendSeg_(std::move(sendSeg)),
        rx_(static_cast<ShmFifoHeader*>(recvSeg_.base())),
        tx_(static_cast<ShmFifoHeader*>(sendSeg_.base())),
        rxSlots_(static_cast<char*>(recvSeg_.base()) + fifoHeaderBytes()),
        txSlots_(static_cast<char*>(sendSeg_.base()) + fifoHeaderBytes()),
        stride_(fifoSlotStride(pieceBytes)),
        pieceBytes_(pieceBytes),
        nslots_(nslots),
        me_(me),
        peer_(peer),
        peerPid_(tx_->creatorPid),
        rxKey_(tsanKey(recvSeg_.name())),
        txKey_(tsanKey(sendSeg_.name())),
        singleCopy_(std::move(singleCopy)) {
    // Liveness: pids are only comparable between processes of one pid namespace (containers sharing
    // /dev/shm may not be).
    const bool pidComparable = tx_->creatorPidNs != 0 && tx_->creatorPidNs == pidNamespaceId();
    if (pidComparable) peerWatch_ = ProcessExitWatch(peerPid_);
    if (!pidComparable) {
      STRATA_INFO(kLogShm, "rank %d: rank %d is in another pid namespace; only orderly closes are detected", me_,
                  peer_);
    }
  }

  ~ShmConnection() override {
    waitForReferences();
    rx_->receiverClosed.store(1, std::memory_order_release);
    tx_->senderClosed.store(1, std::memory_order_release);
    peerWatch_.reset();
  }

  void* trySendReserve(size_t bytes) override {
    if (bytes > pieceBytes_) {
      throw InternalError(strprintf("rank %d: a %zu-byte message to rank %d exceeds STRATA_PIECE_BYTES=%zu", me_, bytes,
                                    peer_, pieceBytes_));
    }
    if (txHead_ - txTailCache_ >= nslots_) {
      txTailCache_ = tx_->tail.load(std::memory_order_acquire);
      if (txHead_ - txTailCache_ >= nslots_) {
        if (tx_->receiverClosed.load(std::memory_order_acquire)) throwClosed();
        return nullptr;
      }
    }
    reserved_ = true;
    ShmSlotHeader* h = slotHeader(txSlots_, stride_, txSlot_);
    return bytes <= kInlineBytes ? static_cast<void*>(h->inlineData) : static_cast<void*>(h + 1);
  }

  void sendCommit(size_t bytes, const MsgStamp& stamp) override {
    if (!reserved_ || bytes > pieceBytes_) {
      throw InternalError(
          strprintf("rank %d: sendCommit(%zu) to rank %d without a matching trySendReserve", me_, bytes, peer_));
    }
    commit(bytes, stamp);
  }

  size_t refMinBytes() const override { return singleCopy_.minBytes; }

  void sendCommitRef(const void* src, size_t bytes, const MsgStamp& stamp) override {
    if (!reserved_ || singleCopy_.minBytes == 0 || bytes < singleCopy_.minBytes || bytes > pieceBytes_) {
      throw InternalError(
          strprintf("rank %d: sendCommitRef(%zu) to rank %d without a reservation or single copy", me_, bytes, peer_));
    }
    ShmSlotHeader* h = slotHeader(txSlots_, stride_, txSlot_);
    const ShmRef ref{reinterpret_cast<uint64_t>(src), bytes};
    std::memcpy(h->inlineData, &ref, sizeof(ref));
    commit(bytes | kRefFlag, stamp);
    lastRefHead_ = txHead_;
  }

  void commit(uint64_t sizeWord, const MsgStamp& stamp) {
    ShmSlotHeader* h = slotHeader(txSlots_, stride_, txSlot_);
    h->size = sizeWord;
    h->stampLo = stamp.lo;
    h->stampHi = stamp.hi;
    tsanRelease(txKey_);
    h->ready.store(txHead_ + 1, std::memory_order_release);
    reserved_ = false;
    tx_->head.store(++txHead_, std::memory_order_release);
    if (++txSlot_ == nslots_) txSlot_ = 0;
  }

  const void* tryRecvPeek(size_t bytes, const MsgStamp& expected) override { return peek(nullptr, bytes, expected); }
  const void* tryRecvPeekInto(void* dst, size_t bytes, const MsgStamp& expected) override {
    return peek(dst, bytes, expected);
  }

  Head peekStamp(MsgStamp* stamp) override {
    const ShmSlotHeader* h = slotHeader(rxSlots_, stride_, rxSlot_);
    uint64_t ready = h->ready.load(std::memory_order_acquire);
    if (ready != rxTail_ + 1) {
      if (ready + nslots_ != rxTail_ + 1 && ready != 0) corrupted(ready, h->size);
      if (!rx_->senderClosed.load(std::memory_order_acquire)) return Head::kEmpty;
      // Closed: everything it committed before closing is visible now.
      ready = h->ready.load(std::memory_order_acquire);
      if (ready != rxTail_ + 1) return Head::kClosed;
    }
    tsanAcquire(rxKey_);
    *stamp = MsgStamp{h->stampLo, h->stampHi};
    return Head::kArrived;
  }

  // The next message; a reference is read into `dst` (nullptr: the bounce buffer) and that is returned.
  const void* peek(void* dst, size_t bytes, const MsgStamp& expected) {
    const ShmSlotHeader* h = slotHeader(rxSlots_, stride_, rxSlot_);
    uint64_t ready = h->ready.load(std::memory_order_acquire);
    if (ready != rxTail_ + 1) {
      // A slot still holding the message of the previous lap (or nothing yet) is not ready; anything else
      // is corruption.
      if (ready + nslots_ != rxTail_ + 1 && ready != 0) corrupted(ready, h->size);
      if (!rx_->senderClosed.load(std::memory_order_acquire)) return nullptr;
      // Closed: everything it committed before closing is visible now.
      ready = h->ready.load(std::memory_order_acquire);
      if (ready != rxTail_ + 1) throwClosed();
    }
    tsanAcquire(rxKey_);
    const uint64_t sizeWord = h->size;
    const bool isRef = (sizeWord & kRefFlag) != 0;
    const uint64_t size = sizeWord & ~kRefFlag;
    if (size > pieceBytes_ || (isRef && (singleCopy_.minBytes == 0 || size <= kInlineBytes)))
      corrupted(ready, sizeWord);
    if (h->stampLo != expected.lo || h->stampHi != expected.hi) [[unlikely]]
      throw StampMismatch(me_, peer_, expected, MsgStamp{h->stampLo, h->stampHi});
    if (size != bytes) {
      throw InvalidUsage(
          strprintf("rank %d expected a %zu-byte message from rank %d but got %llu bytes: the ranks run "
                    "the same call with different plans (is STRATA_ALGO, STRATA_PIECE_BYTES or STRATA_NSLOTS set "
                    "differently?)",
                    me_, bytes, peer_, static_cast<unsigned long long>(size)));
    }
    rxPeeked_ = true;
    if (isRef) [[unlikely]] {
      void* into = dst ? dst : bounce();
      // A message peeked again (the op waited for room to send on) was read already.
      if (rxReadInto_ != into) {
        readReference(h, into, bytes);
        rxReadInto_ = into;
      }
      return into;
    }
    return bytes <= kInlineBytes ? static_cast<const void*>(h->inlineData) : static_cast<const void*>(h + 1);
  }

  void recvRelease() override {
    if (!rxPeeked_) {
      throw InternalError(strprintf("rank %d: recvRelease from rank %d without a message", me_, peer_));
    }
    rxPeeked_ = false;
    rxReadInto_ = nullptr;
    rx_->tail.store(++rxTail_, std::memory_order_release);
    if (++rxSlot_ == nslots_) rxSlot_ = 0;
  }

  bool progress() override { return false; }
  // A committed message already lives in the peer's segment, which outlives our mapping; a reference is done with
  // once the receiver has freed its slot (it reads before it frees).
  bool flushed() override {
    if (lastRefHead_ <= txTailCache_) return true;
    txTailCache_ = tx_->tail.load(std::memory_order_acquire);
    return lastRefHead_ <= txTailCache_;
  }

  const std::string& singleCopyState() const { return singleCopy_.state; }

  void checkPeer() override {
    const bool closed = rx_->senderClosed.load(std::memory_order_acquire) != 0 ||
                        tx_->receiverClosed.load(std::memory_order_acquire) != 0;
    if (closed) {
      // An orderly close only matters once its last messages are consumed.
      if (rx_->head.load(std::memory_order_acquire) == rxTail_) throwClosed();
      return;
    }
    if (peerExited()) {
      throw RemoteError(strprintf("rank %d (pid %d) on this host exited (seen by rank %d over shm)", peer_,
                                  static_cast<int>(peerPid_), me_));
    }
  }

  int peer() const override { return peer_; }
  const char* kind() const override { return "shm"; }

 private:
  [[noreturn]] void corrupted(uint64_t ready, uint64_t size) const {
    throw RemoteError(strprintf("rank %d: corrupted shm FIFO from rank %d (message %llu: ready word %llu, size %llu)",
                                me_, peer_, static_cast<unsigned long long>(rxTail_),
                                static_cast<unsigned long long>(ready), static_cast<unsigned long long>(size)));
  }

  bool peerExited() const { return peerWatch_.exited(); }

  char* bounce() {
    if (!bounce_) {
      void* p = std::aligned_alloc(64, roundUp(pieceBytes_, 64));
      if (!p)
        throw SysError(strprintf("rank %d: a %zu-byte bounce buffer for rank %d", me_, pieceBytes_, peer_), ENOMEM);
      bounce_.reset(static_cast<char*>(p));
    }
    return bounce_.get();
  }

  void readReference(const ShmSlotHeader* h, void* into, size_t bytes) {
    ShmRef ref;
    std::memcpy(&ref, h->inlineData, sizeof(ref));
    if (ref.bytes != bytes) corrupted(rxTail_ + 1, ref.bytes);
    iovec local{into, bytes};
    iovec remote{reinterpret_cast<void*>(ref.address), bytes};
    const ssize_t got = process_vm_readv(peerPid_, &local, 1, &remote, 1, 0);
    const int err = got < 0 ? errno : 0;
    // A pid that exited is no longer the peer's, whatever the read returned.
    if (err == ESRCH || peerExited()) {
      throw RemoteError(
          strprintf("rank %d (pid %d) on this host exited (seen by rank %d reading a %zu-byte message "
                    "from its memory)",
                    peer_, static_cast<int>(peerPid_), me_, bytes));
    }
    if (got == static_cast<ssize_t>(bytes)) return;
    const std::string why =
        got < 0 ? strprintf("failed: %s", std::strerror(err)) : strprintf("returned only %zd bytes", got);
    throw SingleCopyReadError(
        strprintf("rank %d: reading %zu bytes at address 0x%llx of rank %d (pid %d) with process_vm_readv %s: rank %d "
                  "freed or changed that buffer before the call completed, or this rank's destination %p is not "
                  "writable",
                  me_, bytes, static_cast<unsigned long long>(ref.address), peer_, static_cast<int>(peerPid_),
                  why.c_str(), peer_, into),
        peer_, ref.address, bytes);
  }

  // The peer may still read references this side sent: the memory behind them must stay as it is until it has.
  // Bounded by the peer closing or exiting and by STRATA_TIMEOUT_MS.
  void waitForReferences() {
    if (flushed()) return;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(singleCopy_.timeoutMs);
    while (!flushed()) {
      if (tx_->receiverClosed.load(std::memory_order_acquire) || peerExited()) return;
      if (std::chrono::steady_clock::now() > deadline) {
        STRATA_WARN(kLogShm, "rank %d: closing the shm connection to rank %d while it has not read %llu references",
                    me_, peer_, static_cast<unsigned long long>(lastRefHead_ - txTailCache_));
        return;
      }
      usleep(50);
    }
  }

  [[noreturn]] void throwClosed() const {
    throw RemoteError(
        strprintf("rank %d (pid %d) closed its shm connection to rank %d while rank %d still "
                  "needed it: the ranks ran different collectives, or rank %d was destroyed early",
                  peer_, static_cast<int>(peerPid_), me_, me_, peer_));
  }

  ShmSegment recvSeg_, sendSeg_;
  ShmFifoHeader* rx_;
  ShmFifoHeader* tx_;
  char* rxSlots_;
  char* txSlots_;
  size_t stride_, pieceBytes_;
  uint64_t nslots_;
  int me_, peer_;
  pid_t peerPid_;
  uint64_t rxKey_, txKey_;      // ThreadSanitizer's names for the two FIFOs (util/tsan.h; unused without it)
  ProcessExitWatch peerWatch_;  // watches nothing unless the peer's pids are comparable with ours
  // Sender side (local copies; the shared counters are touched once per message).
  uint64_t txHead_ = 0, txTailCache_ = 0, txSlot_ = 0;
  bool reserved_ = false;
  // Receiver side.
  uint64_t rxTail_ = 0, rxSlot_ = 0;
  bool rxPeeked_ = false;  // tryRecvPeek returned the message at rxTail_ and it is not released yet
  // Single copy.
  SingleCopyMode singleCopy_;
  uint64_t lastRefHead_ = 0;    // txHead_ after the last reference sent: flushed once tail reaches it
  void* rxReadInto_ = nullptr;  // where the reference at rxTail_ has been read to (nullptr: not yet)
  struct FreeDeleter {
    void operator()(char* p) const { std::free(p); }
  };
  std::unique_ptr<char, FreeDeleter> bounce_;  // reducing receives read references here
};

}  // namespace

std::string singleCopyState(const Connection& c) {
  const auto* shm = dynamic_cast<const ShmConnection*>(&c);
  return shm ? shm->singleCopyState() : "off: not a shm connection";
}

}  // namespace shm

std::unique_ptr<Connection> connectShm(PeerExchange& exchange, const Config& config, int peer, uint32_t tag) {
  using namespace shm;
  checkConnectRequest(exchange, config, peer, "shm");
  const int me = exchange.rank();
  const uint32_t nslots = static_cast<uint32_t>(config.nslots);
  const size_t bytes = fifoHeaderBytes() + fifoSlotStride(config.pieceBytes) * nslots;
  removeStaleSegments();

  // 1. The FIFO this rank receives on.
  const std::string name = newFifoSegmentName(exchange.commId(), peer, me, tag);
  ShmSegment recvSeg = ShmSegment::create(name, bytes, me, peer);
  auto* hdr = new (recvSeg.base()) ShmFifoHeader{};
  hdr->magic = kFifoMagic;
  hdr->version = kFifoVersion;
  hdr->creatorPid = static_cast<int32_t>(getpid());
  hdr->creatorPidNs = pidNamespaceId();
  hdr->commId = exchange.commId();
  hdr->pieceBytes = config.pieceBytes;
  hdr->slotStride = fifoSlotStride(config.pieceBytes);
  hdr->nslots = nslots;
  hdr->receiverRank = me;
  hdr->senderRank = peer;
  hdr->tag = tag;

  // 2. Swap names; map the peer's FIFO. A failure here is reported to the peer through the ack.
  exchange.send(peer, tag, name.data(), name.size());
  std::vector<uint8_t> peerNameBytes = exchange.recv(peer, tag);
  const std::string peerName(peerNameBytes.begin(), peerNameBytes.end());
  ShmSegment sendSeg;
  std::exception_ptr failure;
  std::string failureText;
  try {
    if (!isFifoSegmentName(peerName)) {
      throw RemoteError(strprintf("rank %d: rank %d sent a malformed shm segment name", me, peer));
    }
    sendSeg = ShmSegment::open(peerName, bytes, me, peer);
    const auto* ph = static_cast<const ShmFifoHeader*>(sendSeg.base());
    if (ph->magic != kFifoMagic || ph->version != kFifoVersion || ph->commId != exchange.commId() ||
        ph->receiverRank != peer || ph->senderRank != me || ph->tag != tag) {
      throw RemoteError(strprintf("rank %d: shm segment %s from rank %d is not the FIFO of this connection", me,
                                  peerName.c_str(), peer));
    }
    if (ph->pieceBytes != config.pieceBytes || ph->nslots != nslots) {
      throw InvalidUsage(
          strprintf("rank %d has STRATA_PIECE_BYTES=%zu STRATA_NSLOTS=%u but rank %d has %llu and "
                    "%u: every rank needs the same settings",
                    me, config.pieceBytes, nslots, peer, static_cast<unsigned long long>(ph->pieceBytes), ph->nslots));
    }
    // Both ranks unlink both names: whichever runs first wins, so a rank that dies right after sending its
    // name leaves nothing behind either.
    shm_unlink(peerName.c_str());
  } catch (const std::exception& e) {
    failure = std::current_exception();
    failureText = e.what();
  }

  // 3. Ack, then unlink the own segment: the peer has it mapped (or gave up), so the name is no longer needed.
  std::string ack(1, static_cast<char>(failure ? kAckFailed : kAckMapped));
  ack += failureText;
  exchange.send(peer, tag, ack.data(), ack.size());
  std::vector<uint8_t> peerAck = exchange.recv(peer, tag);
  recvSeg.unlink();
  if (failure) std::rethrow_exception(failure);
  if (peerAck.empty() || peerAck[0] != kAckMapped) {
    std::string why = peerAck.size() > 1 ? std::string(peerAck.begin() + 1, peerAck.end()) : "no reason given";
    throw RemoteError(
        strprintf("rank %d: rank %d could not map the shm FIFO of rank %d: %s", me, peer, me, why.c_str()));
  }

  // 4. Single copy.
  const pid_t peerPid = static_cast<const ShmFifoHeader*>(sendSeg.base())->creatorPid;
  SingleCopyMode singleCopy = agreeOnSingleCopy(exchange, config, peer, tag, peerPid);

  STRATA_INFO(kLogShm, "rank %d <-> rank %d: shm connection, %u slots of %zu bytes each way", me, peer, nslots,
              config.pieceBytes);
  if (singleCopy.minBytes) {
    STRATA_INFO(kLogShm,
                "rank %d <-> rank %d: single copy on: pieces of %zu bytes and more that a plan sends unchanged "
                "are read from the sender's memory (process_vm_readv)",
                me, peer, singleCopy.minBytes);
  } else {
    STRATA_INFO(kLogShm, "rank %d <-> rank %d: single copy %s; every piece goes through the FIFO", me, peer,
                singleCopy.state.c_str());
  }
  return std::make_unique<ShmConnection>(std::move(recvSeg), std::move(sendSeg), me, peer, config.pieceBytes, nslots,
                                         std::move(singleCopy));
}

}  // namespace strata
