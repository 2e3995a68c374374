// Shared-memory transport between two ranks of one host: one FIFO per direction (see shm_fifo.h).
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
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <exception>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bootstrap/peer_exchange.h"
#include "transport/connect_check.h"
#include "transport/shm/shm_fifo.h"
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

std::atomic<int> probeErrorForTesting{0};

// What set-up agreed about single copy for one connection.
struct SingleCopyMode {
  size_t minBytes = 0;  // 0: off
  std::string state;    // "on" or "off: why", for logs and tests
  int64_t timeoutMs = 0;
};

std::string randomHex(size_t bytes) {
  std::vector<uint8_t> buf(bytes);
  fillRandom(buf.data(), bytes, "getrandom for a shared memory segment name");
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (uint8_t b : buf) {
    out += kHex[b >> 4];
    out += kHex[b & 15];
  }
  return out;
}

// A mapped POSIX shared-memory segment. Unmaps on destruction, and unlinks the name too while this
// process still owns it (setup failed before the peer mapped it).
class ShmSegment {
 public:
  ShmSegment() = default;
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;
  ShmSegment(ShmSegment&& o) noexcept { *this = std::move(o); }
  ShmSegment& operator=(ShmSegment&& o) noexcept {
    if (this != &o) {
      release();
      name_ = std::move(o.name_);
      base_ = std::exchange(o.base_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
      linked_ = std::exchange(o.linked_, false);
    }
    return *this;
  }
  ~ShmSegment() { release(); }

  /// Creates, sizes, maps and pre-faults a new segment readable and writable by this user only.
  static ShmSegment create(const std::string& name, size_t bytes, int me, int peer) {
    ShmSegment seg;
    int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) {
      throw SysError(strprintf("rank %d: shm_open(%s) for the FIFO from rank %d", me, name.c_str(), peer), errno);
    }
    seg.name_ = name;
    seg.linked_ = true;
    struct FdCloser {
      int fd;
      ~FdCloser() { ::close(fd); }
    } closer{fd};
    if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
      throw SysError(strprintf("rank %d: ftruncate(%s, %zu)", me, name.c_str(), bytes), errno);
    }
    // Reserve the pages now: on a full /dev/shm this fails here with ENOSPC instead of a SIGBUS on first touch.
    int rc;
    do {
      rc = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
    } while (rc == EINTR);
    if (rc != 0) {
      throw SysError(strprintf("rank %d: reserving %zu bytes of /dev/shm for the FIFO from rank %d (is /dev/shm "
                               "too small? containers: --shm-size; or lower STRATA_NSLOTS / STRATA_PIECE_BYTES)",
                               me, bytes, peer),
                     rc);
    }
    seg.map(fd, bytes, me);
    // Touch every page for writing so the hot loop never takes a page fault on this side.
    auto* p = static_cast<volatile char*>(seg.base_);
    for (size_t off = 0; off < bytes; off += 4096) p[off] = 0;
    return seg;
  }

  /// Maps an existing segment created by the peer, after checking it belongs to this user, is private
  /// to it and is large enough.
  static ShmSegment open(const std::string& name, size_t bytes, int me, int peer) {
    ShmSegment seg;
    int fd = shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
    if (fd < 0) {
      throw SysError(strprintf("rank %d: shm_open(%s), the FIFO of rank %d (do both ranks really share a host "
                               "and /dev/shm?)",
                               me, name.c_str(), peer),
                     errno);
    }
    struct FdCloser {
      int fd;
      ~FdCloser() { ::close(fd); }
    } closer{fd};
    struct stat st;
    if (fstat(fd, &st) != 0) STRATA_THROW_SYS(strprintf("rank %d: fstat(%s)", me, name.c_str()));
    if (st.st_uid != geteuid() || (st.st_mode & 077) != 0) {
      throw RemoteError(
          strprintf("rank %d: shared memory segment %s of rank %d has owner %u mode %03o, expected "
                    "owner %u mode 0600",
                    me, name.c_str(), peer, static_cast<unsigned>(st.st_uid), static_cast<unsigned>(st.st_mode & 0777),
                    static_cast<unsigned>(geteuid())));
    }
    if (static_cast<size_t>(st.st_size) < bytes) {
      throw InvalidUsage(
          strprintf("rank %d: the FIFO of rank %d has %lld bytes, expected %zu: the ranks have "
                    "different STRATA_PIECE_BYTES or STRATA_NSLOTS",
                    me, peer, static_cast<long long>(st.st_size), bytes));
    }
    seg.map(fd, bytes, me);
    // Pre-fault this side's page tables too (reads map shmem pages writable on a shared mapping).
    auto* p = static_cast<const volatile char*>(seg.base_);
    for (size_t off = 0; off < bytes; off += 4096) (void)p[off];
    return seg;
  }

  /// Removes the name from /dev/shm; the mappings stay valid.
  void unlink() {
    if (linked_) {
      shm_unlink(name_.c_str());
      linked_ = false;
    }
  }

  void* base() const { return base_; }
  const std::string& name() const { return name_; }

 private:
  void map(int fd, size_t bytes, int me) {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (p == MAP_FAILED) throw SysError(strprintf("rank %d: mmap(%s, %zu)", me, name_.c_str(), bytes), errno);
    base_ = p;
    bytes_ = bytes;
  }
  void release() {
    if (base_) munmap(base_, bytes_);
    base_ = nullptr;
    unlink();
  }

  std::string name_;
  void* base_ = nullptr;
  size_t bytes_ = 0;
  bool linked_ = false;
};

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

// Set-up step 4: whether the two ranks read each other's memory for large pieces. Each rank names a word of its
// own and reads the peer's with process_vm_readv; single copy is on only if both reads worked, so both ranks come
// to the same answer. The peer's pid (from its FIFO header) only means something in the same pid namespace.
struct SingleCopyOffer {
  uint8_t want;  // STRATA_SHM_SINGLE_COPY != off
  uint8_t pad[7];
  uint64_t pidNs;
  uint64_t address;  // of a word this rank keeps until set-up ends
  uint64_t value;    // its value
};

std::string probeRead(pid_t peerPid, const SingleCopyOffer& peer, int me, int peerRank) {
  int err = probeErrorForTesting.load(std::memory_order_relaxed);
  uint64_t got = 0;
  if (err == 0) {
    iovec local{&got, sizeof(got)};
    iovec remote{reinterpret_cast<void*>(peer.address), sizeof(got)};
    if (process_vm_readv(peerPid, &local, 1, &remote, 1, 0) != static_cast<ssize_t>(sizeof(got))) err = errno;
    else if (got != peer.value) return strprintf("rank %d read a wrong value from rank %d's memory", me, peerRank);
  }
  if (err == 0) return {};
  if (err == EPERM) {
    return strprintf(
        "rank %d may not read rank %d's memory (process_vm_readv: EPERM; a yama ptrace_scope above 0 "
        "or a missing CAP_SYS_PTRACE refuses it)",
        me, peerRank);
  }
  if (err == ENOSYS) return strprintf("the kernel of rank %d has no process_vm_readv (ENOSYS)", me);
  return strprintf("rank %d could not read rank %d's memory (process_vm_readv: %s)", me, peerRank, std::strerror(err));
}

SingleCopyMode agreeOnSingleCopy(PeerExchange& exchange, const Config& config, int peer, uint32_t tag, pid_t peerPid) {
  const int me = exchange.rank();
  SingleCopyMode mode;
  mode.timeoutMs = config.timeoutMs;
  uint64_t word = 0;
  fillRandom(&word, sizeof(word), "getrandom for the single-copy probe");
  SingleCopyOffer mine{};
  mine.want = config.shmSingleCopy != "off";
  mine.pidNs = pidNamespaceId();
  mine.address = reinterpret_cast<uint64_t>(&word);
  mine.value = word;
  exchange.send(peer, tag, &mine, sizeof(mine));
  const std::vector<uint8_t> got = exchange.recv(peer, tag);
  if (got.size() != sizeof(SingleCopyOffer))
    throw RemoteError(strprintf("rank %d: rank %d sent a malformed single-copy offer", me, peer));
  SingleCopyOffer theirs;
  std::memcpy(&theirs, got.data(), sizeof(theirs));

  std::string why;  // empty: this rank can read the peer's memory
  if (!mine.want) why = strprintf("STRATA_SHM_SINGLE_COPY=off on rank %d", me);
  else if (!theirs.want) why = strprintf("STRATA_SHM_SINGLE_COPY=off on rank %d", peer);
  else if (mine.pidNs == 0 || theirs.pidNs != mine.pidNs)
    why = strprintf("rank %d is in another pid namespace than rank %d", peer, me);
  else why = probeRead(peerPid, theirs, me, peer);
  exchange.send(peer, tag, why.data(), why.size());
  const std::vector<uint8_t> peerWhy = exchange.recv(peer, tag);  // `word` stays alive until the peer has read it
  if (why.empty()) why.assign(peerWhy.begin(), peerWhy.end());
  if (why.empty()) {
    mode.minBytes = std::max<size_t>(config.shmSingleCopyBytes, kInlineBytes + 1);
    mode.state = "on";
  } else {
    mode.state = "off: " + why;
  }
  return mode;
}

// A segment without a valid header (its creator died between shm_open and writing the header) is removed
// once it is this old; one with a header as soon as its creator is gone.
constexpr time_t kHeaderlessGraceSeconds = 60;

bool processGone(int32_t pid) { return pid > 0 && kill(pid, 0) != 0 && errno == ESRCH; }

/// Whether /dev/shm/`name` is a FIFO segment of this user that no live process will unlink.
bool isStale(const std::string& name, uint64_t myPidNs) {
  const std::string path = "/" + name;
  int fd = shm_open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC, 0);
  if (fd < 0) return false;
  struct FdCloser {
    int fd;
    ~FdCloser() { ::close(fd); }
  } closer{fd};
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid()) return false;
  if (static_cast<size_t>(st.st_size) >= sizeof(ShmFifoHeader)) {
    void* p = mmap(nullptr, sizeof(ShmFifoHeader), PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) return false;
    const auto* h = static_cast<const ShmFifoHeader*>(p);
    const bool valid = h->magic == kFifoMagic;
    const int32_t creator = h->creatorPid;
    const uint64_t creatorNs = h->creatorPidNs;
    munmap(p, sizeof(ShmFifoHeader));
    if (valid) {
      // Pids compare only within one pid namespace: a container sharing /dev/shm with another namespace
      // leaves that namespace's segments alone.
      return creatorNs == myPidNs && creator != getpid() && processGone(creator);
    }
  }
  return time(nullptr) - st.st_mtime > kHeaderlessGraceSeconds;
}

}  // namespace

void setSingleCopyProbeErrorForTesting(int err) { probeErrorForTesting.store(err, std::memory_order_relaxed); }

std::string singleCopyState(const Connection& c) {
  const auto* shm = dynamic_cast<const ShmConnection*>(&c);
  return shm ? shm->singleCopyState() : "off: not a shm connection";
}

size_t removeStaleSegments() {
  const uint64_t myPidNs = pidNamespaceId();
  std::vector<std::string> stale;
  if (DIR* d = opendir("/dev/shm")) {
    while (dirent* e = readdir(d)) {
      const std::string name = e->d_name;
      if (name.rfind("strata-", 0) == 0 && isStale(name, myPidNs)) stale.push_back(name);
    }
    closedir(d);
  }
  for (const std::string& name : stale) {
    if (shm_unlink(("/" + name).c_str()) == 0)
      STRATA_INFO(kLogShm, "removed /dev/shm/%s, left by a process that died while setting up", name.c_str());
  }
  return stale.size();
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
  const std::string name = strprintf("/strata-%016llx-%d-%d-%u-%s", static_cast<unsigned long long>(exchange.commId()),
                                     peer, me, tag, randomHex(16).c_str());
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
    if (peerName.rfind("/strata-", 0) != 0 || peerName.find('/', 1) != std::string::npos) {
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
