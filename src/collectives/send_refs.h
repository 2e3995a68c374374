// Which sends of a plan may go as references to this rank's own memory (shm single copy: the receiver reads the
// region straight out of the sender's buffer, Connection::sendCommitRef). A reference is safe only while nothing
// writes the region before the receiver has read it. Within a call that is a property of the plan, computed here
// once per plan (the executor caches it with the plan); across calls the connection holds the call until the
// receiver has released every reference (Connection::flushed).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "collectives/plan.h"

namespace strata {

/// No connection sends a reference for less (STRATA_SHM_SINGLE_COPY_BYTES has this lower bound): a plan none of
/// whose messages reach it needs no analysis.
inline constexpr size_t kMinRefBytes = 4096;

/// Where a plan buffer lies in memory relative to another one: buffer `buf` of the plan starts at element
/// `offset` of buffer `same` (an in-place call: the send buffer is part of the receive buffer).
struct BufferAlias {
  int buf = 0;
  int same = 0;
  int64_t offset = 0;  // elements
};

/// The ops of one plan whose sent region may travel as a reference: kSend and kCopySend (their source), kRecvCopySend
/// (the destination it has just written and forwards; not kRecvReduceCopySend, see send_refs.cc), where no later op of
/// the same lane, no op of another lane and not the op itself writes memory overlapping that region.
class SendRefs {
 public:
  SendRefs() = default;
  /// Analyses `plan`; buffers not named in `aliases` are taken to be disjoint from each other.
  SendRefs(const Plan& plan, std::span<const BufferAlias> aliases);

  /// Drops the references whose receiver would reduce them: it would read them into a bounce buffer and reduce
  /// from there, a system call more and no copy less than a reduction straight from its FIFO slot. `peerPlan(p)`
  /// returns rank p's plan of the same call (the same generator and arguments); message streams are matched by
  /// element position along each (sender, receiver) direction. Only a matter of speed: a receiver reads a
  /// reference correctly in any op.
  void dropReducedByPeers(const Plan& plan, const std::function<Plan(int)>& peerPlan);

  /// Whether `op`, an op of the analysed plan (by address), may send references.
  bool allows(const Op* op) const;
  /// Whether any communicating op of `plan` moves kMinRefBytes or more in one piece of at most `pieceBytes`.
  static bool worthAnalysing(const Plan& plan, size_t elemSize, size_t pieceBytes);
  bool empty() const { return ops_.empty(); }
  size_t size() const { return ops_.size(); }

 private:
  std::vector<const Op*> ops_;  // sorted
};

}  // namespace strata
