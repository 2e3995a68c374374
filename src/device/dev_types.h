// The plain types of the device protocol (device/proto.h), shared by the host code that lowers plans and lays out
// memory and by the templates that run them: no templates, no CUDA.
#pragma once

#include <cstdint>

#include "collectives/plan.h"
#include "kernels/reduce_kind.h"
#include "strata/strata.h"

#if defined(__CUDACC__)
#define STRATA_HD_INLINE __host__ __device__ __forceinline__
#else
#define STRATA_HD_INLINE inline
#endif

namespace strata::devproto {

/// 16 bytes as four words, what the data loops move per load and store: one ld/st.v4 on the GPU
/// (DevicePolicy::load16/store16). On the CPU it may alias the typed elements it carries.
#if defined(__CUDACC__)
struct alignas(16) Vec16 {
#else
struct __attribute__((may_alias, aligned(16))) Vec16 {
#endif
  uint32_t w[4];
};

/// Sizes both ends agree on (the set-up exchange checks that every rank has the same). An op of at most
/// llMaxBytes goes as one LL piece; a larger one of at most ll128MaxBytes in LL128 pieces, a larger one still in
/// Simple pieces, both of up to pieceBytes of data. llMaxBytes <= pieceBytes, so an op takes as many slots under any
/// protocol (one per pieceBytes or part), and the plans' rule that no rank runs more than nslots pieces ahead of its
/// peer holds for all three. pieceBytes and llMaxBytes are multiples of 16.
struct ProtoConfig {
  uint32_t pieceBytes = 128 * 1024;  // Simple and LL128: data bytes per slot
  uint32_t nslots = 8;               // slots per connection direction (every protocol)
  uint32_t llMaxBytes = 16 * 1024;   // LL: data bytes per slot (the slot holds twice that in lines)
  uint32_t ll128MaxBytes = 0;        // LL128: the largest op it carries (0: off, and no LL128 slots)
};

/// The LL128 ops of the executor's default configuration where LL128 is on (STRATA_GPU_LL128): up to 512 KiB.
inline constexpr uint32_t kDefaultLL128MaxBytes = 512 * 1024;

/// A Simple slot: a 16-byte header (the word at its start: the byte offset, 0..15, at which the sender placed the
/// piece after the header), then pieceBytes of data at that offset. The sender places a piece at the offset mod 16
/// of the user's memory it writes or reads, so that the slot and the user's buffer move in aligned 16-byte vectors
/// together whatever the alignment of the user's pointer.
inline constexpr uint64_t kSimpleSlotHeader = 16;
STRATA_HD_INLINE uint64_t simpleSlotBytes(const ProtoConfig& cfg) { return cfg.pieceBytes + 2 * kSimpleSlotHeader; }

/// An LL128 line: 128 bytes at a 128-byte aligned address, eight 16-byte vectors; the first seven and the low half
/// of the last carry 120 bytes of the piece, the high half of the last (bytes 120..127) the flag: step + 1.
inline constexpr uint32_t kLL128LineBytes = 128;
inline constexpr uint32_t kLL128LineData = 120;
STRATA_HD_INLINE uint64_t ll128SlotBytes(const ProtoConfig& cfg) {
  if (cfg.ll128MaxBytes == 0) return 0;
  return (static_cast<uint64_t>(cfg.pieceBytes) + kLL128LineData - 1) / kLL128LineData * kLL128LineBytes;
}

/// Where the LL128 slots start in a ConnMem: after the Simple and LL slots, rounded up to a line.
STRATA_HD_INLINE uint64_t ll128Offset(const ProtoConfig& cfg) {
  const uint64_t end = 256 + static_cast<uint64_t>(cfg.nslots) * (simpleSlotBytes(cfg) + 2ull * cfg.llMaxBytes);
  return (end + kLL128LineBytes - 1) / kLL128LineBytes * kLL128LineBytes;
}

/// Bytes of one ConnMem for `cfg`, rounded up to a multiple of 128, so that ConnMems (and whatever follows them)
/// laid out one after another keep their 128-byte alignment.
STRATA_HD_INLINE uint64_t connMemBytes(const ProtoConfig& cfg) {
  const uint64_t used = ll128Offset(cfg) + static_cast<uint64_t>(cfg.nslots) * ll128SlotBytes(cfg);
  return (used + 127) / 128 * 128;
}

/// The receiver-held memory of one direction of one connection; `simple` and `ll` follow the header.
struct alignas(128) ConnCtrl {
  uint64_t head;
  char pad0[120];
  uint64_t tail;
  char pad1[120];
};
static_assert(sizeof(ConnCtrl) == 256, "ConnCtrl is two 128-byte lines");

STRATA_HD_INLINE ConnCtrl* connCtrl(void* mem) { return static_cast<ConnCtrl*>(mem); }
/// The Simple slot of `step` (16-byte aligned): its header word, then the data from simpleData().
STRATA_HD_INLINE char* simpleSlot(void* mem, const ProtoConfig& cfg, uint64_t step) {
  return static_cast<char*>(mem) + 256 + (step % cfg.nslots) * simpleSlotBytes(cfg);
}
STRATA_HD_INLINE char* simpleData(char* slot) { return slot + kSimpleSlotHeader; }
STRATA_HD_INLINE uint64_t* llSlot(void* mem, const ProtoConfig& cfg, uint64_t step) {
  char* base = static_cast<char*>(mem) + 256 + static_cast<uint64_t>(cfg.nslots) * simpleSlotBytes(cfg);
  return reinterpret_cast<uint64_t*>(base + (step % cfg.nslots) * 2ull * cfg.llMaxBytes);
}
/// The first line of the LL128 slot of `step` (128-byte aligned when `mem` is).
STRATA_HD_INLINE Vec16* ll128Slot(void* mem, const ProtoConfig& cfg, uint64_t step) {
  return reinterpret_cast<Vec16*>(static_cast<char*>(mem) + ll128Offset(cfg) +
                                  (step % cfg.nslots) * ll128SlotBytes(cfg));
}

/// Why a lane stopped. Stored in Failure::code; 0 while nothing failed.
/// kFailMismatch: a send/recv header said the sender's message has other bytes than the receive expects
/// (Failure::expected, Failure::got).
enum FailCode : uint32_t { kFailNone = 0, kFailAborted = 1, kFailTimedOut = 2, kFailBadPlan = 3, kFailMismatch = 4 };

/// The first failure of a rank's call, written by the lane that saw it (compare-and-swap on code).
struct Failure {
  uint32_t code;  // FailCode
  int32_t lane;
  int32_t op;           // index of the op in its lane
  int32_t peer;         // the peer the lane was waiting for (-1: none)
  uint32_t waitingFor;  // 0 sender slot (tail), 1 Simple data (head), 2 LL data, 3 a send/recv header, 4 lane `peer`
                        // of this rank (a cross-lane wait), 5 LL128 data
  uint32_t pad;
  uint64_t expected;  // kFailMismatch: the bytes this rank's receive expects
  uint64_t got;       // and the bytes the sender's header announced
};

/// A DevOp of this kind is no plan op: a send/recv header, one LL piece of two lines carrying the message's total
/// bytes (count). The sender writes it before the message's data on that connection and channel; the receiver
/// compares it with what its receive expects, so a message of another size fails the call (kFailMismatch) instead
/// of being cut short or waited for until the deadline.
inline constexpr uint8_t kDevOpHeader = 200;

/// One op of a lowered plan: the plan IR's Op with offsets in elements, peers as connection indices.
struct DevOp {
  uint8_t kind;  // OpKind, or kDevOpHeader
  uint8_t pad[3];
  int32_t recvPeer;  // -1: none
  int32_t sendPeer;
  // kBufSend / kBufRecv / kBufScratch; with a buffer table (LaneArgs::bufTable, a group's send/recv calls), an
  // index into it: call i's buffers are kBuffersPerColl * i + kBufSend / kBufRecv.
  uint32_t srcBuf;
  uint32_t dstBuf;
  int32_t afterLane;  // with afterOps > 0: the op starts once lane afterLane of this call has completed afterOps ops
  uint64_t srcOff;    // elements
  uint64_t dstOff;
  uint64_t count;     // elements (a header: the message's bytes)
  uint32_t afterOps;  // 0: no cross-lane wait (the plan IR's Op::afterLane/afterOps, lowered)
  uint32_t pad2;
};

static_assert(sizeof(DevOp) == 56, "DevOp is 56 bytes");

/// What a lane needs: its ops, the rank's buffers and connections, the stop conditions.
struct LaneArgs {
  const DevOp* ops;
  uint32_t nops;
  int32_t lane;
  void* bufs[kBuffersPerColl];  // send, recv, scratch of this rank
  void* const* bufTable;        // not null: the ops' buffers index this table instead (a group's send/recv calls)
  void* const* recvMem;         // [peer]: ConnMem of peer -> me (in my memory)
  void* const* sendMem;         // [peer]: ConnMem of me -> peer (the peer's, mapped)
  uint64_t* sendStep;           // [peer]: pieces sent to peer so far (persistent)
  uint64_t* recvStep;           // [peer]: pieces received from peer so far (persistent)
  ProtoConfig cfg;
  strataDataType_t dtype;
  ReduceKind op;
  double preMul;      // float types: multiply every element read from the send buffer (1: none)
  int64_t preMulInt;  // integer types: the same in the type's arithmetic (1: none)
  // Integer Avg: once every lane has finished, the last one divides this rank's recvElems results by postDiv
  // (truncating, as the host's divideBy); lanesDone counts finished lanes (nlanes of them) and is reset to 0 by the
  // last, so a replayed kernel starts from 0 again.
  uint64_t postDiv;  // 1: none
  uint64_t recvElems;
  uint32_t* lanesDone;
  uint32_t nlanes;
  // Not null when the call's plan has cross-lane waits (DevOp::afterOps): [lane] ops that lane has completed, zeroed
  // before every call (a captured call's memset replays with it).
  uint32_t* laneOps;
  const uint32_t* abortWord;  // nonzero: stop (strataCommAbort, a dead peer)
  uint32_t* stopWord;         // this rank's: a lane that fails sets it so the others stop too
  uint64_t deadlineNs;        // P::nowNs() past this: time out (0: none, or timeoutNs from the lane's start)
  uint64_t timeoutNs;         // with deadlineNs 0: the lane's deadline is its start + this (0: none), read on the
                              // device's own clock, which the host cannot name
  Failure* failure;
};

}  // namespace strata::devproto
