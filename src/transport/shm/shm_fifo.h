// Layout of one shared-memory FIFO: a single-producer, single-consumer ring of `nslots` slots of
// `pieceBytes` each, living in a POSIX shared-memory segment created (and owned) by the receiver.
//
//   [ShmFifoHeader][slot 0: ShmSlotHeader | payload][slot 1: ...]...
//
// The sender writes a message straight into the next free slot (so a fused reduce writes into the peer's
// memory, one copy), fills the slot header and publishes the message by storing its sequence number + 1
// into the header's `ready` word (release); it also bumps `head`, which only the slow paths read. The
// receiver polls the next slot's `ready` (acquire), checks the slot's stamp against the call it runs (so ranks
// running different calls fail instead of mixing data), reads the payload in place and frees the slot by
// bumping `tail` (release). Messages of up to kInlineBytes travel inside the header's own cache line, so a
// small message costs the receiver one cache-line transfer, with its flag (as NCCL's LL protocol does),
// instead of a counter line plus a header line plus a payload line.
// `head` and `tail` live on their own cache-line pairs so the two sides never falsely share a line.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace strata::shm {

inline constexpr uint64_t kFifoMagic = 0x5354524153484d31ull;  // "STRASHM1"
inline constexpr uint32_t kFifoVersion = 4;  // 3: slot headers carry the call's stamp; 4: references (kRefFlag)
// Two cache lines: adjacent-line prefetchers pull lines in pairs.
inline constexpr size_t kLinePair = 128;
inline constexpr size_t kSlotHeaderBytes = 64;

static_assert(std::atomic<uint64_t>::is_always_lock_free, "shm FIFO counters must be lock-free");
static_assert(std::atomic<uint32_t>::is_always_lock_free, "shm FIFO flags must be lock-free");

struct alignas(kLinePair) ShmFifoHeader {
  // Written once by the creator (the receiving rank) before the segment's name is published.
  uint64_t magic;
  uint32_t version;
  int32_t creatorPid;     // the receiving rank's process, for liveness checks
  uint64_t creatorPidNs;  // inode of the creator's pid namespace: pids only compare within one
  uint64_t commId;
  uint64_t pieceBytes;
  uint64_t slotStride;  // bytes from one slot to the next (64-byte multiple)
  uint32_t nslots;
  int32_t receiverRank;  // creator
  int32_t senderRank;
  uint32_t tag;

  /// Messages committed so far (written by the sender only).
  alignas(kLinePair) std::atomic<uint64_t> head;
  /// Messages released so far (written by the receiver only).
  alignas(kLinePair) std::atomic<uint64_t> tail;
  /// Orderly-close flags: set by each side's destructor, read only on the slow (empty/full) paths.
  alignas(kLinePair) std::atomic<uint32_t> senderClosed;
  std::atomic<uint32_t> receiverClosed;
};

struct alignas(kSlotHeaderBytes) ShmSlotHeader {
  uint64_t size;                 // bytes in this message, | kRefFlag for a reference (ShmRef in inlineData)
  std::atomic<uint64_t> ready;   // message index + 1 once the message is complete (written last)
  uint64_t stampLo, stampHi;     // the call it belongs to (transport.h, MsgStamp)
  unsigned char inlineData[32];  // the payload of messages of at most kInlineBytes
};
static_assert(sizeof(ShmSlotHeader) == kSlotHeaderBytes);
inline constexpr size_t kInlineBytes = sizeof(ShmSlotHeader::inlineData);

/// Single copy: a slot whose size word has this bit carries no bytes but where they are in the sender's memory; the
/// receiver reads them with process_vm_readv and frees the slot only after that, so the sender knows a reference
/// is done with once `tail` has passed it.
inline constexpr uint64_t kRefFlag = uint64_t{1} << 63;
struct ShmRef {
  uint64_t address;  // in the sender's address space
  uint64_t bytes;
};
static_assert(sizeof(ShmRef) <= kInlineBytes);

inline size_t roundUp(size_t v, size_t a) { return (v + a - 1) / a * a; }
inline size_t fifoSlotStride(size_t pieceBytes) { return kSlotHeaderBytes + roundUp(pieceBytes, 64); }
inline size_t fifoHeaderBytes() { return roundUp(sizeof(ShmFifoHeader), kLinePair); }

}  // namespace strata::shm
